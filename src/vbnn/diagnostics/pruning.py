"""Over-pruning diagnostics for one-hidden-layer networks (Trippe & Turner 2017, sec. 3-4).

For f(x) = sum_j v_j tanh(w_j . x + b_j) + c, Trippe & Turner observe that mean-field VI drives
most hidden units j to q(v_j) ~ delta(0): the unit no longer affects the output, so nothing in the
likelihood holds its incoming weights w_j, and their posterior collapses onto the prior
(p(w_ji | v_j = 0, D) = p(w_ji)), which removes their KL cost. On boston they count 39 of 50
units pruned (Figure 2, 5). This module measures, per hidden unit and per model of a stack:

    * the posterior mean and std of its output weight(s) v_j, and the SNR |E v_j| / std v_j;
    * the KL to the prior of each incoming weight w_ji and of its bias b_j (largest and total);
    * the spread (std over the data) of its activation h_j(x) under the mean weights, and under
      weights drawn from q;

and classifies a unit as pruned by :func:`pruned_units`. It works for any family exposing
``posterior_mean``/``posterior_std`` (MF, GD, FC; for FC the KL uses the marginals, ignoring
correlations, and is only a per-weight summary).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.networks.mlp import MLP
from vbnn.networks.predictive import sample

if TYPE_CHECKING:
    import pandas as pd

SNR_THRESHOLD = 3.0
KL_THRESHOLD = 0.05


def kl_per_weight(mean: torch.Tensor, std: torch.Tensor, prior_std: float) -> torch.Tensor:
    """Elementwise KL(N(mu, sigma^2) || N(0, s^2)) = log(s/sigma) + (sigma^2 + mu^2)/(2 s^2) - 1/2.

    Same shape as ``mean``; summed over all but the model dimension it is
    ``gaussian.kl_diagonal_gaussian``.
    """
    variance_ratio = (std / prior_std) ** 2
    return 0.5 * (variance_ratio + (mean / prior_std) ** 2 - 1.0 - torch.log(variance_ratio))


@dataclass(frozen=True)
class UnitDiagnostics:
    """Per hidden unit j of every model of a stack (M models, H hidden units, O outputs).

    Attributes:
        output_mean, output_std: E v_j and std v_j, (M, H, O).
        incoming_mean, incoming_std: posterior of each incoming weight, bias last, (M, I + 1, H).
        incoming_kl: KL(q || prior) of each incoming weight, bias last, (M, I + 1, H).
        activation_spread: std over the data of h_j(x) under the mean weights, (M, H).
        sampled_activations: h_j(x) under ``samples`` weight draws from q, (S, M, N, H).
        prior_std: the prior std the KLs refer to.
    """

    output_mean: torch.Tensor
    output_std: torch.Tensor
    incoming_mean: torch.Tensor
    incoming_std: torch.Tensor
    incoming_kl: torch.Tensor
    activation_spread: torch.Tensor
    sampled_activations: torch.Tensor
    prior_std: float

    @property
    def output_snr(self) -> torch.Tensor:
        """|E v_j| / std v_j, (M, H, O) (inf for a point estimate)."""
        return self.output_mean.abs() / self.output_std

    @property
    def max_incoming_kl(self) -> torch.Tensor:
        return self.incoming_kl.amax(dim=1)

    @property
    def total_incoming_kl(self) -> torch.Tensor:
        return self.incoming_kl.sum(dim=1)

    def frame(self, model_index: int = 0, **thresholds: float | None) -> pd.DataFrame:
        """One row per hidden unit of one model, with the pruning decision (first output)."""
        import pandas as pd  # only this table needs it

        pruned = pruned_units(self, **thresholds)[model_index]
        m = model_index
        return pd.DataFrame(
            {
                "output_mean": self.output_mean[m, :, 0].numpy(),
                "output_std": self.output_std[m, :, 0].numpy(),
                "output_snr": self.output_snr[m, :, 0].numpy(),
                "max_incoming_kl": self.max_incoming_kl[m].numpy(),
                "total_incoming_kl": self.total_incoming_kl[m].numpy(),
                "activation_spread": self.activation_spread[m].numpy(),
                "sampled_activation_spread": self.sampled_activations[:, m].std(1).mean(0).numpy(),
                "pruned": pruned.numpy(),
            }
        ).rename_axis("unit")


@torch.no_grad()
def diagnose_units(
    model: MLP,
    x: torch.Tensor,
    prior_std: float,
    noise: ModelGenerators | None = None,
    samples: int = 25,
) -> UnitDiagnostics:
    """Per-unit statistics of a one-hidden-layer stack on inputs ``x`` (M, N, I).

    Args:
        model: an MLP with two dense layers (input -> hidden -> output).
        x: the data the activations are measured on (training inputs in the paper's Figure 2).
        prior_std: std of the factorised N(0, prior_std^2) prior the KLs are measured against.
        noise: draws the ``samples`` weight samples for the activation histograms; None
            uses only the mean weights (``sampled_activations`` then holds one copy of them).
        samples: number of weight draws (the paper's Figure 2 uses 25).
    """
    if len(model.layers) != 2:
        raise ValueError(
            f"diagnose_units: needs one hidden layer (2 dense layers), got {len(model.layers)}"
        )
    if not prior_std > 0:
        raise ValueError(f"diagnose_units: prior_std must be > 0, got {prior_std}")
    hidden, output = model.layers
    if x.dim() != 3 or x.shape[0] != hidden.num_models or x.shape[2] != hidden.in_features:
        raise ValueError(
            f"diagnose_units: x has shape {tuple(x.shape)}, expected (M={hidden.num_models}, N, "
            f"I={hidden.in_features})"
        )
    weight_mean, bias_mean = hidden.posterior_mean()
    weight_std, bias_std = hidden.posterior_std()
    means = torch.cat([weight_mean, bias_mean.unsqueeze(1)], dim=1).detach()
    stds = torch.cat([weight_std, bias_std.unsqueeze(1)], dim=1).detach()
    output_mean, _ = output.posterior_mean()
    output_std, _ = output.posterior_std()
    mean_activation = model.activation(hidden(x, ForwardMode.MEAN))
    if noise is None:
        sampled = mean_activation.unsqueeze(0)
    else:
        sampled = model.activation(sample(hidden, x, samples, ForwardMode.WEIGHTS, noise=noise))
    return UnitDiagnostics(
        output_mean=output_mean.detach().clone(),
        output_std=output_std.detach().clone(),
        incoming_mean=means,
        incoming_std=stds,
        incoming_kl=kl_per_weight(means, stds, prior_std),
        activation_spread=mean_activation.std(dim=1),
        sampled_activations=sampled,
        prior_std=float(prior_std),
    )


def pruned_units(
    diagnostics: UnitDiagnostics,
    snr_threshold: float = SNR_THRESHOLD,
    kl_threshold: float = KL_THRESHOLD,
    output_tolerance: float | None = None,
) -> torch.Tensor:
    """Which hidden units are pruned: (M, H) booleans.

    A unit j is pruned when both hold (the paper's description of Figure 2B and section 4):

    1. its output weight is *indistinguishable from zero* under q: for every output o,
       SNR = |E v_jo| / std(v_jo) < ``snr_threshold`` (default 3: 0 lies within three posterior
       stds of the mean). The unit's mean contribution to the prediction is then ~0.
    2. its incoming weights and bias *sit at the prior*: every per-weight
       KL(q(w_ji) || p(w_ji)) < ``kl_threshold`` nats (default 0.05; a mean shifted by 0.3 prior
       std, or a std at 0.8 prior std, each costs about 0.05 nats). This is the signature the
       paper derives: once v_j ~ 0, nothing in the likelihood holds w_j, and the KL pulls q(w_j)
       onto p(w_j) exactly.

    ``output_tolerance`` (off by default) adds the paper's stricter wording, "output weight
    confidently around zero": |E v_jo| + 2 std(v_jo) < output_tolerance (about 98% of q(v_jo)
    inside +-tolerance). Whether that holds depends on the data size: the std of a pruned unit's
    output weight settles where its KL saving balances the output noise it injects, which the
    likelihood charges about N times. Measured (reproductions/overpruning/README.md): boston MF
    (N = 455) std(v_j) ~ 0.016 for pruned units, so they are confidently at zero; in the
    prior-network simulation with N = 5 it is ~0.5, with N = 100 ~0.13, yet incoming weights sit
    at the prior (KL ~ 0.005) and the SNR is below 1, as for boston.

    On boston MF (20 splits, 5000 iterations, prior N(0, 1)) the 123 of 1000 units with an
    incoming KL above 0.05 all have one above 0.9 and an output SNR of at least 3.96 (the KL
    test alone separates them); units with incoming weights at the prior (max KL < 0.014) have
    SNRs below 1, except 7 of 1000 between 1.0 and 1.3 (mean |E v| ~ 0.02: MC noise), which
    is why the default is 3, not 1. Measured count sensitivity (mean over the 20 splits, 43.85
    with the defaults): snr_threshold 1 -> 43.5, 0.5 -> 35.85; kl_threshold 0.5 or 0.01 ->
    within 0.1 of it; output_tolerance 0.1 -> within 0.4 (pruned output weights have
    |E v| + 2 std <= 0.055). A point estimate (ES, MAP) has std 0,
    hence an infinite KL: none of its units counts as pruned. GD's fixed std keeps every
    incoming KL above 0 unless it equals the prior std.
    """
    if not snr_threshold > 0 or not kl_threshold > 0:
        raise ValueError(
            f"pruned_units: thresholds must be > 0, got snr_threshold={snr_threshold}, "
            f"kl_threshold={kl_threshold}"
        )
    zero_mean = (diagnostics.output_mean.abs() < snr_threshold * diagnostics.output_std).all(-1)
    at_prior = diagnostics.max_incoming_kl < kl_threshold
    pruned = zero_mean & at_prior
    if output_tolerance is not None:
        if not output_tolerance > 0:
            raise ValueError(f"pruned_units: output_tolerance must be > 0, got {output_tolerance}")
        spread = diagnostics.output_mean.abs() + 2 * diagnostics.output_std
        pruned = pruned & (spread < output_tolerance).all(-1)
    return pruned


def count_pruned(diagnostics: UnitDiagnostics, **thresholds: float | None) -> torch.Tensor:
    """Number of pruned hidden units per model, (M,) integers."""
    return pruned_units(diagnostics, **thresholds).sum(dim=-1)
