"""Pruned hidden units of every layer of a deeper MLP (Trippe & Turner 2017 sec. 3; Farquhar et al.
2020 sec. 5).

``diagnostics.pruning`` counts the pruned units of a one-hidden-layer network. For an MLP with L
hidden layers, h^l = phi(W^l h^(l-1) + b^l), l = 1..L, and output f = W^(L+1) h^L + b^(L+1), the
same definition applies layer by layer. Unit j of hidden layer l is **pruned** when both hold:

1. every *outgoing* weight W^(l+1)_kj (to unit k of the next layer, or to the output) is
   indistinguishable from zero under q: SNR = |E w| / std(w) < ``snr_threshold`` for all k, so
   the unit's mean contribution to the next layer is ~0;
2. every *incoming* weight W^l_ji and its bias b^l_j sit at the prior:
   KL(q(w) || N(0, s^2)) < ``kl_threshold`` nats for all i.

For L = 1 this is exactly ``pruning.pruned_units`` with its defaults (tested). The KL is that of
each weight's marginal (for FC it ignores the correlations). A point estimate (ES, MAP: std 0)
has an infinite KL and an infinite SNR, so none of its units counts as pruned.
"""

from __future__ import annotations

from itertools import pairwise

import torch

from vbnn.diagnostics.pruning import KL_THRESHOLD, SNR_THRESHOLD, kl_per_weight
from vbnn.networks.mlp import MLP


def _with_bias(layer: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, std) of a dense layer's weights with its bias as the last input row, (M, I + 1, O)."""
    weight_mean, bias_mean = layer.posterior_mean()
    weight_std, bias_std = layer.posterior_std()
    mean = torch.cat([weight_mean, bias_mean.unsqueeze(1)], dim=1).detach()
    std = torch.cat([weight_std, bias_std.unsqueeze(1)], dim=1).detach()
    return mean, std


def _prior_std(prior_std: float | torch.Tensor, models: int) -> torch.Tensor:
    """The prior std as an (M, 1, 1) tensor (a float, or one value per model)."""
    value = torch.as_tensor(prior_std, dtype=torch.float64).reshape(-1)
    if value.numel() not in (1, models) or not bool((value > 0).all()):
        raise ValueError(
            f"pruned_units_per_layer: prior_std must be > 0, one value or one per model "
            f"({models}), got {prior_std!r}"
        )
    return value.expand(models).reshape(models, 1, 1)


@torch.no_grad()
def pruned_units_per_layer(
    model: MLP,
    prior_std: float | torch.Tensor,
    snr_threshold: float = SNR_THRESHOLD,
    kl_threshold: float = KL_THRESHOLD,
) -> list[torch.Tensor]:
    """Which units of each hidden layer are pruned (module docstring): one (M, H_l) per layer.

    Args:
        model: an MLP stack of M models with at least one hidden layer.
        prior_std: std s of the factorised N(0, s^2) prior, a float or an (M,) tensor.
        snr_threshold, kl_threshold: as in ``pruning.pruned_units``.
    """
    if len(model.layers) < 2:
        raise ValueError(f"pruned_units_per_layer: the MLP has no hidden layer ({model.layers})")
    if not snr_threshold > 0 or not kl_threshold > 0:
        raise ValueError(
            f"pruned_units_per_layer: thresholds must be > 0, got snr_threshold={snr_threshold},"
            f" kl_threshold={kl_threshold}"
        )
    moments = [_with_bias(layer) for layer in model.layers]
    scale = _prior_std(prior_std, moments[0][0].shape[0]).to(moments[0][0].device)
    pruned = []
    for (mean_in, std_in), (mean_out, std_out) in pairwise(moments):
        kl = kl_per_weight(mean_in.double(), std_in.double(), scale)  # (M, I + 1, H)
        at_prior = kl.amax(dim=1) < kl_threshold
        # outgoing weights of unit j: row j of the next layer (its bias row is not a unit's)
        out_mean, out_std = mean_out[:, :-1, :], std_out[:, :-1, :]
        zero_out = (out_mean.abs() < snr_threshold * out_std).all(dim=-1)
        pruned.append(at_prior & zero_out)
    return pruned


def count_pruned_per_layer(
    model: MLP, prior_std: float | torch.Tensor, **thresholds: float
) -> torch.Tensor:
    """Pruned units per model and hidden layer, (M, L) integers."""
    layers = pruned_units_per_layer(model, prior_std, **thresholds)
    return torch.stack([p.sum(dim=-1) for p in layers], dim=-1)
