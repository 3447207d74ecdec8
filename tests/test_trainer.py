"""``vbnn.train``: its steps are ``vbnn.elbo``'s by hand, full batch == one minibatch of N, the
conjugate posterior, early stopping, resuming, data forms, the global RNG, and its errors."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import vbnn
from vbnn.core.devices import usable_device
from vbnn.core.randomness import ModelGenerators
from vbnn.layers import MeanField


def blobs(n: int = 60, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=generator)
    return x, (x[:, 0] + 0.5 * x[:, 1] > 0).long() + (x[:, 2] > 1).long()


def network(seed: int = 0, dropout: bool = False) -> nn.Module:
    torch.manual_seed(seed)
    layers = [nn.Linear(3, 8), nn.Tanh()] + ([nn.Dropout(0.2)] if dropout else [])
    return vbnn.convert(nn.Sequential(*layers, nn.Linear(8, 3)), "mf")


def assert_same_parameters(first: nn.Module, second: nn.Module) -> None:
    for (name, a), b in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_an_epoch_is_adam_on_the_minibatch_elbo_by_hand() -> None:
    x, y = blobs(10)
    trained, by_hand = network(), network()
    vbnn.train(trained, (x, y), epochs=1, batch_size=4, learning_rate=0.05, seed=7,
               progress=False)  # fmt: skip
    optimizer = torch.optim.Adam(by_hand.parameters(), lr=0.05, foreach=True)
    noise = ModelGenerators.for_keys(7, [0], "train")
    likelihood = vbnn.CategoricalLikelihood()
    order = torch.randperm(10, generator=torch.Generator().manual_seed(7))
    for index in order.split(4):
        terms = vbnn.elbo(by_hand, likelihood, None, x[index], y[index], noise, dataset_size=10)
        optimizer.zero_grad()
        (-terms["objective"] / 10).backward()
        optimizer.step()
    assert_same_parameters(trained, by_hand)


def test_full_batch_is_the_minibatch_of_all_n_examples() -> None:
    x, y = blobs(30)
    full, minibatch = network(), network()
    first = vbnn.train(full, (x, y), epochs=3, batch_size=None, progress=False)
    second = vbnn.train(minibatch, (x, y), epochs=3, batch_size=30, progress=False)
    assert_same_parameters(full, minibatch)
    assert [r["train_nll"] for r in first.history] == [r["train_nll"] for r in second.history]


def test_tensors_arrays_a_dataset_and_a_dataloader_give_the_same_training() -> None:
    x, y = blobs(40)
    runs = {}
    for name, data in {
        "tensors": (x, y),
        "arrays": (x.numpy(), y.numpy()),
        "dataset": TensorDataset(x, y),
        "loader": DataLoader(TensorDataset(x, y), batch_size=40),  # in order; one batch
    }.items():
        runs[name] = network()
        batch_size = None if name == "loader" else 16
        vbnn.train(runs[name], data, epochs=2, batch_size=batch_size, progress=False)
    for name in ("arrays", "dataset"):
        assert_same_parameters(runs["tensors"], runs[name])
    assert all(torch.isfinite(p).all() for p in runs["loader"].parameters())


def test_mean_field_reaches_the_conjugate_posterior_of_a_linear_model() -> None:
    """Bayesian linear regression with known noise 0.5 and prior N(0, 1): the mean-field optimum
    has the exact posterior mean and the variances 1 / diag(precision)."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(30, 2, generator=generator, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -0.5], dtype=torch.float64) + 0.3
    y = y + 0.5 * torch.randn(30, generator=generator, dtype=torch.float64)
    design = torch.cat([x, torch.ones(30, 1, dtype=torch.float64)], 1)
    precision = torch.eye(3, dtype=torch.float64) + design.T @ design / 0.5**2
    mean = torch.linalg.solve(precision, design.T @ y) / 0.5**2
    std = precision.diagonal().reciprocal().sqrt()
    torch.manual_seed(0)
    layer = MeanField(2, 1, init_std=0.1, dtype=torch.float64)
    likelihood = vbnn.GaussianLikelihood(fixed_std=0.5, dtype=torch.float64)
    prior = vbnn.GaussianPrior(1.0)
    for rate, samples, epochs in ((0.01, 8, 1500), (0.001, 32, 500)):  # the 2nd averages noise
        config = vbnn.TrainerConfig(samples=samples)
        vbnn.train(layer, (x, y), likelihood=likelihood, prior=prior, epochs=epochs, seed=1,
                   batch_size=None, learning_rate=rate, progress=False, config=config)  # fmt: skip
    fitted_mean = torch.cat(
        [layer.weight_mean.detach().flatten(), layer.bias_mean.detach().flatten()]
    )
    weight_std, bias_std = layer.posterior_std()
    fitted_std = torch.cat([weight_std.detach().flatten(), bias_std.detach().flatten()])
    assert torch.all((fitted_mean - mean).abs() < 0.1 * std)
    assert torch.all((fitted_std / std - 1).abs() < 0.1)


