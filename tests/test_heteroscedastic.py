"""HeteroscedasticGaussianLikelihood: log N(y | mu(x), sigma(x)^2) from a network's two outputs,
in ``vbnn.train``'s objective and validation, ``BayesianRegressor(heteroscedastic=True)`` and
``compare`` on a network."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import vbnn
from vbnn.comparison.entries import EntryRun, NetworkSource, train_entry
from vbnn.comparison.folds import Task
from vbnn.comparison.network import score
from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.modes import network_output
from vbnn.metrics import gaussian_mixture_log_likelihood
from vbnn.training.batches import as_batches
from vbnn.training.validation import evaluate


def test_log_prob_is_the_closed_form() -> None:
    generator = torch.Generator().manual_seed(0)
    prediction = torch.randn(3, 7, 2, generator=generator, dtype=torch.float64)
    y = torch.randn(3, 7, generator=generator, dtype=torch.float64)
    mu, sigma = prediction[..., 0], prediction[..., 1].exp()
    by_hand = -((y - mu) ** 2) / (2 * sigma**2) - torch.log(sigma) - 0.5 * math.log(2 * math.pi)
    likelihood = vbnn.HeteroscedasticGaussianLikelihood()
    torch.testing.assert_close(likelihood.log_prob(prediction, y), by_hand, rtol=1e-13, atol=0)
    floored = vbnn.HeteroscedasticGaussianLikelihood(min_std=0.3)
    sigma = sigma + 0.3
    by_hand = -((y - mu) ** 2) / (2 * sigma**2) - torch.log(sigma) - 0.5 * math.log(2 * math.pi)
    torch.testing.assert_close(floored.log_prob(prediction, y), by_hand, rtol=1e-13, atol=0)
    torch.testing.assert_close(floored.std(prediction), sigma, rtol=0, atol=0)


def test_a_constant_log_std_head_is_the_homoscedastic_likelihood() -> None:
    generator = torch.Generator().manual_seed(1)
    mean = torch.randn(50, 1, generator=generator, dtype=torch.float64)
    y = torch.randn(50, generator=generator, dtype=torch.float64)
    for log_std in (-2.0, 0.0, 1.5):
        prediction = torch.cat([mean, torch.full_like(mean, log_std)], -1)
        fixed = vbnn.GaussianLikelihood(fixed_std=math.exp(log_std), dtype=torch.float64)
        torch.testing.assert_close(
            vbnn.HeteroscedasticGaussianLikelihood().log_prob(prediction, y),
            fixed.log_prob(mean, y),
            rtol=1e-14,
            atol=1e-14,
        )


def test_wrong_shapes_are_named() -> None:
    likelihood = vbnn.HeteroscedasticGaussianLikelihood()
    with pytest.raises(ValueError, match=r"prediction \(5, 1\) must be \(\.\.\., N, 2\)"):
        likelihood.log_prob(torch.zeros(5, 1), torch.zeros(5))
    with pytest.raises(ValueError, match=r"prediction \(5, 2\) must be the target \(4,\)"):
        likelihood.log_prob(torch.zeros(5, 2), torch.zeros(4))
    with pytest.raises(ValueError, match="min_std must be >= 0, got -1"):
        vbnn.HeteroscedasticGaussianLikelihood(min_std=-1)
    with pytest.raises(ValueError, match="needs real targets"):
        vbnn.train(
            nn.Linear(1, 2),
            (torch.zeros(4, 1), torch.zeros(4, dtype=torch.long)),
            likelihood=likelihood,
            objective="likelihood",
            progress=False,
        )


def noisy_sine(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """y = sin(2x) + (0.1 + 0.2 x) eps on x ~ U(0, 4): a noise std growing linearly in x, from
    0.1 to 0.9 (smooth, so a tanh network can represent it; |x| would put a kink at 0)."""
    generator = torch.Generator().manual_seed(seed)
    x = 4 * torch.rand(n, 1, generator=generator)
    eps = torch.randn(n, generator=generator)
    return x, torch.sin(2 * x[:, 0]) + (0.1 + 0.2 * x[:, 0]) * eps


def test_trained_heads_recover_a_noise_std_growing_in_x() -> None:
    """Maximum likelihood on 3000 points: the std head matches 0.1 + 0.2 x on a grid.

    Tolerance: a std estimated from n residuals has relative standard error 1/sqrt(2n); the
    head smooths over a neighbourhood of some hundred points (n ~ 150: 6 %), and the mean
    head's error and the short training add a bias, so 15 % is about 2.5 standard errors
    (seeds 0 to 3 of this set-up give 3 % to 9 %).
    """
    torch.manual_seed(0)
    network = nn.Sequential(
        nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 2)
    )
    result = vbnn.train(
        network,
        noisy_sine(3000, seed=0),
        likelihood=vbnn.HeteroscedasticGaussianLikelihood(),
        objective="likelihood",
        epochs=250,
        batch_size=None,
        learning_rate=0.01,
        validation=noisy_sine(2000, seed=1),
        progress=False,
    )
    grid = torch.linspace(0.25, 3.75, 15).unsqueeze(-1)
    with torch.no_grad():
        std = result.likelihood.std(network(grid))
    truth = 0.1 + 0.2 * grid[:, 0]
    assert float(((std - truth).abs() / truth).max()) < 0.15
    # the validation NLL is near the entropy of the true noise, E[log sigma(x)] + log(2 pi e) / 2
    entropy = float(torch.log(0.1 + 0.2 * torch.linspace(0, 4, 10001)).mean())
    entropy += 0.5 * math.log(2 * math.pi * math.e)
    assert abs(result.history[-1]["validation_nll"] - entropy) < 0.05


class Heads(nn.Module):
    """A fixed network, x -> (sin(2x), x / 2 - 1) times ``scale`` in the target's units."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = torch.sin(2 * x[..., 0]) * self.scale
        log_std = -1.0 + 0.5 * x[..., 0] + math.log(self.scale)
        return torch.stack([mean, log_std], -1)


