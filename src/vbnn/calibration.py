"""Temperature scaling of a classifier's predictive (Guo et al. 2017).

Given scores l_n (N, C) of a predictive on a validation split with labels y_n, one scalar T > 0
is fitted to minimise the validation negative log-likelihood of softmax(l_n / T):

    NLL(T) = (1/N) sum_n [ logsumexp_c(l_nc / T) - l_ny_n / T ],

and the test predictive becomes softmax(l / T). Dividing by T keeps each row's order, so the
predicted class (and the accuracy) are unchanged; T > 1 softens, T < 1 sharpens.

The scores may be logits or log-probabilities: softmax is unchanged by adding a constant to a
row, so softmax(log softmax(f) / T) = softmax(f / T). For a Bayesian predictive of K samples
(f_k(x), k = 1 .. K) what is scaled is the log of the averaged probabilities,
l = log p_bar with p_bar = (1/K) sum_k softmax(f_k(x)) (``predictive_probabilities``): the
scaled predictive is p_T(c | x) = p_bar(c | x)^(1/T) / sum_c' p_bar(c' | x)^(1/T), one
temperature on the model average (not on each sample's logits).

The fit is exact and draws nothing: with beta = 1/T, NLL is convex in beta (a mean of
logsumexp of functions linear in beta, minus a linear term), its derivative

    dNLL/dbeta = (1/N) sum_n [ sum_c softmax(beta l_n)_c l_nc - l_ny_n ]

is non-decreasing, and bisection of its sign on log beta over [1/T_max, 1/T_min] finds the
minimiser to float64 resolution. When the NLL keeps falling past an end of that interval (the
validation labels separated perfectly: T -> 0; scores that carry no information: T -> inf)
the fit returns that end.
"""

from __future__ import annotations

import math

import torch

BISECTION_STEPS = 64  # halvings of the log-beta bracket: below float64 resolution of its width


def _scores(scores: torch.Tensor, name: str) -> torch.Tensor:
    """``scores`` (N, C) as float64, checked: no NaN, no +inf (-inf: a zero probability)."""
    if not scores.is_floating_point() or scores.dim() != 2 or 0 in scores.shape:
        raise ValueError(
            f"{name} must be floating (N, C) with N, C >= 1; got dtype "
            f"{scores.dtype}, shape {tuple(scores.shape)}"
        )
    scores = scores.double()
    if bool((scores.isnan() | (scores == math.inf)).any()):
        raise ValueError(f"{name} holds NaN or +inf")
    return scores


def _nll_derivative(scores: torch.Tensor, chosen: torch.Tensor, beta: float) -> float:
    """dNLL/dbeta at ``beta`` (module docstring); -inf scores carry probability 0."""
    probabilities = torch.softmax(beta * scores, dim=-1)
    expected = torch.where(probabilities > 0, probabilities * scores, 0.0).sum(-1)
    return float((expected - chosen).mean())


def temperature_nll(scores: torch.Tensor, labels: torch.Tensor, temperature: float) -> float:
    """NLL(T), the mean negative log-likelihood of softmax(scores / T) at the labels.

    Args:
        scores: (N, C) logits or log-probabilities.
        labels: (N,) integer classes in [0, C).
        temperature: T > 0.
    """
    scores = _scores(scores, "scores")
    labels = _labels(labels.to(scores.device), len(scores), scores.shape[1])
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    log_probabilities = torch.log_softmax(scores / temperature, dim=-1)
    return float(-log_probabilities.gather(1, labels[:, None]).mean())


def _labels(labels: torch.Tensor, examples: int, classes: int) -> torch.Tensor:
    if labels.is_floating_point() or labels.dtype == torch.bool or labels.shape != (examples,):
        raise ValueError(
            f"labels must be integer (N,) = ({examples},); got dtype "
            f"{labels.dtype}, shape {tuple(labels.shape)}"
        )
    if bool((labels < 0).any()) or bool((labels >= classes).any()):
        raise ValueError(
            f"labels must lie in [0, {classes}); found [{int(labels.min())}, {int(labels.max())}]"
        )
    return labels.long()


def fit_temperature(
    scores: torch.Tensor,
    labels: torch.Tensor,
    bounds: tuple[float, float] = (1e-2, 1e2),
) -> float:
    """The temperature T in ``bounds`` minimising the validation NLL(T) (module docstring).

    Args:
        scores: (N, C) validation logits or log-probabilities (log p_bar for a Bayesian
            predictive).
        labels: (N,) integer classes in [0, C).
        bounds: (T_min, T_max), 0 < T_min < T_max; the fit returns an end when the NLL keeps
            falling past it.

    Returns:
        T_hat > 0, deterministic (bisection; no randomness).

    Raises:
        ValueError: scores not (N, C) floating or holding NaN or +inf, a label's score -inf
            (its NLL is infinite at every T), labels out of range, bounds not 0 < T_min < T_max.
    """
    scores = _scores(scores, "scores")
    labels = _labels(labels.to(scores.device), len(scores), scores.shape[1])
    low, high = bounds
    if not 0 < low < high < math.inf:
        raise ValueError(f"bounds must satisfy 0 < T_min < T_max < inf; got {bounds}")
    chosen = scores.gather(1, labels[:, None]).squeeze(1)
    if bool(torch.isinf(chosen).any()):
        index = int(torch.isinf(chosen).nonzero()[0])
        raise ValueError(
            f"scores[{index}, {int(labels[index])}] (the label's) is -inf: the "
            "NLL is infinite at every temperature"
        )
    # bracket on log beta = -log T: the derivative is non-decreasing in beta
    lower, upper = -math.log(high), -math.log(low)
    if _nll_derivative(scores, chosen, math.exp(lower)) >= 0:
        return high
    if _nll_derivative(scores, chosen, math.exp(upper)) <= 0:
        return low
    for _ in range(BISECTION_STEPS):
        middle = 0.5 * (lower + upper)
        if _nll_derivative(scores, chosen, math.exp(middle)) < 0:
            lower = middle
        else:
            upper = middle
    return math.exp(-0.5 * (lower + upper))


def temperature_scaled(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(scores / T), float64 (N, C): the calibrated predictive probabilities.

    Args:
        scores: (N, C) logits or log-probabilities (log p_bar for a Bayesian predictive).
        temperature: T > 0 (e.g. ``fit_temperature`` on the validation split).
    """
    scores = _scores(scores, "scores")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return torch.softmax(scores / temperature, dim=-1)