def test_early_stopping_restores_the_best_epoch() -> None:
    x, y = blobs(80)
    model, states = network(), {}

    def keep(epoch: int, net: nn.Module, metrics: dict) -> None:
        states[epoch] = copy.deepcopy(net.state_dict())

    result = vbnn.train(model, (x[:20], y[:20]), epochs=40, batch_size=5, learning_rate=0.2,
                        validation=(x[20:], y[20:]), patience=3, progress=False,
                        callbacks=[keep])  # fmt: skip
    nll = [row["validation_nll"] for row in result.history]
    assert result.best_epoch == 1 + int(np.argmin(nll))
    assert result.epochs == len(nll) == min(40, result.best_epoch + 3)
    assert result.epochs < 40  # a learning rate this large overfits 20 examples
    for name, value in model.state_dict().items():
        assert torch.equal(value, states[result.best_epoch][name]), name
    assert not model.training
    assert {"train_nll", "kl", "seconds", "validation_accuracy"} <= result.history[0].keys()


class Killed(Exception):
    pass


def test_a_run_killed_after_two_epochs_resumes_to_the_same_numbers(tmp_path: Path) -> None:
    x, y = blobs(50)
    options = {"epochs": 4, "batch_size": 16, "learning_rate": 0.02, "progress": False,
               "validation": (x[:10], y[:10]), "patience": 10}  # fmt: skip
    whole = network(dropout=True)
    uninterrupted = vbnn.train(whole, (x, y), **options)

    def kill(epoch: int, net: nn.Module, metrics: dict) -> None:
        if epoch == 3:  # epoch 3's checkpoint is written after its callbacks
            raise Killed

    with pytest.raises(Killed):
        vbnn.train(network(dropout=True), (x, y), checkpoint=tmp_path, callbacks=[kill],
                   **options)  # fmt: skip
    torch.manual_seed(123)  # the global RNG's state does not matter
    resumed_network = network(seed=5, dropout=True)  # the checkpoint holds the weights
    resumed = vbnn.train(resumed_network, (x, y), checkpoint=tmp_path, **options)
    assert_same_parameters(whole, resumed_network)

    def numbers(history: list[dict]) -> list[dict]:
        return [{k: v for k, v in row.items() if k != "seconds"} for row in history]

    assert numbers(resumed.history) == numbers(uninterrupted.history)


def test_a_run_killed_after_its_best_epoch_stops_and_restores_as_an_unbroken_one(
    tmp_path: Path,
) -> None:
    """Early stopping's record travels in the checkpoint: killed one epoch after its best epoch
    b, the resumed run stops at b + patience and holds epoch b's weights, as an unbroken run."""
    x, y = blobs(80)
    validation = (x[20:], y[20:])
    options = {"epochs": 40, "batch_size": 5, "learning_rate": 0.2, "progress": False}
    options |= {"validation": validation, "patience": 3}
    whole = network()
    unbroken = vbnn.train(whole, (x[:20], y[:20]), **options)
    assert unbroken.epochs == unbroken.best_epoch + 3 < 40

    def kill(epoch: int, net: nn.Module, metrics: dict) -> None:
        if epoch == unbroken.best_epoch + 1:  # the checkpoint of the best epoch is the last
            raise Killed

    with pytest.raises(Killed):
        vbnn.train(network(), (x[:20], y[:20]), checkpoint=tmp_path, callbacks=[kill], **options)
    resumed_network = network(seed=5)
    resumed = vbnn.train(resumed_network, (x[:20], y[:20]), checkpoint=tmp_path, **options)
    assert (resumed.epochs, resumed.best_epoch) == (unbroken.epochs, unbroken.best_epoch)
    assert_same_parameters(whole, resumed_network)


