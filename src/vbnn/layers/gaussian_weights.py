"""A factorised Gaussian weight tensor seen from outside its layer: its mean and its std.

Optimisers that move a Gaussian posterior by its natural gradient (``training.natural_gradient``)
read each weight's mean, its std and the gradient of the loss with respect to the std (as the
curvature it estimates), and write the std they compute. The layer knows how its std is
parameterised (sigma = exp(rho) or softplus(rho)); ``GaussianWeights`` hides that, so the
optimiser works on every parameterisation, and the posterior stays in the layer's own parameters
at every step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class GaussianWeights:
    """q(w) = N(mean, std^2) elementwise over one parameter tensor of a family layer.

    Attributes:
        name: "weight" or "bias", for messages.
        mean: the parameter holding the means (M, ...).
        raw: the parameter the std is computed from, of the same shape.
        to_std: raw -> std (elementwise, differentiable).
        from_std: std -> raw (elementwise inverse of ``to_std``).
        slope: raw -> d std / d raw (elementwise).
    """

    name: str
    mean: nn.Parameter
    raw: nn.Parameter
    to_std: Callable[[torch.Tensor], torch.Tensor]
    from_std: Callable[[torch.Tensor], torch.Tensor]
    slope: Callable[[torch.Tensor], torch.Tensor]

    def std(self) -> torch.Tensor:
        """The std of every entry, detached."""
        return self.to_std(self.raw.detach())

    @torch.no_grad()
    def set_std(self, std: torch.Tensor) -> None:
        """Write ``std`` into the raw parameter (in place, keeping the parameter object)."""
        self.raw.copy_(self.from_std(std))

    def curvature(self) -> torch.Tensor:
        """(d loss / d std) / std of every entry, d loss / d std from the raw parameter's gradient
        by the chain rule (zeros where it has none): by Price's theorem the one-draw estimate of
        the expected diagonal Hessian (IVON's h_hat). Where the std's slope is the std itself
        (sigma = exp(raw)) it is computed once."""
        raw = self.raw.detach()
        if self.raw.grad is None:
            return torch.zeros_like(raw)
        std = self.to_std(raw)
        slope = std if self.slope is self.to_std else self.slope(raw)
        return (self.raw.grad / slope).div_(std)
