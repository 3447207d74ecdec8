"""IVON on vbnn's layers (``training.natural_gradient``): one step against the update written out
by hand and against ivon-opt's on the same draw, the exact mean-field optimum of Bayesian linear
regression, resumption from a checkpoint, and the settings it refuses."""

from __future__ import annotations

import math
from collections import deque
from pathlib import Path

import pytest
import torch
from torch import nn

import vbnn
from vbnn.layers.mean_field import MeanField
from vbnn.training.natural_gradient import IVON, prior_weight_decay


class FixedNoise:
    """A ``NoiseSource`` handing out given standard normal blocks, one per draw, in order."""

    def __init__(self, blocks: list[torch.Tensor]) -> None:
        self.blocks = deque(blocks)

    def randn(self, *shape: int, dtype=torch.float32, device=None) -> torch.Tensor:
        return self.blocks.popleft().to(dtype).reshape(-1, *shape)  # (models, *shape)

    def get_state(self) -> None:
        return None

    def set_state(self, state: None) -> None:
        pass


def squared_error(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return 0.5 * (prediction - target).square().mean()


def regression(examples: int, dtype: torch.dtype = torch.float64):
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(examples, 3, generator=generator, dtype=dtype)
    w = torch.tensor([[1.0], [-0.5], [0.25]], dtype=dtype)
    return x, x @ w + 0.5 * torch.randn(examples, 1, generator=generator, dtype=dtype)


def build(layer: nn.Module, settings: IVON, examples: int, prior_std: float = 1.0):
    return settings.build(layer, nn.Module(), learning_rate=1e-3, rates={},
                          prior=vbnn.GaussianPrior(prior_std), dataset_size=examples)  # fmt: skip


@pytest.mark.parametrize("radius", [math.inf, 0.01])
def test_one_step_is_the_update_written_out(radius: float) -> None:
    x, y = regression(20)
    settings = IVON(learning_rate=0.3, hess_init=0.2, beta1=0.8, beta2=0.7, clip_radius=radius)
    layer = MeanField(3, 1, bias=False, dtype=torch.float64)
    optimizer = build(layer, settings, examples=20, prior_std=2.0)
    delta = 1.0 / (20 * 2.0**2)
    mean = layer.weight_mean.detach().clone()
    std = torch.full_like(mean, (20 * (0.2 + delta)) ** -0.5)
    torch.testing.assert_close(layer.weight_std(), std)  # sigma_0 = 1 / sqrt(ess (h0 + delta))
    momentum, hessian = torch.zeros_like(mean), torch.full_like(mean, 0.2)
    draws = [torch.randn(3, 1, dtype=torch.float64) for _ in range(3)]
    for step, eps in enumerate(draws, start=1):
        optimizer.zero_grad()
        squared_error(layer(x, mode="weights", noise=FixedNoise([eps])), y).backward()
        optimizer.step()
        # by hand: the gradient at w = m + sigma eps, h_hat = g eps / sigma
        weight = (mean + std * eps).requires_grad_(True)
        (gradient,) = torch.autograd.grad(squared_error(x @ weight[0], y), weight)
        curvature = gradient * eps / std
        momentum = 0.8 * momentum + 0.2 * gradient
        hessian = (0.7 * hessian + 0.3 * curvature
                   + 0.5 * 0.3**2 * (hessian - curvature) ** 2 / (hessian + delta))  # fmt: skip
        direction = (momentum / (1 - 0.8**step) + delta * mean) / (hessian + delta)
        clipped = direction.clamp(-radius, radius)
        if not math.isinf(radius):  # the bound is reached, so the test sees it
            assert (clipped != direction).any()
        mean = mean - 0.3 * (0.2 + delta) * clipped
        std = (20 * (hessian + delta)).rsqrt()
        torch.testing.assert_close(layer.weight_mean.detach(), mean, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(layer.weight_std().detach(), std, rtol=1e-12, atol=1e-14)


def test_the_attention_settings_lift_small_steps_and_bound_large_ones() -> None:
    """One step from the same means, std and draw under ``IVON()`` and ``IVON.for_attention()``:
    a weight whose preconditioned direction d is inside both bounds moves alpha (h0 + delta) d,
    so alpha'/alpha times as far under the attention settings; one beyond r' moves exactly
    alpha' (h0 + delta) r'."""
    x, y = regression(20)
    x = x[:, :2] * torch.tensor([1e-4, 10.0], dtype=torch.float64)  # a small and a large gradient
    eps = torch.randn(1, 2, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    moves = {}
    for name, settings in (("default", IVON()), ("attention", IVON.for_attention())):
        torch.manual_seed(1)
        layer = MeanField(2, 1, bias=False, dtype=torch.float64)
        optimizer = build(layer, settings, examples=10_000)  # delta m far below the bounds
        before = layer.weight_mean.detach().clone()
        squared_error(layer(x, mode="weights", noise=FixedNoise([eps])), y).backward()
        optimizer.step()
        moves[name] = (layer.weight_mean.detach() - before).flatten()
    fast = IVON.for_attention()
    assert (fast.learning_rate, fast.clip_radius) == (5.0, 0.0007)
    assert IVON.for_attention(ess=50.0).ess == 50.0
    rate = fast.learning_rate * (fast.hess_init + prior_weight_decay(1.0, 10_000))
    small, large = moves["default"], moves["attention"]
    assert large[0].abs() < rate * fast.clip_radius  # inside both bounds
    torch.testing.assert_close(large[0] / small[0], torch.tensor(5.0 / 0.7, dtype=torch.float64))
    torch.testing.assert_close(large[1].abs(), torch.tensor(rate * 0.0007, dtype=torch.float64))


def test_a_step_equals_ivon_opt_on_the_same_draw() -> None:
    ivon = pytest.importorskip("ivon")
    x, y = regression(30)
    delta, ess = prior_weight_decay(1.0, 30), 30.0
    hess_init = float(torch.tensor(0.1))  # ivon-opt adds h0 as a float32 tensor
    settings = IVON(learning_rate=0.2, hess_init=hess_init, beta2=0.9, clip_radius=0.05)
    layer = MeanField(3, 1, bias=False, dtype=torch.float64)
    optimizer = build(layer, settings, examples=30)
    plain = nn.Linear(3, 1, bias=False).double()
    with torch.no_grad():
        plain.weight.copy_(layer.weight_mean[0].T)
    reference = ivon.IVON(plain.parameters(), lr=0.2, ess=ess, hess_init=hess_init, beta2=0.9,
                          weight_decay=delta, clip_radius=0.05)  # fmt: skip
    for step in range(5):
        torch.manual_seed(step)
        eps = torch.randn(3, dtype=torch.float64)  # ivon-opt's draw of this step
        torch.manual_seed(step)
        with reference.sampled_params(train=True):
            reference.zero_grad()
            squared_error(plain(x), y).backward()
        reference.step()
        optimizer.zero_grad()
        noise = FixedNoise([eps.reshape(1, 3).T])  # (O, I) flattened -> the layer's (I, O)
        squared_error(layer(x, mode="weights", noise=noise), y).backward()
        optimizer.step()
        torch.testing.assert_close(layer.weight_mean[0].T.detach(), plain.weight.detach(),
                                   rtol=1e-10, atol=1e-12)  # fmt: skip
        std = (ess * (reference.param_groups[0]["hess"] + delta)).rsqrt()
        torch.testing.assert_close(layer.weight_std()[0].T.reshape(-1), std, rtol=1e-10,
                                   atol=1e-12)  # fmt: skip


@pytest.mark.parametrize("mode", ["local", "weights"])
def test_bayesian_linear_regression_reaches_the_mean_field_optimum(mode: str) -> None:
    """The exact posterior of y = x w + N(0, 0.5^2) under w ~ N(0, I) is N(mu, Lambda^-1),
    Lambda = X^T X / 0.25 + I; the mean-field optimum of KL(q || posterior) has the means mu and
    the variances 1 / Lambda_ii."""
    examples = 64
    x, y = regression(examples)
    precision = x.T @ x / 0.25 + torch.eye(3, dtype=x.dtype)
    exact_mean = torch.linalg.solve(precision, x.T @ y / 0.25)[:, 0]
    exact_std = precision.diagonal().rsqrt()
    torch.manual_seed(0)
    layer = MeanField(3, 1, bias=False, dtype=torch.float64)
    # the mean's step is learning_rate (h0 + delta) / (h + delta) times the gradient: h0 = 0.1
    # makes it a tenth of a Newton step once h has converged
    settings = IVON(learning_rate=1.0, beta1=0.5, beta2=0.995, hess_init=0.1, clip_radius=math.inf)
    optimizer = build(layer, settings, examples)
    noise = vbnn.ModelGenerators([5])
    means, stds = [], []
    for step in range(3000):
        optimizer.zero_grad()
        squared_error(layer(x, mode=mode, noise=noise), y).div(0.25).backward()
        optimizer.step()
        if step >= 2000:
            means.append(layer.weight_mean.detach()[0, :, 0].clone())
            stds.append(layer.weight_std().detach()[0, :, 0])
    mean, std = torch.stack(means).mean(0), torch.stack(stds).mean(0)
    # the means wander by a fraction of a posterior std; their average over 1000 steps far less
    torch.testing.assert_close(mean, exact_mean, rtol=0, atol=0.05 * float(exact_std.min()))
    torch.testing.assert_close(std, exact_std, rtol=0.03, atol=0)


def test_a_resumed_run_ends_with_the_numbers_of_one_never_stopped(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(96, 4, generator=generator)
    y = (x[:, 0] + x[:, 1] > 0).long()

    def network() -> nn.Module:
        torch.manual_seed(2)
        plain = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.LayerNorm(8), nn.Linear(8, 2))
        return vbnn.convert(plain, "mf")

    class Stop(Exception):
        pass

    def stop_at_two(epoch: int, net: nn.Module, row: dict) -> None:
        if epoch == 2:
            raise Stop

    settings = {"epochs": 3, "batch_size": 32, "optimizer": "ivon", "progress": False, "seed": 4}
    whole = vbnn.train(network(), (x, y), **settings).network.state_dict()
    with pytest.raises(Stop):
        vbnn.train(network(), (x, y), checkpoint=tmp_path, callbacks=[stop_at_two], **settings)
    resumed = vbnn.train(network(), (x, y), checkpoint=tmp_path, **settings).network.state_dict()
    for name, value in whole.items():
        torch.testing.assert_close(resumed[name], value, rtol=0, atol=0, msg=name)


def test_the_parameterization_of_the_std_does_not_change_the_steps() -> None:
    x, y = regression(16, torch.float32)
    layers = [MeanField(3, 2, parameterization=p, generators=torch.Generator().manual_seed(0))
              for p in ("log", "softplus")]  # fmt: skip
    optimizers = [build(layer, IVON(learning_rate=0.5, beta2=0.9), 16) for layer in layers]
    draws = [torch.randn(4, 2) for _ in range(4)]
    for eps in draws:
        for layer, optimizer in zip(layers, optimizers, strict=True):
            optimizer.zero_grad()
            squared_error(
                layer(x, mode="weights", noise=FixedNoise([eps])), y.expand(-1, 2)
            ).backward()
            optimizer.step()
    for first, second in zip(layers[0].posterior_std(), layers[1].posterior_std(), strict=True):
        torch.testing.assert_close(first, second, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(layers[0].weight_mean, layers[1].weight_mean, rtol=1e-4, atol=1e-6)


def test_each_model_of_a_stack_takes_the_step_it_takes_alone() -> None:
    """A stack of two models with their own prior stds (so their own delta, a tensor) moves
    each model as a one-model layer with that prior moves, draw for draw."""
    x, y = regression(12)
    settings, stds = IVON(learning_rate=0.2, beta2=0.9), (1.0, 2.0)
    torch.manual_seed(0)
    stack = MeanField(3, 1, num_models=2, dtype=torch.float64)
    prior = vbnn.GaussianPrior(torch.tensor(stds, dtype=torch.float64))
    optimizer = settings.build(stack, nn.Module(), learning_rate=1e-3, rates={}, prior=prior,
                               dataset_size=12)  # fmt: skip
    alone = []
    for model, std in enumerate(stds):
        layer = MeanField(3, 1, dtype=torch.float64)
        with torch.no_grad():
            layer.weight_mean.copy_(stack.weight_mean[model : model + 1])
            layer.bias_mean.copy_(stack.bias_mean[model : model + 1])
        alone.append((layer, build(layer, settings, 12, prior_std=std)))
    for _ in range(4):
        eps = torch.randn(2, 4, 1, dtype=torch.float64)  # per model: the weights' and the bias'
        optimizer.zero_grad()
        prediction = stack(x.expand(2, -1, -1), mode="weights", noise=FixedNoise([eps]))
        (0.5 * (prediction - y).square().mean((1, 2)).sum()).backward()  # each model's loss
        optimizer.step()
        for model, (layer, single) in enumerate(alone):
            single.zero_grad()
            noise = FixedNoise([eps[model]])
            squared_error(layer(x, mode="weights", noise=noise), y).backward()
            single.step()
    for model, (layer, _) in enumerate(alone):
        torch.testing.assert_close(stack.weight_mean[model], layer.weight_mean[0])
        torch.testing.assert_close(stack.bias_mean[model], layer.bias_mean[0])
        torch.testing.assert_close(stack.posterior_std()[0][model], layer.posterior_std()[0][0])


def test_point_parameters_take_adams_step() -> None:
    torch.manual_seed(0)
    net = vbnn.convert(nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 1)), "mf")
    optimizer = build(net, IVON(point_learning_rate=0.01), 8)
    norm = net[1].weight
    reference = torch.optim.Adam([nn.Parameter(norm.detach().clone())], lr=0.01)
    x = torch.randn(8, 3)
    for _ in range(3):
        optimizer.zero_grad()
        net(x).square().mean().backward()
        reference.param_groups[0]["params"][0].grad = norm.grad.clone()
        optimizer.step()
        reference.step()
    torch.testing.assert_close(norm.detach(), reference.param_groups[0]["params"][0].detach())


def test_what_ivon_refuses() -> None:
    x, y = torch.randn(8, 3), torch.zeros(8, dtype=torch.long)
    dropout = vbnn.convert(nn.Sequential(nn.Linear(3, 2)), "vd-weight")
    with pytest.raises(ValueError, match=r"layer '0' is .*not a mean-field Gaussian"):
        vbnn.train(dropout, (x, y), optimizer="ivon", epochs=1, progress=False)
    net = vbnn.convert(nn.Sequential(nn.Linear(3, 2)), "mf")
    with pytest.raises(ValueError, match=r"IVON: trains objective 'elbo', not 'map'"):
        vbnn.train(net, (x, y), optimizer="ivon", objective="map", epochs=1, progress=False)
    with pytest.raises(ValueError, match=r"kl_weight=0.5.*IVON\(ess=\.\.\.\)"):
        vbnn.train(net, (x, y), optimizer="ivon", epochs=1, progress=False,
                   config=vbnn.TrainerConfig(kl_weight=0.5))  # fmt: skip
    unknown = r"optimizer: unknown 'rmsprop'; choose one of 'adam', 'ivon', 'sgd'"
    with pytest.raises(ValueError, match=unknown):
        vbnn.train(net, (x, y), optimizer="rmsprop", epochs=1, progress=False)
    with pytest.raises(ValueError, match=r"IVON: beta2 must be in \[0, 1\), got 1.0"):
        IVON(beta2=1.0)
