"""How any stochastic classifier predicts (Neklyudov et al. 2019 eqs. 2-3).

``predict_probabilities(model, x, mode, noise, samples)`` works for any module holding family
layers whose output is logits: (N, C) for one network, (M, N, C) for a stack
(``layers.modes.as_input`` adds nothing for one network and the model dimension for a stack). It
averages the softmax over ``samples`` passes in ``mode`` (``vbnn.sample``, then
``networks.predictive.predictive_probabilities``, in float64, returned in the logits' dtype):

    p(t | x) = 1/K sum_k softmax(f_k(x)),    f_k drawn in ``mode``;

MEAN is one pass, p(t | x, E_q W) (mean propagation, eq. 3). The four predictions of Neklyudov et
al. 2019 Table 2 (``PREDICTIONS``) are MEAN; WEIGHTS with K = 1 ("1 samp."); WEIGHTS with K
samples (the ensemble, eq. 2); ZERO_MEAN with K samples (Theorem 1).
"""

from __future__ import annotations

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import NoiseSource
from vbnn.layers.modes import network_output, stack_size
from vbnn.networks.predictive import predictive_probabilities, sample

# The four predictions of Neklyudov et al. 2019 Table 2, by the label results store them under:
# (forward mode, whether K passes are averaged; otherwise one pass).
PREDICTIONS: dict[str, tuple[ForwardMode, bool]] = {
    "deterministic": (ForwardMode.MEAN, False),
    "sample": (ForwardMode.WEIGHTS, False),
    "ensemble": (ForwardMode.WEIGHTS, True),
    "zero-mean": (ForwardMode.ZERO_MEAN, True),
}


@torch.no_grad()
def predict_probabilities(
    model: nn.Module,
    x: torch.Tensor,
    mode: ForwardMode | str,
    noise: NoiseSource | None = None,
    samples: int = 1,
    batch_size: int = 1000,
) -> torch.Tensor:
    """Predictive class probabilities (M, N, C) of ``x`` (M, N, ...) ((N, C) for one network),
    averaged over ``samples`` passes in ``mode`` (module docstring).

    Args:
        noise: the noise source of the passes (needed unless ``mode`` is MEAN).
        samples: K, passes averaged (MEAN: one pass whatever K).
        batch_size: examples per forward pass (memory only; the weight samples of one pass are
            shared by its examples, so in WEIGHTS mode K weight draws are made per batch).
    """
    mode = ForwardMode(mode)
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if mode is not ForwardMode.MEAN and noise is None:
        raise ValueError(f"mode {mode.value!r} samples weights: pass a noise source")
    rows = 0 if stack_size(model) is None else 1
    outputs = []
    for start in range(0, x.shape[rows], batch_size):
        chunk = x.narrow(rows, start, min(batch_size, x.shape[rows] - start))
        if mode is ForwardMode.MEAN:
            outputs.append(torch.softmax(network_output(model, chunk, mode), -1))
            continue
        logits = sample(model, chunk, samples, mode, noise=noise)
        outputs.append(predictive_probabilities(logits).to(logits.dtype))
    return torch.cat(outputs, dim=rows)


def predict(
    model: nn.Module,
    x: torch.Tensor,
    prediction: str,
    noise: NoiseSource | None = None,
    samples: int = 20,
) -> torch.Tensor:
    """Class probabilities of one of the ``PREDICTIONS`` ("deterministic", "sample", "ensemble",
    "zero-mean"), with K = ``samples`` for the averaged ones."""
    if prediction not in PREDICTIONS:
        raise ValueError(f"unknown prediction {prediction!r}; choose from {list(PREDICTIONS)}")
    mode, averaged = PREDICTIONS[prediction]
    return predict_probabilities(model, x, mode, noise, samples if averaged else 1)
