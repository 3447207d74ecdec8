"""The papers' reproductions, a package beside the vbnn library: one module per paper, each
with one entry point and a quick mode, run with ``vbnn reproduce NAME``.

This package imports vbnn; vbnn never imports it. The ``vbnn`` command finds ``reproduce``
through the ``vbnn.commands`` entry point that this package declares (``vbnn_lab.cli``). Each
module listed in ``REPRODUCTIONS`` defines, at the top level and without heavy imports:

- ``DESCRIPTION: str`` - one line for ``vbnn reproduce --help``;
- ``add_arguments(parser: argparse.ArgumentParser) -> None`` - its flags (``--quick``, ``--out``);
- ``run(args: argparse.Namespace) -> None`` - the job; writes tables and figures to ``args.out``.

``vbnn reproduce`` imports every registered module to build its flags (when it is parsed, not for
``vbnn --help``), so heavy imports (matplotlib, Pyro, Optuna) belong inside the functions that
need them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from vbnn.core.contracts import ForwardMode

# The estimator every layer of the papers' LeNet-5 trains with: Neklyudov et al. 2019 (section 4:
# "the local reparameterization trick ..., and we also rely on it in our experiments"), where the
# library's default for convolutions is one weight draw a batch.
PAPERS_ESTIMATOR = ForwardMode.LOCAL

# name on the command line -> module under vbnn_lab
REPRODUCTIONS: dict[str, str] = {
    # Trippe & Turner 2017: tuned Table 1 with SGLD, Figures 1-5
    "overpruning": "overpruning",
    # Farquhar et al. 2020 and its blog: product covariance, NUTS, diagonal gap vs depth
    "depth": "depth",
    # Neklyudov et al. 2018, 2019: variance layers, kappa, LeNet-5
    "variance-networks": "variance_networks",
    # Farquhar et al. 2020 sec. 5 on UCI: MF vs FC and GD at 1-3 hidden layers
    "uci-depth": "uci_depth",
    # Neklyudov et al. 2019 6.3 / 2018 6.3: iterative FGSM on MNIST, Fashion-MNIST
    "adversarial": "adversarial",
    # Neklyudov et al. 2019 6.2: REINFORCE with variance-layer noise (gymnasium)
    "exploration": "exploration",
    # Neklyudov et al. 2019 appendix D, Fig. 9
    "variance-activations": "variance_activations",
}


def load(name: str) -> ModuleType:
    """The experiment module registered as ``name``."""
    if name not in REPRODUCTIONS:
        raise ValueError(f"unknown reproduction {name!r}: choose from {', '.join(REPRODUCTIONS)}")
    return importlib.import_module(f"vbnn_lab.{REPRODUCTIONS[name]}")
