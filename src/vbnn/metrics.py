"""Predictive metrics as pure tensor functions: regression, classification, uncertainty.

Layouts (no silent broadcasting: any other shape raises ``ValueError`` naming the argument):

* regression: ``means`` (K, N) for an equally weighted mixture of K Gaussian components (K
  predictive samples of a network with Gaussian noise), ``stds`` (K, N), (K, 1) or a scalar,
  ``target`` (N,); a single Gaussian predictive is ``means`` (N,) with ``stds`` (N,) or a scalar;
* classification: ``probabilities`` (N, C), rows on the simplex (average the K sampled
  probabilities first for a Bayesian predictive), ``labels`` (N,) integers in [0, C);
* uncertainty: per-sample ``probabilities`` (K, N, C).

Entropies are in nats. Every check raises ``ValueError``.
"""

from __future__ import annotations

import math

import torch

from vbnn.core.gaussian import gaussian_log_prob, log_mean_exp

BISECTION_STEPS = 64  # halvings of the quantile bracket: below float64 resolution of its width


def _check_floating(name: str, tensor: torch.Tensor) -> None:
    if not torch.is_floating_point(tensor):
        raise ValueError(f"{name} must be a floating-point tensor; got dtype {tensor.dtype}")


def _check_regression(
    means: torch.Tensor, stds: torch.Tensor | float, target: torch.Tensor | None, mixture: bool
) -> torch.Tensor:
    """Validate (means, stds, target); return ``stds`` as a tensor of an allowed shape."""
    _check_floating("means", means)
    if means.ndim != (2 if mixture else 1):
        layout = "(K, N)" if mixture else "(N,) or (K, N)"
        raise ValueError(f"means must be {layout}; got shape {tuple(means.shape)}")
    examples = means.shape[-1]
    if examples == 0 or means.shape[0] == 0:
        raise ValueError(f"means needs at least one example and component; got {means.shape}")
    if target is not None and target.shape != (examples,):
        raise ValueError(
            f"target must be (N,) = ({examples},) to match means {tuple(means.shape)}; "
            f"got {tuple(target.shape)}"
        )
    stds = torch.as_tensor(stds, dtype=means.dtype, device=means.device)
    allowed = [(), tuple(means.shape)] + ([(means.shape[0], 1)] if mixture else [])
    if tuple(stds.shape) not in allowed:
        raise ValueError(
            f"stds has shape {tuple(stds.shape)}; with means {tuple(means.shape)} it must be "
            f"one of {allowed}"
        )
    if not bool((stds > 0).all()):
        raise ValueError(f"stds must be positive; smallest is {stds.min().item():.4g}")
    return stds


def _check_probabilities(probabilities: torch.Tensor, layout: str) -> None:
    """Shape ``layout`` ((N, C) or (K, N, C)), entries in [0, 1], rows summing to 1.

    The sum tolerance is sqrt(eps) of the dtype (3.5e-4 for float32, 1.5e-8 for float64).
    """
    _check_floating("probabilities", probabilities)
    if probabilities.ndim != layout.count(",") + 1 or 0 in probabilities.shape:
        raise ValueError(
            f"probabilities must be {layout} with no empty dimension; "
            f"got shape {tuple(probabilities.shape)}"
        )
    if not bool(((probabilities >= 0) & (probabilities <= 1)).all()):
        raise ValueError(
            f"probabilities must lie in [0, 1]; found values in "
            f"[{probabilities.min().item():.4g}, {probabilities.max().item():.4g}]"
        )
    tolerance = math.sqrt(torch.finfo(probabilities.dtype).eps)
    deviation = (probabilities.sum(-1) - 1).abs().max().item()
    if deviation > tolerance:
        raise ValueError(
            f"probabilities rows must sum to 1 within {tolerance:.2g}; "
            f"largest deviation is {deviation:.3g}"
        )


