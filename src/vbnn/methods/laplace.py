"""``laplace``: a post-hoc Laplace approximation of the point network.

Through laplace-torch (Daxberger et al. 2021; the optional extra ``vbnn[laplace]``): after the
point network is trained (maximum likelihood, early stopped), the weights theta of its last
``nn.Linear`` get the Gaussian posterior N(theta_MAP, (H + delta I)^-1), with H the generalised
Gauss-Newton matrix of the training data in Kronecker factors (KFAC: one block per parameter
tensor, so the weight and the bias are independent a posteriori) and the prior precision
delta chosen by maximising the Laplace approximation of the marginal likelihood
(``optimize_prior_precision(method="marglik")``). The predictive linearises the network in the
last layer (the "GLM" predictive, Immer et al. 2021): the logits (or a regressor's mean) of x are
Gaussian, N(f_MAP(x), J(x) Sigma J(x)^T), and K draws of it are the entry's predictive samples.
A classifier's samples are given as log softmax(f_k), which a softmax maps back to softmax(f_k).

vbnn wraps laplace-torch rather than writing its own: the curvature backends and the marginal
likelihood are laplace-torch's, the post-hoc method users reach for first.
"""

from __future__ import annotations

import copy
import importlib
import time
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from vbnn.methods.base import Draw, Fitted, Method
from vbnn.methods.passes import device_of

INSTALL = "pip install 'vbnn[laplace]' (laplace-torch)"


def laplace_package() -> Any:
    """laplace-torch's ``Laplace`` constructor.

    Raises:
        ValueError: laplace-torch is not installed (how to install it said).
    """
    with warnings.catch_warnings():
        # its curvature backends decorate functions with torch.jit.script at import
        warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated", DeprecationWarning)
        try:
            module = importlib.import_module("laplace")
        except ImportError as error:
            raise ValueError(f"'laplace' needs laplace-torch: {INSTALL}") from error
    return module.Laplace


def last_linear(network: nn.Module, example: torch.Tensor) -> str:
    """The path of the module that computes ``network``'s output, which must be an ``nn.Linear``
    (laplace-torch's last layer is the last module with parameters that a forward pass runs).

    Raises:
        ValueError: the last module run is not an ``nn.Linear`` (named).
    """
    order: list[str] = []
    hooks = [
        module.register_forward_hook(lambda *_, path=path: order.append(path))
        for path, module in network.named_modules()
        if not list(module.children()) and list(module.parameters(recurse=False))
    ]
    try:
        with torch.no_grad():
            network.eval()
            network(example)
    finally:
        for hook in hooks:
            hook.remove()
    if not order:
        raise ValueError(f"'laplace': {type(network).__name__} has no layer with weights")
    last = dict(network.named_modules())[order[-1]]
    if not isinstance(last, nn.Linear):
        raise ValueError(
            f"'laplace': the last layer with weights of {type(network).__name__} is "
            f"{order[-1]!r}, an {type(last).__name__}; the last-layer Laplace needs an nn.Linear"
        )
    return order[-1]


def fit_laplace(
    network: nn.Module,
    data: tuple[torch.Tensor, torch.Tensor],
    regression: bool,
    noise_std: float,
    batch_size: int | None,
    weights: str = "last_layer",
    structure: str = "kron",
) -> Any:
    """The last-layer KFAC Laplace of the trained ``network`` on its training ``data``, with the
    prior precision of the largest marginal likelihood (module docstring).

    Args:
        noise_std: a regressor's trained noise std sigma (the Gaussian likelihood's); ignored for
            a classifier.
        weights: laplace-torch's ``subset_of_weights``: "last_layer", or "all" (every parameter
            that requires a gradient: an adapter's, ``methods.lora``).
        structure: laplace-torch's ``hessian_structure`` of H: "kron", "diag" or "full".
    """
    laplace = laplace_package()
    device = next(network.parameters()).device
    x, y = data
    targets = y.reshape(-1, 1) if regression else y
    loader = DataLoader(
        TensorDataset(x.to(device), targets.to(device)), batch_size=batch_size or len(x)
    )
    network.eval()
    approximation = laplace(
        network,
        "regression" if regression else "classification",
        subset_of_weights=weights,
        hessian_structure=structure,
        sigma_noise=noise_std if regression else 1.0,
    )
    approximation.fit(loader, progress_bar=False)
    with warnings.catch_warnings():
        # a reminder that the link approximation is chosen at prediction (glm samples here)
        warnings.filterwarnings("ignore", "By default `link_approx` is `probit`", UserWarning)
        approximation.optimize_prior_precision(method="marglik", pred_type="glm")
    return approximation


@torch.no_grad()
def laplace_samples(
    approximation: Any,
    x: torch.Tensor,
    samples: int,
    batch_size: int | None,
    seed: int,
    regression: bool,
    device: torch.device,
) -> torch.Tensor:
    """K draws of the linearised predictive (module docstring): (K, N, C) log-probabilities of a
    classifier, (K, N, 1) means of a regressor; ``batch_size`` inputs at a time, every draw
    seeded by ``seed`` (a generator on ``device``, the network's)."""
    generator = torch.Generator(device).manual_seed(seed)
    step = batch_size or len(x)
    parts = []
    for start in range(0, len(x), step):
        chunk = x[start : start + step].to(device)
        if regression:
            mean, variance = approximation(chunk, pred_type="glm")  # (B, 1), (B, 1, 1)
            noise = torch.randn(
                (samples, *mean.shape), generator=generator, device=device, dtype=mean.dtype
            )
            parts.append(mean + variance.squeeze(-1).clamp_min(0).sqrt() * noise)
        else:
            probabilities = approximation.predictive_samples(
                chunk, pred_type="glm", n_samples=samples, generator=generator
            )
            tiny = torch.finfo(probabilities.dtype).tiny
            parts.append(probabilities.clamp_min(tiny).log())
    return torch.cat(parts, 1).cpu()


def laplace_predictor(
    fitted: Fitted, run: Any, seed: int, weights: str = "last_layer", structure: str = "kron"
) -> tuple[Draw, float]:
    """``fit_laplace`` of the trained member (``weights``, ``structure`` as there), then its
    ``laplace_samples``: the predictive and the seconds the fit took."""
    start = time.perf_counter()
    approximation = fit_laplace(
        fitted.network,
        fitted.data,
        fitted.regression,
        fitted.noise_std,
        run.batch_size,
        weights,
        structure,
    )
    seconds = time.perf_counter() - start
    draw = partial(
        laplace_samples,
        approximation,
        samples=run.samples,
        batch_size=run.batch_size,
        seed=seed,
        regression=fitted.regression,
        device=device_of(fitted.network),
    )
    return draw, seconds


def check_tensor_inputs(example: Any) -> None:
    """ValueError for a mapping of inputs, which laplace-torch does not take; ValueError when
    laplace-torch is not installed (``laplace_package``)."""
    if not isinstance(example, torch.Tensor):
        raise ValueError("laplace-torch takes tensor inputs, not a mapping of them")
    laplace_package()


@dataclass(frozen=True)
class Laplace(Method):
    """The early-stopped point network, then its last-layer Laplace (module docstring)."""

    def check(self, network: nn.Module, example: Any, run: Any) -> None:
        check_tensor_inputs(example)
        last_linear(copy.deepcopy(network), example)

    def predictor(self, fitted: Fitted, run: Any, seed: int) -> tuple[Draw, float]:
        return laplace_predictor(fitted, run, seed)