def test_the_global_rng_does_not_change_the_run() -> None:
    x, y = blobs(30)
    first, second = network(dropout=True), network(dropout=True)
    torch.manual_seed(1)
    vbnn.train(first, (x, y), epochs=2, batch_size=8, progress=False)
    torch.manual_seed(2)
    state = torch.get_rng_state()
    vbnn.train(second, (x, y), epochs=2, batch_size=8, progress=False)
    assert torch.equal(torch.get_rng_state(), state)  # forked and given back
    assert_same_parameters(first, second)


def test_device_cpu_and_a_gaussian_likelihood_for_real_targets() -> None:
    x, _ = blobs(40)
    y = x[:, :1] * 2.0  # (N, 1) targets are read as (N,)
    torch.manual_seed(0)
    model = vbnn.convert(nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1)), "mf")
    result = vbnn.train(model, (x, y), epochs=2, device="cpu", validation=(x, y),
                        learning_rate=0.01, progress=False)  # fmt: skip
    assert isinstance(result.likelihood, vbnn.GaussianLikelihood)
    assert "validation_rmse" in result.history[-1]
    assert next(model.parameters()).device.type == "cpu"


def test_a_plain_module_trains_by_maximum_likelihood() -> None:
    x, y = blobs(40)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 3))
    result = vbnn.train(model, (x, y), objective="likelihood", epochs=30, learning_rate=0.05,
                        batch_size=None, progress=False)  # fmt: skip
    assert result.history[-1]["train_nll"] < result.history[0]["train_nll"]
    with pytest.raises(ValueError, match="holds no vbnn family layer"):
        vbnn.train(model, (x, y), progress=False)


X, LABELS, CATEGORICAL = torch.zeros(4, 3), torch.tensor([0, 1, 1, 0]), vbnn.CategoricalLikelihood()