def _check_classification(probabilities: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Validate (probabilities, labels); return ``labels`` as int64 for indexing."""
    _check_probabilities(probabilities, "(N, C)")
    examples, classes = probabilities.shape
    if labels.dtype == torch.bool or labels.is_floating_point() or labels.is_complex():
        raise ValueError(f"labels must be an integer tensor; got dtype {labels.dtype}")
    if labels.shape != (examples,):
        raise ValueError(
            f"labels must be (N,) = ({examples},) to match probabilities "
            f"{tuple(probabilities.shape)}; got {tuple(labels.shape)}"
        )
    if bool((labels < 0).any()) or bool((labels >= classes).any()):
        raise ValueError(
            f"labels must lie in [0, {classes}) for C = {classes} classes; found values in "
            f"[{labels.min().item()}, {labels.max().item()}]"
        )
    return labels.long()


def _check_bins(bins: int) -> None:
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ValueError(f"bins must be an integer >= 1; got {bins!r}")


# --- Regression --------------------------------------------------------------------------------


def gaussian_mixture_log_likelihood(
    means: torch.Tensor, stds: torch.Tensor | float, target: torch.Tensor
) -> torch.Tensor:
    """Log density of each target under an equally weighted mixture of K Gaussians.

    log p(y_n) = log (1/K) sum_k N(y_n | mu_kn, sigma_kn^2), by logsumexp (``log_mean_exp``).
    The reported test log-likelihood (Trippe & Turner 2017) is the mean of
    the returned values over examples.

    Args:
        means: (K, N) component means (K predictive samples of the network output).
        stds: (K, N), (K, 1) or scalar component standard deviations, all > 0.
        target: (N,) observed targets.

    Returns:
        (N,) per-example log predictive densities.
    """
    stds = _check_regression(means, stds, target, mixture=True)
    return log_mean_exp(gaussian_log_prob(target, means, stds), dim=0)


def rmse(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Root mean squared error sqrt( mean_i (prediction_i - target_i)^2 ) over every element.

    Args:
        prediction: any shape, e.g. (N,) predictive means; ``target`` the same shape.

    Returns:
        0-d tensor.
    """
    _check_floating("prediction", prediction)
    if prediction.shape != target.shape or prediction.numel() == 0:
        raise ValueError(
            f"prediction {tuple(prediction.shape)} and target {tuple(target.shape)} must have "
            "the same non-empty shape"
        )
    return ((prediction - target) ** 2).mean().sqrt()


def gaussian_mixture_quantile(
    means: torch.Tensor, stds: torch.Tensor | float, probability: float
) -> torch.Tensor:
    """Per-example quantile q_n with F_n(q_n) = probability, by vectorised bisection.

    F_n(x) = (1/K) sum_k Phi((x - mu_kn) / sigma_kn). Each component's own quantile
    q_kn = mu_kn + sigma_kn Phi^{-1}(probability) brackets the root: F_n <= probability at
    min_k q_kn and >= probability at max_k q_kn. ``BISECTION_STEPS`` halvings follow; for K = 1
    the bracket is a point and the Gaussian quantile is returned exactly.

    Args:
        means: (K, N) component means.
        stds: (K, N), (K, 1) or scalar, all > 0.
        probability: the level in (0, 1).

    Returns:
        (N,) quantiles.
    """
    if not 0 < probability < 1:
        raise ValueError(f"probability must lie in (0, 1); got {probability}")
    return _bisect_quantile(means, _check_regression(means, stds, None, True), probability)


def _bisect_quantile(means: torch.Tensor, stds: torch.Tensor, probability: float) -> torch.Tensor:
    level = torch.tensor(probability, dtype=means.dtype, device=means.device)
    component_quantiles = means + stds * torch.special.ndtri(level)
    low, high = component_quantiles.min(0).values, component_quantiles.max(0).values
    for _ in range(BISECTION_STEPS):
        middle = 0.5 * (low + high)
        below = torch.special.ndtr((middle - means) / stds).mean(0) < level
        low, high = torch.where(below, middle, low), torch.where(below, high, middle)
    return 0.5 * (low + high)


def interval_coverage(
    means: torch.Tensor, stds: torch.Tensor | float, target: torch.Tensor, level: float = 0.95
) -> torch.Tensor:
    """Share of targets inside the central ``level`` interval of the predictive.

    Single Gaussian (``means`` (N,)): [mu - z sigma, mu + z sigma] with z = Phi^{-1}((1+level)/2).
    Mixture (``means`` (K, N)): [q_{(1-level)/2}, q_{(1+level)/2}], the mixture's own quantiles
    from ``gaussian_mixture_quantile`` (not a Gaussian fitted to its moments). Endpoints count as
    inside. A calibrated predictive covers about ``level``.

    Args:
        means: (N,) Gaussian means, or (K, N) mixture component means.
        stds: (N,) or scalar for a Gaussian; (K, N), (K, 1) or scalar for a mixture; all > 0.
        target: (N,).
        level: the interval's probability, in (0, 1).

    Returns:
        0-d tensor in [0, 1].
    """
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1); got {level}")
    stds = _check_regression(means, stds, target, mixture=means.ndim == 2)
    if means.ndim == 1:
        z = torch.special.ndtri(
            torch.tensor((1 + level) / 2, dtype=means.dtype, device=means.device)
        )
        lower, upper = means - z * stds, means + z * stds
    else:
        lower = _bisect_quantile(means, stds, (1 - level) / 2)
        upper = _bisect_quantile(means, stds, (1 + level) / 2)
    return ((target >= lower) & (target <= upper)).to(means.dtype).mean()


