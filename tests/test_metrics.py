"""Predictive metrics against scikit-learn, torch.distributions and hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import brentq
from scipy.stats import norm
from sklearn.metrics import (
    accuracy_score,
    brier_score_loss,
    log_loss,
    mean_squared_error,
)
from torch.distributions import Categorical, Normal

from vbnn.metrics import (
    accuracy,
    brier_score,
    classification_nll,
    entropy,
    expected_calibration_error,
    expected_entropy,
    gaussian_mixture_log_likelihood,
    gaussian_mixture_quantile,
    interval_coverage,
    mutual_information,
    predictive_entropy,
    reliability_table,
    rmse,
)
from vbnn.regression.evaluation import metrics_from_predictions

DOUBLE = torch.float64


def random_probabilities(*shape: int) -> torch.Tensor:
    return torch.softmax(2.0 * torch.randn(*shape, dtype=DOUBLE), dim=-1)


# Five examples, three classes, hand-checked: confidences 0.9, 0.8, 0.5, 0.6, 0.4;
# predictions 0, 1, 0, 2, 0 against labels 0, 2, 0, 2, 0 (only the second is wrong).
HAND_PROBABILITIES = torch.tensor(
    [
        [0.9, 0.05, 0.05],
        [0.1, 0.8, 0.1],
        [0.5, 0.3, 0.2],
        [0.2, 0.2, 0.6],
        [0.4, 0.35, 0.25],
    ],
    dtype=DOUBLE,
)
HAND_LABELS = torch.tensor([0, 2, 0, 2, 0])


# --- Regression --------------------------------------------------------------------------------


def test_one_component_mixture_is_the_gaussian_log_density() -> None:
    means = torch.randn(1, 50, dtype=DOUBLE)
    stds = torch.rand(1, 50, dtype=DOUBLE) + 0.1
    target = torch.randn(50, dtype=DOUBLE)
    expected = Normal(means[0], stds[0]).log_prob(target)
    torch.testing.assert_close(gaussian_mixture_log_likelihood(means, stds, target), expected)


def test_two_identical_components_equal_one() -> None:
    means = torch.randn(1, 30, dtype=DOUBLE)
    stds = torch.rand(1, 30, dtype=DOUBLE) + 0.1
    target = torch.randn(30, dtype=DOUBLE)
    one = gaussian_mixture_log_likelihood(means, stds, target)
    two = gaussian_mixture_log_likelihood(means.repeat(2, 1), stds.repeat(2, 1), target)
    torch.testing.assert_close(two, one)


def test_mixture_log_likelihood_is_the_log_of_the_average_density() -> None:
    means = torch.randn(4, 20, dtype=DOUBLE)
    stds = torch.rand(4, 20, dtype=DOUBLE) + 0.2
    target = torch.randn(20, dtype=DOUBLE)
    expected = Normal(means, stds).log_prob(target).exp().mean(0).log()
    torch.testing.assert_close(gaussian_mixture_log_likelihood(means, stds, target), expected)


def test_mixture_log_likelihood_is_stable_far_in_the_tail() -> None:
    means = torch.tensor([[0.0], [1.0]], dtype=DOUBLE)
    target = torch.tensor([60.0], dtype=DOUBLE)  # densities underflow to 0 in float64
    value = gaussian_mixture_log_likelihood(means, 1.0, target)
    # The component at 1 dominates: log(1/2) + log N(60 | 1, 1) up to exp(-59.5) relative terms.
    expected = math.log(0.5) + Normal(1.0, 1.0).log_prob(target.double())
    torch.testing.assert_close(value, expected)


@pytest.mark.parametrize("stds", [0.7, torch.tensor(0.7), torch.full((3, 1), 0.7)])
def test_scalar_and_per_component_stds_equal_the_full_layout(stds: object) -> None:
    means = torch.randn(3, 10, dtype=DOUBLE)
    target = torch.randn(10, dtype=DOUBLE)
    full = gaussian_mixture_log_likelihood(means, torch.full((3, 10), 0.7, dtype=DOUBLE), target)
    torch.testing.assert_close(gaussian_mixture_log_likelihood(means, stds, target), full)


@pytest.mark.parametrize("per_sample", [False, True])
def test_the_model_stack_evaluation_is_the_mixture_log_likelihood_of_each_model(
    per_sample: bool,
) -> None:
    """``metrics_from_predictions`` of (K, M, N) predictions: model m's mean over examples of
    log (1/K) sum_k N(y | f_km, s_m^2) (or s_km^2: one std per SGLD sample), minus log c_m."""
    predictions = torch.randn(6, 3, 15, dtype=DOUBLE)
    target = torch.randn(3, 15, dtype=DOUBLE)
    noise = (
        torch.rand(6, 3, dtype=DOUBLE) + 0.2 if per_sample else torch.rand(3, dtype=DOUBLE) + 0.2
    )
    scale = torch.tensor([0.5, 1.0, 2.0], dtype=DOUBLE)
    got = metrics_from_predictions(predictions, noise, target, scale).log_likelihood
    stds = noise.expand(6, 3)
    for m in range(3):
        densities = Normal(predictions[:, m], stds[:, m, None]).log_prob(target[m])
        mixture = torch.logsumexp(densities, 0) - math.log(6)
        torch.testing.assert_close(got[m], mixture.mean() - math.log(scale[m]))


def test_rmse_matches_scikit_learn() -> None:
    prediction = torch.randn(40, dtype=DOUBLE)
    target = torch.randn(40, dtype=DOUBLE)
    expected = math.sqrt(mean_squared_error(target.numpy(), prediction.numpy()))
    assert rmse(prediction, target).item() == pytest.approx(expected, rel=1e-12)


def test_rmse_by_hand() -> None:
    value = rmse(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1.0, 2.0, 3.0, 0.0]))
    assert value.item() == pytest.approx(2.0)  # sqrt(16 / 4)


# --- Interval coverage -------------------------------------------------------------------------


def within_four_standard_errors(share: float, level: float, draws: int) -> bool:
    return abs(share - level) < 4 * math.sqrt(level * (1 - level) / draws)


@pytest.mark.parametrize("level", [0.5, 0.95])
def test_correct_gaussian_covers_its_level(level: float) -> None:
    draws = 20_000
    means = torch.randn(draws, dtype=DOUBLE)
    stds = torch.rand(draws, dtype=DOUBLE) + 0.1
    target = means + stds * torch.randn(draws, dtype=DOUBLE)
    share = interval_coverage(means, stds, target, level).item()
    assert within_four_standard_errors(share, level, draws)


def test_overconfident_gaussian_covers_less() -> None:
    draws = 20_000
    target = torch.randn(draws, dtype=DOUBLE)
    share = interval_coverage(torch.zeros(draws, dtype=DOUBLE), 0.5, target, 0.95).item()
    expected = 2 * norm.cdf(0.5 * norm.ppf(0.975)) - 1  # the interval is +-0.98 true stds
    assert within_four_standard_errors(share, expected, draws)


def test_correct_mixture_covers_its_level() -> None:
    draws, components = 20_000, 3
    means = torch.tensor([[-3.0], [0.0], [2.5]], dtype=DOUBLE).expand(components, draws)
    stds = torch.tensor([[0.5], [1.0], [0.3]], dtype=DOUBLE)
    chosen = torch.randint(components, (draws,))
    target = means[chosen, 0] + stds[chosen, 0] * torch.randn(draws, dtype=DOUBLE)
    share = interval_coverage(means, stds, target, 0.9).item()
    assert within_four_standard_errors(share, 0.9, draws)
    # A Gaussian with the mixture's mean and std would be miscalibrated here: the test has power.
    moment_std = ((stds**2 + means[:, :1] ** 2).mean() - means[:, 0].mean() ** 2).sqrt()
    moment_share = interval_coverage(means.mean(0), moment_std, target, 0.9).item()
    assert not within_four_standard_errors(moment_share, 0.9, draws)


def mixture_quantile_by_root_finding(means: np.ndarray, stds: np.ndarray, level: float) -> float:
    return brentq(lambda x: norm.cdf((x - means) / stds).mean() - level, -50, 50, xtol=1e-14)


def test_mixture_quantile_matches_a_root_finder() -> None:
    means = torch.tensor([[-2.0, 0.0], [1.0, 0.5], [4.0, 3.0]], dtype=DOUBLE)
    stds = torch.tensor([[0.5, 1.0], [1.0, 0.2], [0.3, 2.0]], dtype=DOUBLE)
    for probability in (0.025, 0.3, 0.975):
        quantile = gaussian_mixture_quantile(means, stds, probability)
        for n in range(2):
            m, s = means[:, n].numpy(), stds[:, n].numpy()
            expected = mixture_quantile_by_root_finding(m, s, probability)
            assert quantile[n].item() == pytest.approx(expected, abs=1e-10)


def test_one_component_mixture_interval_is_the_gaussian_interval() -> None:
    means = torch.randn(1, 200, dtype=DOUBLE)
    stds = torch.rand(1, 200, dtype=DOUBLE) + 0.1
    z = norm.ppf(0.975)
    upper = gaussian_mixture_quantile(means, stds, 0.975)
    torch.testing.assert_close(upper, means[0] + z * stds[0])
    target = means[0] + 2.0 * stds[0] * torch.randn(200, dtype=DOUBLE)
    torch.testing.assert_close(
        interval_coverage(means, stds, target), interval_coverage(means[0], stds[0], target)
    )


# --- Classification ----------------------------------------------------------------------------


def test_classification_nll_matches_scikit_learn_log_loss() -> None:
    probabilities = random_probabilities(60, 4)
    labels = torch.randint(4, (60,))
    expected = log_loss(labels.numpy(), probabilities.numpy(), labels=list(range(4)))
    assert classification_nll(probabilities, labels).item() == pytest.approx(expected, rel=1e-12)


def test_zero_probability_on_the_true_class_is_floored_at_eps_or_the_floor_given() -> None:
    probabilities = torch.tensor([[1.0, 0.0], [0.5, 0.5]], dtype=DOUBLE)
    labels = torch.tensor([1, 0])
    value = classification_nll(probabilities, labels).item()
    eps = torch.finfo(DOUBLE).eps
    assert value == pytest.approx((-math.log(eps) + math.log(2)) / 2, rel=1e-12)
    assert value == pytest.approx(log_loss(labels.numpy(), probabilities.numpy()), rel=1e-12)
    guarded = classification_nll(probabilities, labels, floor=1e-300).item()
    assert guarded == pytest.approx((-math.log(1e-300) + math.log(2)) / 2, rel=1e-12)


def test_accuracy_matches_scikit_learn() -> None:
    probabilities = random_probabilities(80, 5)
    labels = torch.randint(5, (80,))
    expected = accuracy_score(labels.numpy(), probabilities.argmax(-1).numpy())
    assert accuracy(probabilities, labels).item() == pytest.approx(expected)
    assert accuracy(HAND_PROBABILITIES, HAND_LABELS).item() == pytest.approx(0.8)


def test_int32_labels_are_accepted() -> None:
    as_int32 = classification_nll(HAND_PROBABILITIES, HAND_LABELS.int())
    torch.testing.assert_close(as_int32, classification_nll(HAND_PROBABILITIES, HAND_LABELS))


def test_multiclass_brier_score_matches_scikit_learn() -> None:
    probabilities = random_probabilities(50, 4)
    labels = torch.randint(4, (50,))
    expected = brier_score_loss(
        labels.numpy(), probabilities.numpy(), labels=list(range(4)), scale_by_half=False
    )
    assert brier_score(probabilities, labels).item() == pytest.approx(expected, rel=1e-12)


def test_binary_brier_score_is_twice_the_positive_class_form() -> None:
    probabilities = random_probabilities(50, 2)
    labels = torch.randint(2, (50,))
    binary = brier_score_loss(labels.numpy(), probabilities[:, 1].numpy())  # mean (p_1 - y)^2
    assert brier_score(probabilities, labels).item() == pytest.approx(2 * binary, rel=1e-12)


def test_brier_score_by_hand() -> None:
    probabilities = torch.tensor([[0.7, 0.2, 0.1], [0.0, 0.0, 1.0]], dtype=DOUBLE)
    labels = torch.tensor([0, 0])
    # (0.09 + 0.04 + 0.01 + 1 + 0 + 1) / 2
    assert brier_score(probabilities, labels).item() == pytest.approx(1.07)


# --- Calibration -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bins", "expected"),
    [
        # One bin: accuracy 4/5, mean confidence 3.2/5 -> |0.8 - 0.64|.
        (1, 0.16),
        # (0, .5]: confidences .5, .4, both right -> 2/5 |1 - .45|; (.5, 1]: .9, .8, .6 with two
        # right -> 3/5 |2/3 - 2.3/3|. The edge 0.5 sits in the lower bin.
        (2, 0.22 + 0.06),
        # (0, 1/3] empty; (1/3, 2/3]: .5, .6, .4 all right -> 3/5 |1 - .5|; (2/3, 1]: .9, .8 with
        # one right -> 2/5 |.5 - .85|.
        (3, 0.30 + 0.14),
    ],
)
def test_expected_calibration_error_by_hand(bins: int, expected: float) -> None:
    value = expected_calibration_error(HAND_PROBABILITIES, HAND_LABELS, bins)
    assert value.item() == pytest.approx(expected, abs=1e-12)


def test_reliability_table_by_hand() -> None:
    table = reliability_table(HAND_PROBABILITIES, HAND_LABELS, bins=3)
    third = torch.tensor([0.0, 1 / 3, 2 / 3, 1.0], dtype=DOUBLE)
    torch.testing.assert_close(table["lower"], third[:-1])
    torch.testing.assert_close(table["upper"], third[1:])
    assert table["count"].tolist() == [0, 3, 2]
    torch.testing.assert_close(
        table["accuracy"], torch.tensor([math.nan, 1.0, 0.5], dtype=DOUBLE), equal_nan=True
    )
    torch.testing.assert_close(
        table["confidence"], torch.tensor([math.nan, 0.5, 0.85], dtype=DOUBLE), equal_nan=True
    )


def test_one_bin_ece_is_the_gap_between_accuracy_and_mean_confidence() -> None:
    probabilities = random_probabilities(100, 3)
    labels = torch.randint(3, (100,))
    gap = accuracy(probabilities, labels) - probabilities.max(-1).values.mean()
    torch.testing.assert_close(expected_calibration_error(probabilities, labels, 1), gap.abs())


def test_ece_is_the_count_weighted_gap_of_the_table() -> None:
    probabilities = random_probabilities(300, 4)
    labels = torch.randint(4, (300,))
    table = reliability_table(probabilities, labels)
    assert int(table["count"].sum()) == 300 and table["count"].shape == (15,)
    filled = table["count"] > 0
    gaps = (table["accuracy"] - table["confidence"]).abs()[filled]
    expected = (table["count"][filled] * gaps).sum() / 300
    torch.testing.assert_close(expected_calibration_error(probabilities, labels), expected)


# --- Uncertainty -------------------------------------------------------------------------------


def test_entropy_of_the_uniform_distribution_is_log_c() -> None:
    uniform = torch.full((3, 4, 7), 1 / 7, dtype=DOUBLE)
    torch.testing.assert_close(
        predictive_entropy(uniform), torch.full((4,), math.log(7), dtype=DOUBLE)
    )
    torch.testing.assert_close(
        expected_entropy(uniform), torch.full((4,), math.log(7), dtype=DOUBLE)
    )
    torch.testing.assert_close(entropy(uniform[0]), torch.full((4,), math.log(7), dtype=DOUBLE))


def test_entropies_match_torch_distributions() -> None:
    probabilities = random_probabilities(5, 8, 3)
    torch.testing.assert_close(
        entropy(probabilities[0]), Categorical(probs=probabilities[0]).entropy()
    )
    assert entropy(torch.eye(4, dtype=DOUBLE)).tolist() == [0.0] * 4  # 0 log 0 = 0
    torch.testing.assert_close(
        predictive_entropy(probabilities), Categorical(probs=probabilities.mean(0)).entropy()
    )
    torch.testing.assert_close(
        expected_entropy(probabilities), Categorical(probs=probabilities).entropy().mean(0)
    )


def test_mutual_information_is_zero_when_all_samples_agree() -> None:
    agreeing = random_probabilities(1, 10, 4).expand(6, 10, 4)
    information = mutual_information(agreeing)
    torch.testing.assert_close(information, torch.zeros(10, dtype=DOUBLE), atol=1e-12, rtol=0)
    assert bool((mutual_information(random_probabilities(6, 10, 4)) > 1e-3).all())


def test_mutual_information_of_two_confident_disagreeing_samples_is_log_2() -> None:
    probabilities = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]], dtype=DOUBLE)  # 0 log 0 = 0
    assert expected_entropy(probabilities).item() == 0.0
    assert mutual_information(probabilities).item() == pytest.approx(math.log(2))


# --- Errors ------------------------------------------------------------------------------------


def test_regression_shape_errors_name_the_argument() -> None:
    means = torch.zeros(3, 5)
    with pytest.raises(ValueError, match=r"target must be \(N,\) = \(5,\).*got \(5, 1\)"):
        gaussian_mixture_log_likelihood(means, 1.0, torch.zeros(5, 1))
    with pytest.raises(ValueError, match=r"stds has shape \(1, 5\)"):
        gaussian_mixture_log_likelihood(means, torch.ones(1, 5), torch.zeros(5))
    with pytest.raises(ValueError, match=r"means must be \(K, N\); got shape \(5,\)"):
        gaussian_mixture_log_likelihood(torch.zeros(5), 1.0, torch.zeros(5))
    with pytest.raises(ValueError, match=r"prediction \(4,\) and target \(4, 1\)"):
        rmse(torch.zeros(4), torch.zeros(4, 1))
    with pytest.raises(ValueError, match=r"stds has shape \(3, 1\)"):
        interval_coverage(torch.zeros(5), torch.ones(3, 1), torch.zeros(5))


def test_non_positive_stds_are_rejected() -> None:
    with pytest.raises(ValueError, match="stds must be positive; smallest is 0"):
        gaussian_mixture_log_likelihood(
            torch.zeros(2, 3), torch.tensor([[1.0], [0.0]]), torch.zeros(3)
        )
    with pytest.raises(ValueError, match="stds must be positive; smallest is -1"):
        interval_coverage(torch.zeros(3), -1.0, torch.zeros(3))


@pytest.mark.parametrize("level", [0.0, 1.0, 1.5, -0.1])
def test_level_outside_the_open_unit_interval_is_rejected(level: float) -> None:
    with pytest.raises(ValueError, match="level must lie in"):
        interval_coverage(torch.zeros(3), 1.0, torch.zeros(3), level)


def test_invalid_probabilities_are_rejected() -> None:
    labels = torch.tensor([0, 1])
    with pytest.raises(ValueError, match=r"probabilities must lie in \[0, 1\]"):
        classification_nll(torch.tensor([[1.2, -0.2], [0.5, 0.5]]), labels)
    with pytest.raises(ValueError, match=r"rows must sum to 1.*largest deviation is 0\.1"):
        accuracy(torch.tensor([[0.6, 0.3], [0.5, 0.5]], dtype=DOUBLE), labels)
    with pytest.raises(ValueError, match=r"probabilities must be \(K, N, C\).*got shape \(2, 2\)"):
        predictive_entropy(torch.full((2, 2), 0.5))
    with pytest.raises(ValueError, match=r"probabilities must be \(N, C\)"):
        brier_score(torch.full((1, 2, 2), 0.5), labels)
    with pytest.raises(ValueError, match=r"probabilities must be \(N, C\)"):
        entropy(torch.full((1, 2, 2), 0.5))


def test_invalid_labels_are_rejected() -> None:
    probabilities = torch.full((2, 3), 1 / 3)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\).*\[0, 3\]"):
        classification_nll(probabilities, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\).*\[-1, 1\]"):
        accuracy(probabilities, torch.tensor([-1, 1]))
    with pytest.raises(ValueError, match=r"labels must be \(N,\) = \(2,\).*got \(2, 1\)"):
        brier_score(probabilities, torch.tensor([[0], [1]]))
    with pytest.raises(
        ValueError, match=r"labels must be an integer tensor; got dtype torch\.float32"
    ):
        expected_calibration_error(probabilities, torch.tensor([0.0, 1.0]))


@pytest.mark.parametrize("bins", [0, -3, 2.5])
def test_invalid_bins_are_rejected(bins: object) -> None:
    with pytest.raises(ValueError, match="bins must be an integer >= 1"):
        expected_calibration_error(HAND_PROBABILITIES, HAND_LABELS, bins)  # type: ignore[arg-type]