def test_validation_metrics_are_in_the_target_units() -> None:
    """y in other units (x 100) with the heads in those units: the RMSE is 100 times as large,
    the NLL larger by log 100 (the density of y / 100 is 100 times that of y)."""
    x, y = noisy_sine(300, seed=2)
    likelihood = vbnn.HeteroscedasticGaussianLikelihood()
    metrics = [
        evaluate(
            Heads(scale),
            likelihood,
            as_batches((x, y * scale), None, torch.Generator()),
            1,
            0,
            torch.device("cpu"),
        )
        for scale in (1.0, 100.0)
    ]
    assert metrics[1]["validation_rmse"] == pytest.approx(100 * metrics[0]["validation_rmse"])
    nll = metrics[0]["validation_nll"] + math.log(100)
    assert metrics[1]["validation_nll"] == pytest.approx(nll, rel=1e-6)
    residual = (torch.sin(2 * x[:, 0]) - y).double()
    assert metrics[0]["validation_rmse"] == pytest.approx(float(residual.pow(2).mean().sqrt()))


def test_validation_of_a_bayesian_network_scores_the_mixture_of_its_heads() -> None:
    """K weight draws: NLL = -mean_n log (1/K) sum_k N(y_n | mu_k, sigma_k^2), with every
    sample's own per-input stds (``metrics.gaussian_mixture_log_likelihood``)."""
    torch.manual_seed(3)
    network = vbnn.convert(
        nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, 2)), "mf", init_std=0.3
    ).eval()
    x, y = noisy_sine(40, seed=3)
    likelihood = vbnn.HeteroscedasticGaussianLikelihood()
    samples = 5
    metrics = evaluate(
        network,
        likelihood,
        as_batches((x, y), None, torch.Generator()),
        samples,
        7,
        torch.device("cpu"),
    )
    noise = ModelGenerators.for_keys(7, range(1), "eval", torch.device("cpu"))
    with torch.no_grad():
        outputs = torch.stack(
            [network_output(network, x, ForwardMode.WEIGHTS, noise) for _ in range(samples)]
        )
    means, stds = likelihood.mean(outputs), likelihood.std(outputs)
    assert float(stds.std(0).max()) > 0.01  # the samples differ in their stds
    mixture = gaussian_mixture_log_likelihood(means, stds, y)
    assert metrics["validation_nll"] == pytest.approx(-float(mixture.mean()), rel=1e-6)
    rmse = float((means.mean(0) - y).pow(2).mean().sqrt())
    assert metrics["validation_rmse"] == pytest.approx(rmse, rel=1e-6)


