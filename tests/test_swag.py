"""SWAG and MultiSWAG (``vbnn.training.swag``) against the iterates' moments, the covariance of
eq. 1, a known Gaussian, batch statistics by hand and the point network; SGD (``SGD``) against
gradient descent by hand."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

import vbnn
from vbnn.networks.predictive import predictive_probabilities
from vbnn.training.swag import (
    BatchNormData,
    SWAGCollector,
    SWAGPosterior,
    swag_predict,
    update_batch_norm,
)


def _linear() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(2, 1).double()  # P = 3 parameters


def _feed(collector: SWAGCollector, network: nn.Module, iterates: torch.Tensor) -> None:
    for theta in iterates:
        vector_to_parameters(theta, list(network.parameters()))
        collector.collect()


def test_collector_holds_the_iterates_mean_second_moment_and_last_deviations() -> None:
    """theta_bar and sigma_diag are the iterates' mean and (1/n) variance; D's columns are the
    last K deviations theta_i - theta_bar_i from the running means (Algorithm 1)."""
    network = _linear()
    iterates = torch.randn(7, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    collector = SWAGCollector(network, rank=4)
    _feed(collector, network, iterates)
    posterior = collector.posterior()
    torch.testing.assert_close(posterior.mean, iterates.mean(0), rtol=0, atol=1e-14)
    variance = iterates.var(0, unbiased=False)
    torch.testing.assert_close(posterior.variance, variance, rtol=0, atol=1e-14)
    running = iterates.cumsum(0) / torch.arange(1, 8, dtype=torch.float64)[:, None]
    deviations = (iterates - running)[-4:].T
    torch.testing.assert_close(posterior.deviations, deviations, rtol=0, atol=1e-14)
    sigma = 0.5 * (torch.diag(variance) + deviations @ deviations.T / 3)
    torch.testing.assert_close(posterior.covariance(), sigma, rtol=0, atol=1e-14)
    torch.testing.assert_close(posterior.covariance(2.0), 4 * sigma, rtol=0, atol=1e-14)


def test_samples_have_mean_theta_bar_and_covariance_sigma_within_monte_carlo_error() -> None:
    """S draws: each mean within 5 standard errors sqrt(Sigma_ii / S), each covariance entry
    within 5 of sqrt((Sigma_ii Sigma_jj + Sigma_ij^2) / S), the Gaussian's sample-covariance
    standard error."""
    make = torch.Generator().manual_seed(2)
    mean = torch.randn(4, generator=make, dtype=torch.float64)
    variance = torch.rand(4, generator=make, dtype=torch.float64)
    deviations = torch.randn(4, 3, generator=make, dtype=torch.float64)
    posterior = SWAGPosterior(mean, variance, deviations)
    sigma = posterior.covariance()
    draws = 20_000
    generator = torch.Generator().manual_seed(3)
    thetas = torch.stack([posterior.sample(generator) for _ in range(draws)])
    error = (thetas.mean(0) - mean).abs()
    assert bool((error < 5 * (sigma.diagonal() / draws).sqrt()).all()), error
    empirical = torch.cov(thetas.T)
    scale = ((sigma.diagonal()[:, None] * sigma.diagonal()[None] + sigma**2) / draws).sqrt()
    assert bool(((empirical - sigma).abs() < 5 * scale).all()), (empirical - sigma) / scale


def test_iterates_of_a_known_gaussian_give_back_its_covariance() -> None:
    """n i.i.d. iterates of N(mu, C): sigma_diag -> diag C (standard error sqrt(2 / n) C_ii)
    and D D^T / (K - 1) over the last K -> C (standard error as above; the running means'
    bias is O(C / n), far below it)."""
    generator = torch.Generator().manual_seed(4)
    factor = torch.tensor([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0], [-0.3, 0.5, 0.5]], dtype=torch.float64)
    covariance = factor @ factor.T
    mu = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    count, rank = 4000, 2000
    iterates = mu + torch.randn(count, 3, generator=generator, dtype=torch.float64) @ factor.T
    network = _linear()
    collector = SWAGCollector(network, rank=rank)
    _feed(collector, network, iterates)
    posterior = collector.posterior()
    diagonal = covariance.diagonal()
    assert bool(((posterior.variance - diagonal).abs() < 5 * diagonal * (2 / count) ** 0.5).all())
    low_rank = posterior.deviations @ posterior.deviations.T / (rank - 1)
    scale = ((diagonal[:, None] * diagonal[None] + covariance**2) / rank).sqrt()
    assert bool(((low_rank - covariance).abs() < 5 * scale).all()), (low_rank - covariance) / scale
    assert bool(((posterior.mean - mu).abs() < 5 * (diagonal / count).sqrt()).all())


def test_a_linear_networks_predictive_has_the_moments_of_sigma() -> None:
    """f(x) = phi(x)^T theta with phi = (x_1, x_2, 1) (``nn.Linear``'s weight, then bias): the S
    outputs of ``swag_predict`` have mean phi^T theta_bar and variance phi^T Sigma phi, each
    within 5 standard errors (sqrt(v / S) and sqrt(2 / S) v)."""
    network = _linear()
    make = torch.Generator().manual_seed(6)
    posterior = SWAGPosterior(
        torch.randn(3, generator=make, dtype=torch.float64),
        torch.rand(3, generator=make, dtype=torch.float64),
        torch.randn(3, 4, generator=make, dtype=torch.float64),
    )
    x = torch.randn(5, 2, generator=make, dtype=torch.float64)
    draws = 4000
    out = swag_predict(
        posterior, network, x, samples=draws, generator=torch.Generator().manual_seed(7)
    ).squeeze(-1)
    features = torch.cat([x, torch.ones(5, 1, dtype=torch.float64)], dim=1)
    variance = ((features @ posterior.covariance()) * features).sum(1)
    assert bool(
        ((out.mean(0) - features @ posterior.mean).abs() < 5 * (variance / draws).sqrt()).all()
    )
    assert bool(((out.var(0) - variance).abs() < 5 * (2 / draws) ** 0.5 * variance).all())


def test_batch_norm_recompute_gives_the_inputs_batch_statistics() -> None:
    """After ``update_batch_norm`` a BatchNorm1d behind a linear layer holds, per batch of equal
    size, the mean of the batch means of h = W x + b and of their unbiased variances; with one
    batch, the data's; every module's mode and the momentum are as before."""
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(2, 3), nn.Dropout(0.5), nn.BatchNorm1d(3)).double()
    network.eval()
    x = torch.randn(40, 2, dtype=torch.float64)
    hidden = network[0](x).detach()
    update_batch_norm(network, x, batch_size=10)
    batches = hidden.reshape(4, 10, 3)
    norm = network[2]
    torch.testing.assert_close(norm.running_mean, hidden.mean(0))
    torch.testing.assert_close(norm.running_var, batches.var(1, unbiased=True).mean(0))
    assert not network.training and not norm.training and norm.momentum == 0.1
    update_batch_norm(network, x, batch_size=None)
    torch.testing.assert_close(norm.running_var, hidden.var(0, unbiased=True))
    plain = _linear()
    before = plain.state_dict()
    update_batch_norm(plain, x, batch_size=10)  # no batch norm: nothing happens
    assert all(torch.equal(before[k], v) for k, v in plain.state_dict().items())


def test_swag_predict_recomputes_batch_norm_for_each_sample_and_restores_the_network() -> None:
    """Each sample's output is the network with the drawn parameters and batch statistics of
    the training inputs (checked by hand); the network is left as it was."""
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.Linear(3, 2)).double().eval()
    inputs, x = torch.randn(30, 2, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64)
    collector = SWAGCollector(network, rank=2)
    for _ in range(3):
        with torch.no_grad():
            for p in network.parameters():
                p.add_(0.1 * torch.randn_like(p))
        collector.collect()
    state = {k: v.clone() for k, v in network.state_dict().items()}
    posterior = collector.posterior()
    with pytest.raises(ValueError, match="has batch norm; pass batch_norm"):
        swag_predict(posterior, network, x, samples=2, generator=torch.Generator())
    out = swag_predict(
        posterior,
        network,
        x,
        samples=2,
        generator=torch.Generator().manual_seed(5),
        batch_norm=BatchNormData(inputs),
    )
    assert all(torch.equal(state[k], v) for k, v in network.state_dict().items())
    generator = torch.Generator().manual_seed(5)
    for k in range(2):
        with torch.no_grad():
            vector_to_parameters(posterior.sample(generator), list(network.parameters()))
            hidden = network[0](inputs)
            network[1].running_mean.copy_(hidden.mean(0))
            network[1].running_var.copy_(hidden.var(0, unbiased=True))
            torch.testing.assert_close(out[k], network(x), rtol=0, atol=1e-12)


def test_multiswag_of_one_run_is_swag_and_its_predictive_is_the_equal_mixture() -> None:
    network = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 3)).double()
    x = torch.randn(6, 2, dtype=torch.float64)
    posteriors = []
    for seed in (0, 1):
        collector = SWAGCollector(network, rank=3)
        perturb = torch.Generator().manual_seed(seed)
        for _ in range(4):
            with torch.no_grad():
                for p in network.parameters():
                    p.add_(0.3 * torch.randn(p.shape, generator=perturb, dtype=p.dtype))
            collector.collect()
        posteriors.append(collector.posterior())

    def predict(chosen, samples=5):
        generator = torch.Generator().manual_seed(7)
        return swag_predict(chosen, network, x, samples=samples, generator=generator)

    assert torch.equal(predict(posteriors[0]), predict(posteriors[:1]))
    chunked = swag_predict(
        posteriors[0],
        network,
        x,
        samples=5,
        batch_size=4,
        generator=torch.Generator().manual_seed(7),
    )
    torch.testing.assert_close(chunked, predict(posteriors[0]), rtol=0, atol=1e-15)
    both = predict(posteriors)
    assert both.shape == (10, 6, 3)
    assert torch.equal(both[:5], predict(posteriors[0]))
    mixture = 0.5 * (predictive_probabilities(both[:5]) + predictive_probabilities(both[5:]))
    torch.testing.assert_close(predictive_probabilities(both), mixture, rtol=0, atol=1e-15)


def test_a_constant_iterate_samples_the_point_network_exactly() -> None:
    network = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 2))  # float32
    x = torch.randn(8, 2)
    collector = SWAGCollector(network, rank=3)
    for _ in range(5):
        collector.collect()
    posterior = collector.posterior()
    assert bool((posterior.variance == 0).all()) and bool((posterior.deviations == 0).all())
    out = swag_predict(posterior, network, x, samples=3, generator=torch.Generator())
    assert torch.equal(out, network(x).detach().expand(3, -1, -1))


def test_swag_through_train_collects_the_sgd_iterates_by_step_and_by_epoch() -> None:
    """With ``vbnn.train`` and SGD: the step collector's mean is the mean of the iterates after
    steps 5, 7, 9, 11; the epoch collector's that of epochs 2 and 3 (steps 8 and 12)."""
    torch.manual_seed(0)
    x = torch.randn(32, 3, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64) + 0.1
    network = nn.Sequential(nn.Linear(3, 1)).double()
    iterates = []
    by_step = SWAGCollector(network, rank=2, start=5, every=2)
    by_epoch = SWAGCollector(network, rank=0, start=2)

    def record(step, terms):
        iterates.append(parameters_to_vector(network.parameters()).detach().clone())

    config = vbnn.TrainerConfig(step_callbacks=(record, by_step.after_step))
    vbnn.train(
        network,
        (x, y),
        objective="likelihood",
        epochs=3,
        batch_size=8,
        learning_rate=0.05,
        likelihood=vbnn.GaussianLikelihood(fixed_std=1.0),
        optimizer=vbnn.SGD(momentum=0.9),
        callbacks=[by_epoch],
        config=config,
        progress=False,
    )
    thetas = torch.stack(iterates)
    assert len(thetas) == 12 and by_step.count == 4 and by_epoch.count == 2
    torch.testing.assert_close(by_step.posterior().mean, thetas[[4, 6, 8, 10]].mean(0))
    torch.testing.assert_close(by_epoch.posterior().mean, thetas[[7, 11]].mean(0))
    torch.testing.assert_close(
        by_step.posterior().deviations[:, -1], thetas[10] - thetas[[4, 6, 8, 10]].mean(0)
    )
    restored = SWAGCollector(network, rank=2)
    restored.load_state_dict(by_step.state_dict())
    assert torch.equal(restored.posterior().deviations, by_step.posterior().deviations)


def test_a_run_resumed_from_its_checkpoint_collects_what_an_uninterrupted_run_does(
    tmp_path,
) -> None:
    """The epoch collector travels in ``vbnn.train``'s checkpoint: a run stopped in epoch 3
    (after epoch 2's checkpoint) and resumed by a fresh collector ends with the moments of a
    run that was never stopped."""
    torch.manual_seed(0)
    x, y = torch.randn(24, 3, dtype=torch.float64), torch.randint(0, 2, (24,))
    initial = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    options = {
        "objective": "likelihood",
        "epochs": 4,
        "batch_size": 8,
        "learning_rate": 0.1,
        "optimizer": vbnn.SGD(),
        "progress": False,
    }

    def run(callbacks, network, checkpoint=None):
        vbnn.train(network, (x, y), callbacks=callbacks, checkpoint=checkpoint, **options)

    whole = copy.deepcopy(initial)
    uninterrupted = SWAGCollector(whole, rank=2, start=2)
    run([uninterrupted], whole)

    def stop(epoch, network, metrics):
        if epoch == 3:
            raise KeyboardInterrupt

    first = copy.deepcopy(initial)
    with pytest.raises(KeyboardInterrupt):
        run([SWAGCollector(first, rank=2, start=2), stop], first, tmp_path)
    second = copy.deepcopy(initial)
    resumed = SWAGCollector(second, rank=2, start=2)
    run([resumed], second, tmp_path)
    assert resumed.count == uninterrupted.count == 3
    for name in ("mean", "variance", "deviations"):
        assert torch.equal(
            getattr(resumed.posterior(), name), getattr(uninterrupted.posterior(), name)
        ), name


def test_sgd_without_momentum_is_gradient_descent_on_the_mean_negative_log_likelihood() -> None:
    """One full-batch step of objective "likelihood" with unit Gaussian noise: theta_1 =
    theta_0 - lr (1/N) sum_n (f(x_n) - y_n) (x_n, 1)."""
    torch.manual_seed(0)
    x = torch.randn(16, 2, dtype=torch.float64)
    y = torch.randn(16, dtype=torch.float64)
    network = nn.Linear(2, 1).double()
    weight, bias = network.weight.detach().clone(), network.bias.detach().clone()
    residual = (x @ weight.T + bias).squeeze(1) - y
    vbnn.train(
        network,
        (x, y),
        objective="likelihood",
        epochs=1,
        batch_size=None,
        learning_rate=0.3,
        likelihood=vbnn.GaussianLikelihood(fixed_std=1.0),
        optimizer=vbnn.SGD(momentum=0.0),
        progress=False,
    )
    torch.testing.assert_close(network.weight.detach(), weight - 0.3 * (residual @ x)[None] / 16)
    torch.testing.assert_close(network.bias.detach(), bias - 0.3 * residual.mean()[None])
    assert vbnn.training.optimizer.optimizer_settings("sgd") == vbnn.SGD()


def test_bad_settings_are_refused_with_the_reason() -> None:
    network = _linear()
    with pytest.raises(ValueError, match="rank must be 0 or >= 2"):
        SWAGCollector(network, rank=1)
    collector = SWAGCollector(network, rank=2)
    with pytest.raises(ValueError, match="0 iterates collected"):
        collector.posterior()
    collector.collect()
    with pytest.raises(ValueError, match=r"1 iterates collected .* SWAG needs 2"):
        collector.posterior()
    collector.collect()
    other = nn.Linear(3, 1).double()
    with pytest.raises(ValueError, match="called with another network"):
        collector(1, other, {})
    with pytest.raises(ValueError, match=r"posteriors\[0\] holds 3 parameters, Linear has 4"):
        swag_predict(
            collector.posterior(), other, torch.zeros(1, 3), samples=1, generator=torch.Generator()
        )
    with pytest.raises(ValueError, match="momentum must lie in"):
        vbnn.SGD(momentum=1.0)
    assert math.isclose(float(collector.posterior().variance.sum()), 0.0)
