"""NUTS reference posteriors with Pyro, over the flat parameter vector of one of our own models.

The potential U(theta) = -log p(y | x, theta) - log p(theta) is built from a vbnn ``nn.Module`` with
``torch.func.functional_call``: the module is never re-implemented as a Pyro model. Pyro's
``NUTS(potential_fn=...)`` (Hoffman & Gelman 2014; step size by dual averaging, diagonal mass
matrix adapted in warm-up) draws from exp(-U). Paper: Farquhar et al. 2020, section 4 and
appendix B (100 burn-in, 1000 samples, target acceptance 0.8, prior precision 1).

Pyro's own ``jit_compile`` flag only traces *model*-based potentials and is ignored for a
``potential_fn``; :class:`Compilation` offers the equivalents here (see benchmarks/README.md).

Diagnostics (Pyro's ``pyro.ops.stats``; ArviZ 0.23 warns on import, which the test suite treats
as an error): split R-hat and effective sample size of every coordinate and of the log density,
mean acceptance probability, divergences, and the number of leapfrog steps of every sample
(counted by wrapping the potential), from which the tree depth is ceil(log2(steps + 1)).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

Potential = Callable[[torch.Tensor], torch.Tensor]
SITE = "theta"
PYRO_INSTALL = "pip install 'vbnn[nuts]'"


def _pyro() -> Any:
    """The ``pyro`` package, an optional dependency: an ImportError names the extra to install."""
    try:
        import pyro.infer
        import pyro.ops.stats
    except ImportError as error:
        raise ImportError(f"Pyro NUTS needs Pyro ({error}): {PYRO_INSTALL}") from error
    return pyro


class Compilation(str, Enum):
    """How the potential is evaluated.

    NONE: eager PyTorch. TRACE: a ``torch.jit.trace`` graph (what Pyro's ``jit_compile=True``
    does for model-based potentials; torch 2.13 marks it deprecated, the warning is silenced here).
    torch refuses to trace through ``functional_call`` ("The stateless API can't be used with
    Jitted modules"), so TRACE works only for potentials written without it, not for
    :func:`module_potential`. COMPILE: ``torch.compile`` (Inductor; needs a C++ compiler, compiles
    on the first calls; emits deprecation warnings from torch's own imports).
    """

    NONE = "none"
    TRACE = "trace"
    COMPILE = "compile"


@dataclass(frozen=True)
class NUTSConfig:
    """Settings of one NUTS chain (defaults: Farquhar et al. 2020 appendix B, except the tree-depth
    cap).

    Attributes:
        warmup: burn-in iterations (step size and mass matrix adaptation), discarded.
        samples: kept iterations.
        target_accept: dual-averaging target acceptance probability.
        max_tree_depth: at most 2^depth - 1 leapfrog steps a sample. Farquhar et al. 2020 used "100
        leapfrog steps
            per sample" with Hamiltorch; depth 7 (<= 127 steps) is the closest NUTS cap.
        compilation: eager or traced potential.
        seed: Pyro's random seed for this chain.
    """

    warmup: int = 100
    samples: int = 1000
    target_accept: float = 0.8
    max_tree_depth: int = 7
    compilation: Compilation | str = Compilation.NONE
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "compilation", Compilation(self.compilation))
        checks = {
            "warmup": self.warmup >= 0,
            "samples": self.samples >= 4,
            "target_accept": 0 < self.target_accept < 1,
            "max_tree_depth": 1 <= self.max_tree_depth <= 15,
            "seed": self.seed >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"NUTSConfig: invalid {name}={getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "warmup": self.warmup,
            "samples": self.samples,
            "target_accept": self.target_accept,
            "max_tree_depth": self.max_tree_depth,
            "compilation": self.compilation.value,
            "seed": self.seed,
        }


@dataclass(frozen=True)
class NUTSResult:
    """Kept samples (samples, D), their log densities -U (samples,), and diagnostics."""

    samples: np.ndarray
    log_density: np.ndarray
    leapfrog_steps: np.ndarray
    diagnostics: dict[str, float] = field(default_factory=dict)


class FlatParameters:
    """The parameters of a module as one flat vector, in ``named_parameters`` order.

    Args:
        module: any ``nn.Module``; its current values are the initial vector.
    """

    def __init__(self, module: nn.Module) -> None:
        self.names = [name for name, _ in module.named_parameters()]
        self.shapes = [tuple(p.shape) for _, p in module.named_parameters()]
        self.sizes = [math.prod(shape) for shape in self.shapes]
        if not self.names:
            raise ValueError("FlatParameters: the module has no parameters")

    @property
    def dimension(self) -> int:
        return sum(self.sizes)

    def flatten(self, module: nn.Module) -> torch.Tensor:
        """The module's current parameters as a detached vector (D,)."""
        return torch.cat([p.detach().reshape(-1) for _, p in module.named_parameters()])

    def unflatten(self, vector: torch.Tensor) -> dict[str, torch.Tensor]:
        """A flat vector (D,) -> {name: tensor of the parameter's shape} (views, differentiable)."""
        if vector.shape != (self.dimension,):
            raise ValueError(
                f"FlatParameters.unflatten: expected a vector of length {self.dimension}, "
                f"got shape {tuple(vector.shape)}"
            )
        pieces = torch.split(vector, self.sizes)
        return {
            name: piece.reshape(shape)
            for name, piece, shape in zip(self.names, pieces, self.shapes, strict=True)
        }


def module_potential(
    module: nn.Module,
    log_likelihood: Callable[[nn.Module, dict[str, torch.Tensor]], torch.Tensor],
    prior_precision: float = 1.0,
) -> tuple[Potential, FlatParameters]:
    """U(theta) = -log_likelihood(theta) + prior_precision / 2 * |theta|^2 (up to a constant).

    Args:
        module: the model; ``log_likelihood(module, params)`` must evaluate it through
            ``functional_call(module, params, ...)`` and return a scalar.
        prior_precision: precision of the isotropic Gaussian prior over every parameter.

    Returns:
        potential (D,) -> scalar, and the flat-vector layout.
    """
    if not prior_precision > 0:
        raise ValueError(f"module_potential: prior_precision must be > 0, got {prior_precision}")
    layout = FlatParameters(module)

    def potential(theta: torch.Tensor) -> torch.Tensor:
        params = layout.unflatten(theta)
        return -log_likelihood(module, params) + 0.5 * prior_precision * theta.pow(2).sum()

    return potential, layout


def call_with(module: nn.Module, params: dict[str, torch.Tensor], *args: Any) -> torch.Tensor:
    """``functional_call`` shorthand: the module's forward with ``params`` substituted."""
    return functional_call(module, params, args)


def _compiled(potential: Potential, compilation: Compilation, example: torch.Tensor) -> Potential:
    if compilation is Compilation.NONE:
        return potential
    if compilation is Compilation.COMPILE:
        return torch.compile(potential, dynamic=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        return torch.jit.trace(potential, (example.detach().clone().requires_grad_(True),))


def run_nuts(
    potential: Potential, initial: torch.Tensor, config: NUTSConfig, progress: bool = False
) -> NUTSResult:
    """One NUTS chain from ``initial`` (D,) with Pyro; see the module docstring for diagnostics.

    ``pyro.set_rng_seed(config.seed)`` seeds Pyro's (global torch, NumPy, random) generators, so
    the same config and start give the same chain. ``progress`` shows Pyro's tqdm bar (stderr).
    """
    pyro = _pyro()
    MCMC, NUTS = pyro.infer.MCMC, pyro.infer.NUTS

    if initial.dim() != 1 or not torch.all(torch.isfinite(initial)):
        raise ValueError(
            f"run_nuts: initial must be a finite vector (D,), got {tuple(initial.shape)}"
        )
    start_energy = potential(initial)
    if not torch.isfinite(start_energy):
        raise ValueError(f"run_nuts: the potential at the initial point is {float(start_energy)}")
    evaluate = _compiled(potential, config.compilation, initial)
    counter = [0]

    def counted(params: dict[str, torch.Tensor]) -> torch.Tensor:
        counter[0] += 1
        return evaluate(params[SITE])

    steps: list[int] = []
    log_density: list[float] = []
    adapted: dict[str, float] = {}

    def hook(kernel: Any, _sample: Any, stage: str, _index: int) -> None:
        steps.append(counter[0])
        counter[0] = 0
        if stage == "Sample":
            log_density.append(-float(kernel._potential_energy_last))
            # running mean over kept samples of the NUTS acceptance statistic (target 0.8)
            adapted["accept_probability"] = float(kernel._mean_accept_prob)
            adapted["step_size"] = float(kernel.step_size)

    pyro.set_rng_seed(config.seed)
    kernel = NUTS(
        potential_fn=counted,
        target_accept_prob=config.target_accept,
        max_tree_depth=config.max_tree_depth,
        adapt_step_size=True,
        adapt_mass_matrix=True,
        full_mass=False,
    )
    mcmc = MCMC(
        kernel,
        num_samples=config.samples,
        warmup_steps=config.warmup,
        initial_params={SITE: initial.detach().clone()},
        hook_fn=hook,
        disable_progbar=not progress,
    )
    began = time.perf_counter()
    mcmc.run()
    seconds = time.perf_counter() - began
    samples = mcmc.get_samples()[SITE].detach().numpy().astype(np.float64)
    kept_steps = np.asarray(steps[-config.samples :], dtype=np.int64)
    chain_diagnostics = mcmc.diagnostics()
    diagnostics = summarise(samples, np.asarray(log_density), kept_steps, config.max_tree_depth)
    diagnostics.update(
        seconds=seconds,
        samples_per_second=config.samples / seconds,
        leapfrog_steps_total=float(sum(steps)),  # warm-up included
        ess_per_second=diagnostics["ess_median"] / seconds,
        accept_probability=adapted["accept_probability"],
        moved_fraction=float(chain_diagnostics["acceptance rate"]["chain 0"]),
        divergences=float(len(chain_diagnostics["divergences"]["chain 0"])),
        step_size=adapted["step_size"],
    )
    return NUTSResult(samples, np.asarray(log_density), kept_steps, diagnostics)


def summarise(
    samples: np.ndarray, log_density: np.ndarray, steps: np.ndarray, max_tree_depth: int
) -> dict[str, float]:
    """ESS and split R-hat (Pyro's estimators on one chain) plus tree statistics.

    Args:
        samples: (N, D) one chain; log_density: (N,); steps: (N,) leapfrog steps per sample.
    """
    stats = _pyro().ops.stats
    effective_sample_size = stats.effective_sample_size
    split_gelman_rubin = stats.split_gelman_rubin

    chain = torch.as_tensor(samples).unsqueeze(0)
    density = torch.as_tensor(log_density, dtype=torch.float64).reshape(1, -1, 1)
    ess = effective_sample_size(chain, chain_dim=0, sample_dim=1)
    rhat = split_gelman_rubin(chain, chain_dim=0, sample_dim=1)
    depth = np.ceil(np.log2(steps + 1))
    return {
        "ess_min": float(ess.min()),
        "ess_median": float(ess.median()),
        "ess_log_density": float(effective_sample_size(density, 0, 1)[0]),
        "rhat_max": float(rhat.max()),
        "rhat_log_density": float(split_gelman_rubin(density, 0, 1)[0]),
        "leapfrog_steps_mean": float(steps.mean()),
        "tree_depth_mean": float(depth.mean()),
        "max_tree_depth_hits": float((depth >= max_tree_depth).sum()),
    }
