"""Selective prediction: the risk-coverage curve and the area under it (AURC, E-AURC).

A classifier that may abstain answers on the examples it is most confident about. Sorted by
decreasing confidence, its selective risk at coverage k / N is the error rate among the k most
confident examples (Geifman & El-Yaniv 2017),

    risk_k = (1 / k) sum_{i <= k} 1[argmax p_(i) != y_(i)],     k = 1 .. N,

and the AURC is the mean of the N risks, (1 / N) sum_k risk_k (Geifman et al. 2019), a number
in [0, 1], lower is better. The ranking, not the values, of the confidence matters.

Ties in confidence are handled deterministically and independently of the examples' order: a
group of n_g examples of equal confidence with e_g errors enters as a block, and inside it the
risk is the expected one over the group's orderings, the errors counted at e_g / n_g per
position. (A constant confidence gives risk_k = the error rate at every k.) torch-uncertainty
breaks ties by ``argsort`` and integrates by trapezoids: its AURC is
(sum_k risk_k - (risk_1 + risk_N) / 2) / (N - 1), which differs from this one by O(1 / N).

Layouts as in ``vbnn.metrics``: ``probabilities`` (N, C) on the simplex (a Bayesian predictive
averaged over its samples first), ``labels`` (N,) integers in [0, C), ``confidence`` (N,) finite
floats, higher meaning more confident (max_c p_c by default).
"""

from __future__ import annotations

import torch

from vbnn.metrics import _check_classification


def _errors_and_confidence(
    probabilities: torch.Tensor, labels: torch.Tensor, confidence: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The errors 1[argmax p_n != y_n] (ties to the lowest class) and the confidence, float64."""
    labels = _check_classification(probabilities, labels)
    errors = (probabilities.argmax(-1) != labels).double()
    if confidence is None:
        return errors, probabilities.max(-1).values.double()
    if not torch.is_floating_point(confidence) or confidence.shape != labels.shape:
        raise ValueError(
            f"confidence must be a floating (N,) = ({len(labels)},) tensor; got dtype "
            f"{confidence.dtype} and shape {tuple(confidence.shape)}"
        )
    bad = (~torch.isfinite(confidence)).nonzero()
    if len(bad):
        raise ValueError(f"confidence[{int(bad[0, 0])}] is {confidence[bad[0, 0]].item()}")
    return errors, confidence.double()


def _selective_risks(errors: torch.Tensor, confidence: torch.Tensor) -> torch.Tensor:
    """risk_k for k = 1 .. N, most confident first, tied groups counted at their mean error."""
    order = torch.argsort(confidence, descending=True, stable=True)
    errors, confidence = errors[order], confidence[order]
    first_of_group = confidence.new_ones(1, dtype=torch.bool)
    starts_group = torch.cat([first_of_group, confidence[1:] != confidence[:-1]])
    group = starts_group.cumsum(0) - 1
    groups = int(group[-1]) + 1
    size = errors.new_zeros(groups).index_add_(0, group, torch.ones_like(errors))
    mean_error = errors.new_zeros(groups).index_add_(0, group, errors) / size
    # errors in the groups before each position, then e_g / n_g per position inside its group
    before = torch.cat([errors.new_zeros(1), (mean_error * size).cumsum(0)[:-1]])[group]
    first = torch.cat([errors.new_zeros(1), size.cumsum(0)[:-1]])[group]
    position = torch.arange(1, len(errors) + 1, dtype=errors.dtype, device=errors.device)
    return (before + (position - first) * mean_error[group]) / position


def risk_coverage(
    probabilities: torch.Tensor, labels: torch.Tensor, confidence: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The risk-coverage curve: coverage k / N and selective risk risk_k for k = 1 .. N.

    Args:
        probabilities: (N, C) predictive probabilities; the prediction is the argmax class.
        labels: (N,) integer classes in [0, C).
        confidence: (N,) scores, higher = answer first; None: max_c p_nc.

    Returns:
        ``coverage`` and ``risk``, each (N,) float64, coverage increasing from 1 / N to 1.
    """
    errors, confidence = _errors_and_confidence(probabilities, labels, confidence)
    coverage = torch.arange(1, len(errors) + 1, dtype=errors.dtype, device=errors.device)
    coverage = coverage / len(errors)
    return coverage, _selective_risks(errors, confidence)


def aurc(
    probabilities: torch.Tensor, labels: torch.Tensor, confidence: torch.Tensor | None = None
) -> torch.Tensor:
    """Area under the risk-coverage curve, (1 / N) sum_k risk_k (Geifman et al. 2019).

    A confidence that says nothing (random, or constant) gives the error rate r in expectation
    (exactly, for a constant one); the best ranking gives ``optimal_aurc``.

    Args:
        probabilities: (N, C) predictive probabilities.
        labels: (N,) integer classes in [0, C).
        confidence: (N,) scores, higher = answer first; None: max_c p_nc.

    Returns:
        0-d float64 tensor in [0, 1].
    """
    return risk_coverage(probabilities, labels, confidence)[1].mean()


def optimal_aurc(probabilities: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The AURC of the ranking that answers every correct prediction first.

    With N examples of which M = N (1 - r) are correct, risk_k = max(0, k - M) / k, so

        AURC* = (1 / N) sum_{k > M} (k - M) / k,

    which tends to r + (1 - r) log(1 - r) as N grows (Geifman et al. 2019's closed form).

    Args:
        probabilities: (N, C) predictive probabilities.
        labels: (N,) integer classes in [0, C).

    Returns:
        0-d float64 tensor in [0, 1].
    """
    errors, _ = _errors_and_confidence(probabilities, labels, None)
    correct = len(errors) - errors.sum()
    position = torch.arange(1, len(errors) + 1, dtype=errors.dtype, device=errors.device)
    return ((position - correct).clamp_min(0) / position).mean()


def excess_aurc(
    probabilities: torch.Tensor, labels: torch.Tensor, confidence: torch.Tensor | None = None
) -> torch.Tensor:
    """E-AURC = AURC - AURC*: the ranking's excess over the best one for the same predictions
    (Geifman et al. 2019), 0 for a confidence that ranks every correct prediction first.

    AURC* is ``optimal_aurc`` at the same N (not its large-N limit), so a perfect ranking
    scores 0 exactly.

    Args:
        probabilities: (N, C) predictive probabilities.
        labels: (N,) integer classes in [0, C).
        confidence: (N,) scores, higher = answer first; None: max_c p_nc.

    Returns:
        0-d float64 tensor, >= 0 (up to rounding).
    """
    return aurc(probabilities, labels, confidence) - optimal_aurc(probabilities, labels)
