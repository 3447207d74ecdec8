"""The entries of ``compare`` on a network beyond a family: IVON and its ensemble, the last-layer
Laplace (against Bayesian linear regression in closed form), early stopping on a validation split,
standardised regression targets (affine equivariance), and their bad input."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch
from torch import nn

import vbnn
from vbnn.comparison import entries
from vbnn.comparison.entries import (
    EntryRun,
    NetworkSource,
    Standardizer,
    train_entry,
    validation_split,
)
from vbnn.methods.laplace import fit_laplace, laplace_samples

needs_laplace = pytest.mark.skipif(
    importlib.util.find_spec("laplace") is None, reason="the laplace entry needs laplace-torch"
)


def run(name: str, **changes) -> EntryRun:
    values = {"method": name, "epochs": 3, "batch_size": 32, "learning_rate": 1e-2,
              "samples": 6, "ensemble_size": 1, "seed": 0} | changes  # fmt: skip
    return EntryRun(**values)


def classes(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(rows, 4, generator=torch.Generator().manual_seed(seed))
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 1).long()


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))


def line(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 2, generator=generator, dtype=torch.float64)
    return x, 1.5 * x[:, 0] - x[:, 1] + 0.3 + 0.2 * torch.randn(rows, generator=generator,
                                                                 dtype=torch.float64)  # fmt: skip


@needs_laplace
def test_last_layer_laplace_of_a_linear_model_is_bayesian_linear_regression() -> None:
    """On f(x) = w^T x + b with Gaussian noise sigma the Kronecker factors of a one-output layer
    are exact, one block per parameter tensor: H = blockdiag(X^T X, N) / sigma^2 (the weight and
    bias blocks apart, as KFAC keeps them), Sigma = (H + delta I)^-1, the predictive variance of
    x* is x~*^T Sigma x~* (x~ = [x, 1]), and the prior precision of the largest Laplace evidence
    at theta satisfies delta = P / (|theta|^2 + tr Sigma) (its stationary point)."""
    x, y = line(200, 0)
    network = nn.Sequential(nn.Flatten(), nn.Linear(2, 1)).double()  # laplace-torch wants 2
    with torch.no_grad():  # the least-squares fit: a MAP point of a weak prior
        design = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1)
        solution = torch.linalg.lstsq(design, y[:, None]).solution
        network[1].weight.copy_(solution[:2].T)
        network[1].bias.copy_(solution[2])
    sigma = 0.2
    approximation = fit_laplace(network, (x, y), True, sigma, 50)
    delta = float(approximation.prior_precision)
    curvature = design.T @ design / sigma**2
    curvature[:2, 2] = curvature[2, :2] = 0  # weight and bias blocks apart
    covariance = torch.linalg.inv(curvature + delta * torch.eye(3, dtype=torch.float64))
    theta = solution.squeeze(1)
    assert delta == pytest.approx(3 / (float(theta @ theta) + float(covariance.trace())), rel=0.01)
    probe = torch.tensor([[0.5, -1.0], [2.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    probe_design = torch.cat([probe, torch.ones(3, 1, dtype=probe.dtype)], 1)
    variance = ((probe_design @ covariance) * probe_design).sum(1)
    _, exact = approximation(probe, pred_type="glm")
    torch.testing.assert_close(exact.reshape(3), variance, rtol=1e-9, atol=0)
    draws = laplace_samples(approximation, probe, 20_000, None, 0, True, torch.device("cpu"))
    assert draws.shape == (20_000, 3, 1)
    mean = network(probe).detach().squeeze(1)
    # Monte Carlo: 5 standard errors of the mean and of the variance of 20,000 Gaussian draws
    error = 5 * (variance / 20_000).sqrt()
    assert ((draws.squeeze(-1).mean(0) - mean).abs() < error).all()
    relative = 5 * math.sqrt(2 / 20_000)
    torch.testing.assert_close(draws.squeeze(-1).var(0), variance, rtol=relative, atol=0)


@needs_laplace
def test_laplace_classifier_samples_are_log_probabilities_around_the_point_network() -> None:
    data, test = classes(300, 0), classes(50, 1)
    trained = train_entry(NetworkSource(mlp), run("laplace", samples=200), 0, data, test[0],
                          None, False)  # fmt: skip
    assert trained.test.shape == (200, 50, 3) and trained.seconds > 0
    probabilities = trained.test.exp()
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(200, 50), rtol=0, atol=1e-5)
    point = train_entry(NetworkSource(mlp), run("point"), 0, data, test[0], None, False)
    # the linearised predictive is centred on the point network: its mean logit's argmax agrees
    agree = (probabilities.mean(0).argmax(-1) == point.test[0].argmax(-1)).double().mean()
    assert agree > 0.9
    again = train_entry(NetworkSource(mlp), run("laplace", samples=200), 0, data, test[0],
                        None, False)  # fmt: skip
    torch.testing.assert_close(again.test, trained.test, rtol=0, atol=0)  # seeded


def test_ivon_entries_train_mean_field_posteriors_by_ivon(entry_trainings) -> None:
    data, test = classes(200, 0), classes(40, 1)
    single = train_entry(NetworkSource(mlp), run("ivon"), 0, data, test[0], None, False)
    ensemble = train_entry(NetworkSource(mlp), run("ivon-ensemble", ensemble_size=3), 0, data,
                           test[0], None, False)  # fmt: skip
    calls = [options["optimizer"] for _, options in entry_trainings]
    assert calls == [vbnn.IVON()] * 4
    assert single.test.shape == (6, 40, 3) and ensemble.test.shape == (18, 40, 3)
    torch.testing.assert_close(ensemble.test[:6], single.test, rtol=0, atol=0)  # member 0
    assert not torch.allclose(single.test[0], single.test[1])  # weight samples of q
    slower = vbnn.IVON(learning_rate=0.01)
    other = train_entry(NetworkSource(mlp), run("ivon", ivon=slower), 0, data, test[0], None,
                        False)  # fmt: skip
    assert entry_trainings[-1][1]["optimizer"] == slower
    assert not torch.allclose(other.test, single.test)


def test_validation_split_is_a_seeded_partition() -> None:
    x = torch.arange(50.0)[:, None]
    (kept, _), (held, _) = validation_split((x, x.squeeze(1)), 0.1, 7)
    assert len(held) == 5 and len(kept) == 45
    assert sorted(torch.cat([kept, held]).squeeze(1).tolist()) == list(range(50))
    (again, _), _ = validation_split((x, x.squeeze(1)), 0.1, 7)
    assert torch.equal(kept, again)
    (other, _), _ = validation_split((x, x.squeeze(1)), 0.1, 8)
    assert not torch.equal(kept, other)


def test_point_stops_early_on_held_out_examples(monkeypatch) -> None:
    seen = []
    real = entries.train

    def recorded(network, data, **options):
        seen.append((len(data[0]), options["validation"], options["patience"]))
        return real(network, data, **options)

    monkeypatch.setattr(entries, "train", recorded)
    data, test = classes(200, 0), classes(40, 1)
    train_entry(NetworkSource(mlp), run("point", patience=2), 0, data, test[0], None, False)
    train_entry(NetworkSource(mlp), run("mf", patience=2), 0, data, test[0], None, False)
    (rows, held, patience), (all_rows, none, no_patience) = seen
    assert rows == 180 and len(held[0]) == 20 and patience == 2
    assert all_rows == 200 and none is None and no_patience is None  # a family: every example


@pytest.mark.parametrize("name", ["point", "mf"])
def test_standardised_targets_make_the_regression_affine_equivariant(name: str) -> None:
    """Targets a y + b train the same standardised network: means map to a f + b, noise std to
    a sigma, so the metrics do not depend on the targets' units."""
    x, y = line(120, 1)
    x, y = x.float(), y.float()
    network = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))
    source = NetworkSource(network)
    plain = train_entry(source, run(name), 0, (x[:100], y[:100]), x[100:], None, True)
    scaled = train_entry(source, run(name), 0, (x[:100], 1000 * y[:100] - 50), x[100:], None,
                         True)  # fmt: skip
    torch.testing.assert_close(scaled.test, 1000 * plain.test - 50, rtol=1e-4, atol=1e-2)
    torch.testing.assert_close(scaled.noise_std, 1000 * plain.noise_std, rtol=1e-4, atol=0)
    scale = Standardizer.of(y)
    torch.testing.assert_close(scale.means(scale.forward(y)), y, rtol=1e-6, atol=1e-6)


def test_bad_entry_input_is_named() -> None:
    data, test = classes(40, 0), classes(10, 1)
    with pytest.raises(ValueError, match=r"'ensemble': ensemble_size=1; an ensemble needs at"):
        vbnn.compare(mlp, data, test=test, families=["ensemble"], ensemble_size=1)

    def broken() -> nn.Module:
        raise RuntimeError("no such checkpoint")

    with pytest.raises(
        ValueError, match=r"network: .*broken\(\) raised RuntimeError: no such"
    ) as error:
        vbnn.compare(broken, data, test=test)
    assert isinstance(error.value.__cause__, RuntimeError)  # the user's own error, chained

    if importlib.util.find_spec("laplace") is None:
        return

    def convolution_last() -> nn.Module:
        return nn.Sequential(nn.Unflatten(1, (1, 2, 2)), nn.Conv2d(1, 3, 2), nn.Flatten())

    with pytest.raises(ValueError, match=r"'laplace': the last layer with weights of Sequential"):
        vbnn.compare(convolution_last, data, test=test, families=["laplace"])
