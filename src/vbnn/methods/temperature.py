"""``NAME+ts``: any classifier method with its predictive temperature-scaled (Guo et al. 2017).

The entry holds out ``EntryRun.validation_fraction`` of the training examples (the early-stopping
split of a method that stops early, else a split of its own), trains the method on the rest, and
fits one temperature T to the held-out examples: the T > 0 minimising the NLL of
softmax(log p_bar(x) / T), p_bar the method's predictive (the mean of its K samples'
probabilities; ``vbnn.fit_temperature``). The scaled predictive is that softmax; its one sample
is log p_bar(x) / T, so the mutual information of a scaled entry is not defined (as a point
network's).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vbnn.calibration import fit_temperature
from vbnn.methods.base import Method
from vbnn.networks.predictive import predictive_probabilities

SUFFIX = "+ts"


@dataclass(frozen=True)
class TemperatureScaled:
    """``base`` with a temperature fitted on held-out examples (module docstring)."""

    base: Method

    @property
    def name(self) -> str:
        return self.base.name + SUFFIX


def log_mean_probabilities(samples: torch.Tensor) -> torch.Tensor:
    """log p_bar (N, C) of K logit samples (K, N, C)."""
    probabilities = predictive_probabilities(samples.double())
    return probabilities.clamp_min(torch.finfo(probabilities.dtype).tiny).log()


def scale_samples(
    validation: torch.Tensor, labels: torch.Tensor, *tested: torch.Tensor | None
) -> tuple[float, list[torch.Tensor | None]]:
    """T fitted on the held-out samples (K, M, C) and labels (M,), and each of ``tested``
    (K, N, C) as its one scaled sample (1, N, C)."""
    temperature = fit_temperature(log_mean_probabilities(validation), labels)
    scaled = [
        None if part is None else (log_mean_probabilities(part) / temperature).unsqueeze(0)
        for part in tested
    ]
    return float(temperature), scaled