@pytest.mark.parametrize(
    ("data", "options", "message"),
    [
        ((torch.zeros(0, 3), torch.zeros(0, dtype=torch.long)), {}, r"data is empty"),
        ((torch.zeros(5, 3), torch.zeros(4, dtype=torch.long)), {}, r"x \(5, 3\) has 5 .* \(4,\)"),
        ((X, torch.tensor([0.0, 1.5, 1, 0])), {"likelihood": CATEGORICAL}, "not a class index"),
        ((X, LABELS), {"likelihood": vbnn.GaussianLikelihood()}, "needs real targets"),
        ((X, LABELS), {"objective": "vi"}, "'elbo', 'map', 'likelihood', 'sgld'"),
        ((X, LABELS), {"epochs": 0}, "epochs must be >= 1"),
        (TensorDataset(torch.zeros(0, 3), torch.zeros(0)), {}, "data is empty"),
        ("table.csv", {}, "expected \\(x, y\\) tensors or arrays"),
        ((X, LABELS), {"optimizer": torch.optim.SGD}, r"optimizer: SGD is not a vbnn optimiser "
         r"setting; give a name \('adam', 'ivon', 'sgd'\) or an instance .*vbnn\.train_loop"),
        ((X, LABELS), {"optimizer": vbnn.IVON}, r"call the class: IVON\(\)"),
        ((X, LABELS), {"device": "gpu"}, r"device='gpu': not a device; use 'cpu', 'cuda'"),
        pytest.param((X, LABELS), {"device": "cuda"}, r"device='cuda': .*; use device='cpu'",
                     marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA here")),
    ],
)  # fmt: skip
def test_bad_input_is_named_before_training(data, options, message) -> None:
    model = network()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises((ValueError, TypeError), match=message):
        vbnn.train(model, data, progress=False, **options)
    for name, value in before.items():
        assert torch.equal(value, model.state_dict()[name]), name


def test_a_cuda_index_past_the_visible_gpus_is_refused(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    refused = r"device='cuda:2': this process sees 2 CUDA GPU\(s\), cuda:0 \.\. cuda:1"
    with pytest.raises(ValueError, match=refused):
        vbnn.train(network(), (X, LABELS), device="cuda:2", progress=False)
    assert usable_device("cuda:1") == torch.device("cuda", 1)


def test_sgld_objective_samples_the_exact_conjugate_posterior() -> None:
    """Objective "sgld" on Bayesian linear regression with known noise: 200 independent chains
    (a stack) with a small constant step size; the pooled draws' mean and variance match the
    exact Gaussian posterior. Each chain gives at least one effective draw, so the standard
    error of the mean is at most std / sqrt(200) and that of the variance ratio
    sqrt(2 / 199)."""
    from test_training import conjugate_problem

    from vbnn.core.contracts import Activation
    from vbnn.regression.methods import method_config
    from vbnn.regression.stack import build_stack

    x, y, mean, covariance = conjugate_problem()
    chains, burn_in, thinning = 200, 400, 50
    config = method_config(
        "sgld", hidden=(), activation=Activation.IDENTITY, noise_std=0.5, dtype="float64"
    )
    model, likelihood = build_stack(config, 2, list(range(chains)))
    draws = []

    def keep(epoch: int, network: nn.Module, metrics: dict) -> None:
        if epoch > burn_in and (epoch - burn_in) % thinning == 0:
            layer = network.layers[0]
            draws.append(torch.cat([layer.weight[:, :, 0], layer.bias], 1).detach().clone())

    vbnn.train(model, (x[0], y[0]), likelihood=likelihood, objective="sgld",
               prior=vbnn.GaussianPrior(1.0), epochs=burn_in + 12 * thinning, batch_size=None,
               learning_rate=2e-4, progress=False, callbacks=[keep])  # fmt: skip
    pooled = torch.cat(draws)  # (12 x chains, 3)
    std = covariance.diagonal().sqrt()
    assert torch.all((pooled.mean(0) - mean).abs() < 4 * std / chains**0.5)
    ratio = pooled.var(0) / covariance.diagonal()
    assert torch.all((ratio - 1).abs() < 4 * (2 / (chains - 1)) ** 0.5), ratio


def test_step_callbacks_count_the_run_s_steps_through_a_resume(tmp_path: Path) -> None:
    """4 steps an epoch (50 rows, batches of 16): the step callbacks see steps 1..12 of a
    3-epoch run, and a run killed after epoch 2 resumes at step 9 with the same terms; the
    callbacks, other objects in the resumed run, are not part of the checkpoint's settings."""
    x, y = blobs(50)
    options = {"epochs": 3, "batch_size": 16, "learning_rate": 0.02, "progress": False}
    whole: list[tuple[int, float]] = []

    def settings(seen: list[tuple[int, float]]) -> vbnn.TrainerConfig:
        def record(step: int, terms: dict) -> None:
            seen.append((step, float(terms["objective"].sum())))

        return vbnn.TrainerConfig(step_callbacks=(record,))

    vbnn.train(network(), (x, y), config=settings(whole), **options)
    assert [step for step, _ in whole] == list(range(1, 13))

    def kill(epoch: int, net: nn.Module, metrics: dict) -> None:
        if epoch == 3:  # epoch 3's checkpoint is written after its callbacks
            raise Killed

    with pytest.raises(Killed):
        vbnn.train(network(), (x, y), checkpoint=tmp_path, callbacks=[kill],
                   config=settings([]), **options)  # fmt: skip
    resumed: list[tuple[int, float]] = []
    vbnn.train(network(), (x, y), checkpoint=tmp_path, config=settings(resumed), **options)
    assert resumed == whole[8:]