# --- Classification ----------------------------------------------------------------------------


def classification_nll(
    probabilities: torch.Tensor, labels: torch.Tensor, floor: float | None = None
) -> torch.Tensor:
    """Mean negative log-likelihood -(1/N) sum_n log max(p_{n, y_n}, eps).

    The floor eps keeps a zero probability on the true class finite. By default it is
    ``torch.finfo(dtype).eps`` (2.2e-16 for float64, 1.2e-7 for float32, the clip scikit-learn's
    ``log_loss`` uses): a zero probability contributes -log eps (36.04 nats in float64). A tiny
    ``floor`` (1e-300) only guards log 0, so a confident mistake costs its full -log p.

    Args:
        probabilities: (N, C) predictive probabilities.
        labels: (N,) integer classes in [0, C).
        floor: eps; None: ``torch.finfo(probabilities.dtype).eps``.

    Returns:
        0-d tensor.
    """
    labels = _check_classification(probabilities, labels)
    true_class = probabilities.gather(1, labels.unsqueeze(1)).squeeze(1)
    floor = torch.finfo(probabilities.dtype).eps if floor is None else floor
    return -true_class.clamp_min(floor).log().mean()


def accuracy(probabilities: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Share of examples whose argmax class equals the label (ties go to the lowest class).

    Args:
        probabilities: (N, C).
        labels: (N,) integer classes in [0, C).

    Returns:
        0-d tensor in [0, 1].
    """
    labels = _check_classification(probabilities, labels)
    return (probabilities.argmax(-1) == labels).to(probabilities.dtype).mean()


def brier_score(probabilities: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Multi-class Brier score (1/N) sum_n sum_c (p_nc - 1[c = y_n])^2, in [0, 2].

    For C = 2 this is twice the binary form (1/N) sum_n (p_n1 - y_n)^2 (scikit-learn's
    ``brier_score_loss`` on the positive class), as both classes' errors are counted.

    Args:
        probabilities: (N, C).
        labels: (N,) integer classes in [0, C).

    Returns:
        0-d tensor.
    """
    labels = _check_classification(probabilities, labels)
    one_hot = torch.nn.functional.one_hot(labels, probabilities.shape[1]).to(probabilities.dtype)
    return ((probabilities - one_hot) ** 2).sum(-1).mean()


def reliability_table(
    probabilities: torch.Tensor, labels: torch.Tensor, bins: int = 15
) -> dict[str, torch.Tensor]:
    """Per-bin statistics of confidence max_c p_nc against correctness, for a reliability diagram.

    ``bins`` equal-width bins (lower, upper] partition [0, 1]: bin b = (b/B, (b+1)/B] (Guo et al.
    2017, "On Calibration of Modern Neural Networks"); a confidence exactly on an edge falls in
    the lower bin. The prediction is the argmax class.

    Args:
        probabilities: (N, C).
        labels: (N,) integer classes in [0, C).
        bins: the number of bins B >= 1.

    Returns:
        dict of (B,) tensors: ``lower``, ``upper`` (edges), ``count`` (int64 examples per bin),
        ``accuracy`` and ``confidence`` (means in the bin; NaN for an empty bin).
    """
    labels = _check_classification(probabilities, labels)
    _check_bins(bins)
    confidence, prediction = probabilities.max(-1)
    correct = (prediction == labels).to(probabilities.dtype)
    edges = torch.linspace(0, 1, bins + 1, dtype=probabilities.dtype, device=probabilities.device)
    index = torch.bucketize(confidence, edges[1:-1], right=False)
    count = torch.bincount(index, minlength=bins)
    zeros = torch.zeros(bins, dtype=probabilities.dtype, device=probabilities.device)
    return {
        "lower": edges[:-1],
        "upper": edges[1:],
        "count": count,
        "accuracy": zeros.index_add(0, index, correct) / count,
        "confidence": zeros.index_add(0, index, confidence) / count,
    }


def expected_calibration_error(
    probabilities: torch.Tensor, labels: torch.Tensor, bins: int = 15
) -> torch.Tensor:
    """ECE = sum_b (n_b / N) |acc_b - conf_b| over ``bins`` equal-width confidence bins.

    acc_b and conf_b are the accuracy and mean confidence max_c p_nc of the n_b examples in bin
    b (see ``reliability_table`` for the bins); empty bins contribute nothing. The value depends
    on B (15 by default, as in Guo et al. 2017): report it with the number of bins.

    Args:
        probabilities: (N, C).
        labels: (N,) integer classes in [0, C).
        bins: the number of bins B >= 1.

    Returns:
        0-d tensor in [0, 1].
    """
    table = reliability_table(probabilities, labels, bins)
    filled = table["count"] > 0
    gaps = (table["accuracy"] - table["confidence"]).abs()
    weights = table["count"].to(probabilities.dtype) / probabilities.shape[0]
    return (weights[filled] * gaps[filled]).sum()


# --- Uncertainty from K sampled predictives ----------------------------------------------------


def _entropy(probabilities: torch.Tensor) -> torch.Tensor:
    """-sum_c p_c log p_c over the last dimension, with 0 log 0 = 0."""
    return torch.special.entr(probabilities).sum(-1)


def entropy(probabilities: torch.Tensor) -> torch.Tensor:
    """Entropy H[p] = -sum_c p_c log p_c of each row (0 log 0 = 0).

    Args:
        probabilities: (N, C) class probabilities (e.g. a predictive averaged over K samples).

    Returns:
        (N,) entropies in nats, in [0, log C].
    """
    _check_probabilities(probabilities, "(N, C)")
    return _entropy(probabilities)


def predictive_entropy(probabilities: torch.Tensor) -> torch.Tensor:
    """Total uncertainty H[ (1/K) sum_k p_k ] per example.

    Args:
        probabilities: (K, N, C) per-sample class probabilities.

    Returns:
        (N,) entropies in nats, in [0, log C].
    """
    _check_probabilities(probabilities, "(K, N, C)")
    return _entropy(probabilities.mean(0))


def expected_entropy(probabilities: torch.Tensor) -> torch.Tensor:
    """Aleatoric part (1/K) sum_k H[p_k] per example.

    Args:
        probabilities: (K, N, C) per-sample class probabilities.

    Returns:
        (N,) entropies in nats, in [0, log C].
    """
    _check_probabilities(probabilities, "(K, N, C)")
    return _entropy(probabilities).mean(0)


def mutual_information(probabilities: torch.Tensor) -> torch.Tensor:
    """Epistemic part H[ (1/K) sum_k p_k ] - (1/K) sum_k H[p_k] per example.

    The BALD score (Houlsby et al. 2011, "Bayesian Active Learning for Classification and
    Preference Learning"): the mutual information between the label and the weights, estimated
    from K samples. It is >= 0 by Jensen's inequality and 0 when all samples agree; it is not
    clamped, so rounding can leave values of order -eps.

    Args:
        probabilities: (K, N, C) per-sample class probabilities.

    Returns:
        (N,) values in nats.
    """
    _check_probabilities(probabilities, "(K, N, C)")
    return _entropy(probabilities.mean(0)) - _entropy(probabilities).mean(0)


def max_probability(probabilities: torch.Tensor) -> torch.Tensor:
    """Confidence max_c pbar_c of the averaged predictive (1/K) sum_k p_k, per example.

    Args:
        probabilities: (K, N, C) per-sample class probabilities.

    Returns:
        (N,) values in [1/C, 1]. As an out-of-distribution score (higher = more likely out) use
        ``1 - max_probability(p)``.
    """
    _check_probabilities(probabilities, "(K, N, C)")
    return probabilities.mean(0).max(-1).values


# --- Out-of-distribution detection from an uncertainty score ----------------------------------
#
# Scores are oriented so that a higher score means "more likely out of distribution" (predictive
# entropy, mutual information, 1 - max probability); out-of-distribution examples are the
# positives. Ties are handled as scikit-learn does: AUROC counts a tie as one half, AUPR and the
# ROC curve move by whole groups of equal scores.


def _check_scores(scores_in: torch.Tensor, scores_out: torch.Tensor) -> None:
    for name, scores in (("scores_in", scores_in), ("scores_out", scores_out)):
        _check_floating(name, scores)
        if scores.dim() != 1 or scores.numel() == 0:
            raise ValueError(f"{name} must be a non-empty (N,) tensor; got {tuple(scores.shape)}")
        bad = (~torch.isfinite(scores)).nonzero()
        if len(bad):
            raise ValueError(f"{name}[{int(bad[0, 0])}] is {scores[bad[0, 0]].item()}: not finite")


def _roc_points(scores_in: torch.Tensor, scores_out: torch.Tensor):
    """False and true positive counts at every distinct threshold, highest score first."""
    scores = torch.cat([scores_out, scores_in]).double()
    positive = torch.cat([torch.ones_like(scores_out), torch.zeros_like(scores_in)]).double()
    order = torch.argsort(scores, descending=True, stable=True)
    scores, positive = scores[order], positive[order]
    last_of_group = torch.cat([scores[1:] != scores[:-1], scores.new_ones(1, dtype=torch.bool)])
    true_positives = positive.cumsum(0)[last_of_group]
    false_positives = (1 - positive).cumsum(0)[last_of_group]
    return false_positives, true_positives


def auroc(scores_in: torch.Tensor, scores_out: torch.Tensor) -> torch.Tensor:
    """Area under the ROC curve of separating out- from in-distribution examples by the score.

    The probability that an out-of-distribution example scores higher than an in-distribution
    one, ties counted as one half (the Mann-Whitney U statistic over n_in n_out pairs).

    Args:
        scores_in: (N_in,) scores of in-distribution examples.
        scores_out: (N_out,) scores of out-of-distribution examples.

    Returns:
        A scalar in [0, 1]; 0.5 for a score that does not separate them.
    """
    _check_scores(scores_in, scores_out)
    false_positives, true_positives = _roc_points(scores_in, scores_out)
    fpr = torch.cat([false_positives.new_zeros(1), false_positives / len(scores_in)])
    tpr = torch.cat([true_positives.new_zeros(1), true_positives / len(scores_out)])
    return torch.trapezoid(tpr, fpr)


def aupr(scores_in: torch.Tensor, scores_out: torch.Tensor) -> torch.Tensor:
    """Average precision of detecting the out-of-distribution examples (AUPR-out).

    AP = sum_t (R_t - R_{t-1}) P_t over the distinct thresholds t, highest first, with precision
    P_t and recall R_t of "score >= t" (scikit-learn's ``average_precision_score``).

    Args:
        scores_in: (N_in,) scores of in-distribution examples.
        scores_out: (N_out,) scores of out-of-distribution examples (the positives).

    Returns:
        A scalar in [0, 1]; about N_out / (N_in + N_out) for a score that does not separate them.
    """
    _check_scores(scores_in, scores_out)
    false_positives, true_positives = _roc_points(scores_in, scores_out)
    precision = true_positives / (true_positives + false_positives)
    recall = true_positives / len(scores_out)
    steps = torch.diff(recall, prepend=recall.new_zeros(1))
    return (steps * precision).sum()


def false_positive_rate_at(
    scores_in: torch.Tensor, scores_out: torch.Tensor, true_positive_rate: float = 0.95
) -> torch.Tensor:
    """Share of in-distribution examples flagged when the threshold flags ``true_positive_rate``
    of the out-of-distribution ones (FPR at 95 % TPR by default).

    The threshold is the highest score whose true positive rate reaches the target.

    Args:
        scores_in: (N_in,) scores of in-distribution examples.
        scores_out: (N_out,) scores of out-of-distribution examples.
        true_positive_rate: the target in (0, 1].

    Returns:
        A scalar in [0, 1]; lower is better.
    """
    _check_scores(scores_in, scores_out)
    if not 0 < true_positive_rate <= 1:
        raise ValueError(f"true_positive_rate must be in (0, 1]; got {true_positive_rate}")
    false_positives, true_positives = _roc_points(scores_in, scores_out)
    # the target compared in counts, so that a rate such as 0.95 of 20 examples is not lost to
    # rounding (0.95 * 20 = 19.000000000000004 in floating point)
    needed = math.ceil(true_positive_rate * len(scores_out) - 1e-9)
    first = int((true_positives >= needed).nonzero()[0, 0])
    return false_positives[first] / len(scores_in)


def out_of_distribution(scores_in: torch.Tensor, scores_out: torch.Tensor) -> dict[str, float]:
    """AUROC, AUPR (out-of-distribution examples positive) and FPR at 95 % TPR of one score.

    Example: with per-sample probabilities ``p_in`` (K, N_in, C) and ``p_out`` (K, N_out, C),
    ``out_of_distribution(mutual_information(p_in), mutual_information(p_out))``.
    """
    return {
        "AUROC": float(auroc(scores_in, scores_out)),
        "AUPR": float(aupr(scores_in, scores_out)),
        "FPR95": float(false_positive_rate_at(scores_in, scores_out, 0.95)),
    }