def sine_rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``noisy_sine`` as NumPy rows, (n, 1) and (n,), float64."""
    x, y = noisy_sine(n, seed)
    return x.double().numpy(), y.double().numpy()


@pytest.fixture(scope="module")
def heteroscedastic_fit() -> vbnn.BayesianRegressor:
    x, y = sine_rows(400, seed=4)
    estimator = vbnn.BayesianRegressor(
        heteroscedastic=True, iterations=600, learning_rate=0.01, samples=50
    )
    return estimator.fit(x, y)


def test_the_estimators_std_is_the_mixtures_and_follows_the_noise(heteroscedastic_fit) -> None:
    """Var[y | x] = Var_k[mu_k] + mean_k sigma_k^2 >= the aleatoric part, which follows
    0.1 + 0.2 x: 400 points and a KL pulling the heads' weights, so the check is global, not
    point by point: the root mean square of log(aleatoric / truth) over the grid is below 0.25
    (the 7 points: seeds 4 to 6 give 0.11 to 0.17), and from x = 0.5 to 3.5 the std grows more
    than 2.5-fold (4-fold in truth, 1-fold for one noise std)."""
    grid = np.linspace(0.5, 3.5, 7).reshape(-1, 1)
    mean, epistemic, aleatoric = heteroscedastic_fit.predict_components(grid)
    predicted, total = heteroscedastic_fit.predict(grid, return_std=True)
    np.testing.assert_array_equal(predicted, mean)
    np.testing.assert_allclose(total, np.sqrt(epistemic**2 + aleatoric**2), rtol=1e-12)
    assert np.all(total >= aleatoric) and np.all(epistemic > 0)
    truth = 0.1 + 0.2 * grid[:, 0]
    assert np.sqrt(np.mean(np.log(aleatoric / truth) ** 2)) < 0.25
    assert aleatoric[-1] > 2.5 * aleatoric[0]


def test_the_estimators_score_is_the_mixture_of_its_heads(heteroscedastic_fit) -> None:
    x, y = sine_rows(30, seed=5)
    means, stds = heteroscedastic_fit._samples(x)
    assert float(stds.std(1).min()) > 0  # per input
    mixture = gaussian_mixture_log_likelihood(means, stds, torch.as_tensor(y))
    assert heteroscedastic_fit.score(x, y) == pytest.approx(float(mixture.mean()), rel=1e-12)


def test_the_estimators_numbers_are_in_the_target_units(tmp_path) -> None:
    """Fit on y and on 100 y + 7: the standardised targets are the same, so the fits are too
    (to float rounding); the mean and the stds scale by 100, the log-likelihood drops by
    log 100. A saved model predicts what it predicted."""
    x, y = sine_rows(100, seed=6)
    fits = [
        vbnn.BayesianRegressor(heteroscedastic=True, iterations=100, samples=10).fit(x, target)
        for target in (y, 100 * y + 7)
    ]
    parts = [fit.predict_components(x[:20]) for fit in fits]
    for small, large in zip(parts[0], parts[1], strict=True):
        scale = 100 * small + 7 if small is parts[0][0] else 100 * small
        np.testing.assert_allclose(large, scale, rtol=1e-6)
    assert fits[1].score(x, 100 * y + 7) == pytest.approx(fits[0].score(x, y) - math.log(100))
    loaded = vbnn.BayesianRegressor.load(fits[0].save(tmp_path / "model"))
    assert loaded.get_params()["heteroscedastic"]
    np.testing.assert_array_equal(
        loaded.predict(x[:5], return_std=True)[1], fits[0].predict(x[:5], return_std=True)[1]
    )


def entry(name: str) -> EntryRun:
    return EntryRun(
        method=name,
        epochs=3,
        batch_size=32,
        learning_rate=1e-2,
        samples=6,
        ensemble_size=2,
        seed=0,
        heteroscedastic=True,
    )


def two_heads() -> nn.Module:
    return nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 2))


@pytest.mark.parametrize("name", ["mf", "ensemble"])
def test_a_compare_entry_scores_the_mixture_of_its_heads_in_the_target_units(name: str) -> None:
    """Targets 100 y + 7 train the same standardised network: means map to 100 mu + 7, the
    per-input stds to 100 sigma_k(x) (each sample its own), so the RMSE is 100 times as large
    and the log-likelihood log 100 lower; the score is the mixture of the heads by hand."""
    x, y = noisy_sine(160, seed=7)
    source = NetworkSource(two_heads())
    plain = train_entry(source, entry(name), 0, (x[:120], y[:120]), x[120:], None, True)
    scaled = train_entry(source, entry(name), 0, (x[:120], 100 * y[:120] + 7), x[120:], None, True)
    assert plain.test.shape == (6 if name == "mf" else 2, 40, 1)
    assert plain.noise_std.shape == plain.test.shape[:2]
    assert float(plain.noise_std.std(1).min()) > 0  # a std per input
    torch.testing.assert_close(scaled.test, 100 * plain.test + 7, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(scaled.noise_std, 100 * plain.noise_std, rtol=1e-4, atol=0)
    metrics = [
        score(t, target, Task.REGRESSION, 0.9)
        for t, target in ((plain, y[120:]), (scaled, 100 * y[120:] + 7))
    ]
    assert metrics[1]["rmse"] == pytest.approx(100 * metrics[0]["rmse"], rel=1e-4)
    assert metrics[1]["test_log_likelihood"] == pytest.approx(
        metrics[0]["test_log_likelihood"] - math.log(100), abs=1e-4
    )
    means, stds = plain.test.double().squeeze(-1), plain.noise_std
    densities = torch.exp(-0.5 * ((y[120:] - means) / stds) ** 2) / (stds * math.sqrt(2 * math.pi))
    log_likelihood = float(densities.mean(0).log().mean())
    assert metrics[0]["test_log_likelihood"] == pytest.approx(log_likelihood, rel=1e-9)


def test_compare_recognises_two_outputs_and_refuses_laplace() -> None:
    x, y = noisy_sine(80, seed=8)
    result = vbnn.compare(two_heads, (x.numpy(), y.numpy()), folds=2, families=["point"], epochs=2)
    assert result.task is Task.REGRESSION and set(result.folds["fold"]) == {0, 1}
    with pytest.raises(ValueError, match="'laplace': laplace-torch's regression Hessian"):
        vbnn.compare(two_heads, (x.numpy(), y.numpy()), folds=2, families=["laplace"])
    with pytest.raises(ValueError, match=r"needs one output \(N, 1\), or two \(N, 2\)"):
        vbnn.compare(nn.Linear(1, 3), (x.numpy(), y.numpy()), folds=2, families=["point"])


def test_diagnose_names_the_heteroscedastic_regressor(heteroscedastic_fit) -> None:
    x, y = sine_rows(20, seed=9)
    with pytest.raises(ValueError, match=r"heteroscedastic=True\) has a noise std per input"):
        vbnn.diagnose(heteroscedastic_fit, x, y)


def test_a_stack_of_models_trains_and_validates_each_on_its_own_heads() -> None:
    """M = 2 models sharing the batch: the stack's validation NLL (K = 1, the mean networks) is
    the average over the models of each one's -mean_n log N(y_n | mu_m(x_n), sigma_m(x_n)^2)."""
    stack = vbnn.networks.MLP("mf", (1, 8, 2), "tanh", ModelGenerators.for_keys(0, [0, 1], "init"))
    likelihood = vbnn.HeteroscedasticGaussianLikelihood()
    x, y = noisy_sine(64, seed=10)
    result = vbnn.train(
        stack,
        (x, y),
        likelihood=likelihood,
        epochs=3,
        batch_size=16,
        learning_rate=0.01,
        validation=(x, y),
        progress=False,
    )
    with torch.no_grad():
        outputs = network_output(stack, x.expand(2, -1, -1), ForwardMode.MEAN)  # (2, 64, 2)
    means, stds = likelihood.mean(outputs), likelihood.std(outputs)
    per_model = -(-0.5 * ((y - means) / stds) ** 2 - stds.log() - 0.5 * math.log(2 * math.pi))
    nll = evaluate(
        stack, likelihood, as_batches((x, y), None, torch.Generator()), 1, 0, torch.device("cpu")
    )["validation_nll"]
    assert nll == pytest.approx(float(per_model.mean()), rel=1e-5)
    assert result.history[-1]["validation_nll"] == pytest.approx(nll, rel=1e-4)  # float32 sums
    assert not torch.allclose(outputs[0], outputs[1])  # two models, two initialisations
