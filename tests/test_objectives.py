"""The objective and loop contract: likelihoods, the minibatch ELBO, the loop, Langevin steps."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import vbnn
from vbnn.classification.training import ClassifierConfig, evaluate_elbo, train_classifier
from vbnn.core.contracts import ParameterRole
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.modes import network_output, variational_layers
from vbnn.networks.lenet import LeNet5, LeNetConfig
from vbnn.networks.mlp import MLP
from vbnn.priors import ARDPrior, LogUniformPrior
from vbnn.priors.gaussian import GaussianPrior
from vbnn.training.likelihoods import (
    BernoulliLikelihood,
    CategoricalLikelihood,
    GaussianLikelihood,
)
from vbnn.training.loop import LangevinDynamics, NonFiniteLossError, train_loop
from vbnn.training.objectives import elbo, kl, log_joint, log_prior
from vbnn.training.optimizer import learning_rate_groups, parameters_with_role


def test_gaussian_likelihood_is_the_normal_density_for_one_network_and_a_stack() -> None:
    prediction, target = torch.randn(2, 7, 1), torch.randn(2, 7)
    stacked = GaussianLikelihood(2, initial_std=0.7)
    expected = torch.distributions.Normal(prediction.squeeze(-1), 0.7).log_prob(target)
    torch.testing.assert_close(stacked.log_prob(prediction, target), expected)
    single = GaussianLikelihood(fixed_std=0.7)
    torch.testing.assert_close(single.log_prob(prediction[0], target[0]), expected[0])
    with pytest.raises(ValueError, match=r"prediction \(2, 7\) must be the target \(2, 7\)"):
        stacked.log_prob(prediction.squeeze(-1), target)


def test_categorical_and_bernoulli_likelihoods_match_torch_distributions() -> None:
    logits, labels = torch.randn(3, 5, 4), torch.randint(0, 4, (5,))
    expected = torch.distributions.Categorical(logits=logits).log_prob(labels.expand(3, 5))
    torch.testing.assert_close(CategoricalLikelihood().log_prob(logits, labels), expected)
    torch.testing.assert_close(CategoricalLikelihood().log_prob(logits, labels.float()), expected)
    with pytest.raises(ValueError, match=r"label 0.5 at target\[0\] is not an integer"):
        CategoricalLikelihood().log_prob(logits, torch.full((5,), 0.5))
    binary_logits, binary = torch.randn(3, 5, 1), torch.randint(0, 2, (5,)).float()
    expected = torch.distributions.Bernoulli(logits=binary_logits.squeeze(-1)).log_prob(binary)
    torch.testing.assert_close(BernoulliLikelihood().log_prob(binary_logits, binary), expected)


def _linear_regression(seed: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    layer = vbnn.MeanField(3, 1, init_std=0.3, dtype=torch.float64)
    with torch.no_grad():
        layer.weight_mean.normal_()
        layer.bias_mean.fill_(0.2)
    x = torch.randn(12, 3, dtype=torch.float64)
    return layer, x, x @ torch.tensor([1.0, -0.5, 0.3], dtype=torch.float64) + 0.1


def _closed_form_data_term(layer: nn.Module, x: torch.Tensor, y: torch.Tensor, std: float):
    """E_q[sum_n log N(y_n | x_n w + b, s^2)] for factorised Gaussian (w, b): per example
    log N(y | x mu + mu_b, s^2) - (x^2 var_w + var_b) / (2 s^2)."""
    mean = (x @ layer.weight_mean[0] + layer.bias_mean[0]).squeeze(-1)
    variance = (x**2 @ layer.weight_std()[0] ** 2 + layer.bias_std()[0] ** 2).squeeze(-1)
    log_density = torch.distributions.Normal(mean, std).log_prob(y)
    return (log_density - variance / (2 * std**2)).sum()


def test_minibatch_elbo_is_unbiased_for_the_full_batch_elbo_of_a_linear_model() -> None:
    """Bayesian linear regression with a MF layer: E[ELBO of a batch scaled by N / B] equals
    the closed-form full ELBO; averaged over the four batches of a partition and 4000 draws."""
    layer, x, y = _linear_regression(0)
    likelihood, prior = GaussianLikelihood(fixed_std=0.5, dtype=torch.float64), vbnn.GaussianPrior()
    noise = ModelGenerators([3])
    with torch.no_grad():
        exact = _closed_form_data_term(layer, x, y, 0.5) - layer.kl(prior)[0]
        draws = torch.stack(
            [
                torch.stack(
                    [
                        elbo(layer, likelihood, prior, x[i::4], y[i::4], noise, dataset_size=12)[
                            "objective"
                        ]
                        for i in range(4)
                    ]
                ).mean()
                for _ in range(4000)
            ]
        )
    standard_error = draws.std() / math.sqrt(len(draws))
    assert abs(float(draws.mean() - exact)) < 4 * float(standard_error)


def test_elbo_runs_on_a_user_sequential_and_sums_every_layer_kl() -> None:
    torch.manual_seed(1)
    net = nn.Sequential(vbnn.MeanField(2, 5), nn.Tanh(), vbnn.LayerDropout(5, 1))
    prior = vbnn.GaussianPrior(1.0)
    expected_kl = (net[0].kl(prior) + net[2].kl(prior))[0]  # one network: a scalar
    torch.testing.assert_close(kl(net, prior), expected_kl)
    x, y = torch.randn(6, 2), torch.randn(6)
    terms = elbo(net, GaussianLikelihood(), prior, x, y, kl_weight=0.5)
    torch.testing.assert_close(terms["objective"], terms["log-likelihood"] - 0.5 * expected_kl)
    net.train()  # the mode comes from the objective, not from train/eval
    torch.testing.assert_close(network_output(net, x, "mean"), net.eval()(x))
    first = network_output(net, x, "weights", ModelGenerators([0]))  # seeded streams
    torch.testing.assert_close(network_output(net, x, "weights", ModelGenerators([0])), first)
    assert not torch.equal(network_output(net, x, "weights", ModelGenerators([1])), first)
    assert all(layer.shared_noise is None for layer in (net[0], net[2]))  # restored


def test_the_loop_names_the_iteration_of_a_non_finite_objective() -> None:
    weight = nn.Parameter(torch.ones(1))

    def objective(iteration: int) -> dict[str, torch.Tensor]:
        value = weight.sum() * (float("nan") if iteration == 3 else 1.0)
        return {"objective": value.reshape(1)}

    calls = []
    with pytest.raises(NonFiniteLossError, match="iteration 3 in model 0"):
        train_loop(
            objective,
            torch.optim.SGD([weight], 0.1),
            5,
            callbacks=[lambda i, t: calls.append(i)],
            describe=lambda i, t: "in model 0",
        )
    assert calls == [1, 2]


def test_langevin_step_is_the_sgld_update_with_the_streams_noise() -> None:
    """theta' = theta - eps / 2 grad(loss) + sqrt(eps) eta, eta from the model's own stream."""
    theta = nn.Parameter(torch.tensor([[1.0, -2.0]], dtype=torch.float64))
    optimizer = LangevinDynamics([theta], lambda t: 0.01 / t, ModelGenerators([5]))
    loss = (theta**2).sum() / 2  # grad = theta
    loss.backward()
    start = theta.detach().clone()
    optimizer.step()
    eta = ModelGenerators([5]).randn(2, dtype=torch.float64)
    torch.testing.assert_close(theta.detach(), start - 0.005 * start + 0.1 * eta)


def test_one_lenet_trains_exactly_as_the_m1_stack_with_the_same_weights() -> None:
    torch.manual_seed(2)
    images, labels = torch.randn(96, 1, 28, 28), torch.randint(0, 10, (96,))
    config = LeNetConfig(families=("vd-neuron", "vd-layer", "vd-weight", "zero-mean"))
    stack = LeNet5(config, ModelGenerators([4]))
    single = LeNet5(config)
    single.load_state_dict(stack.state_dict())
    assert single(images[:3]).shape == (3, 10) and stack(images[:3].unsqueeze(0)).shape == (
        1,
        3,
        10,
    )
    settings = ClassifierConfig(epochs=1, batch_size=32, seed=1)
    train_classifier(stack, LogUniformPrior(), images, labels, settings, progress=False)
    train_classifier(single, LogUniformPrior(), images, labels, settings, progress=False)
    for (name, a), b in zip(stack.state_dict().items(), single.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize(
    ("family", "models", "chunk"), [("mf", None, 1000), ("mf", 2, 1000), ("point", None, 7)]
)
def test_evaluated_elbo_is_the_elbo_of_the_whole_set(
    family: str, models: int | None, chunk: int
) -> None:
    """In one chunk, ``vbnn.elbo`` with the same stream (model 0 of a stack); in chunks of 7 rows
    of a network whose LOCAL pass draws no noise, the whole set's log-likelihood."""
    generators = None if models is None else ModelGenerators(list(range(models)))
    model = MLP(family, [4, 6, 3], "relu", generators, dtype=torch.float64)
    images = torch.randn(40, 4, dtype=torch.float64)
    labels = torch.randint(0, 3, (40,))
    prior = GaussianPrior(0.5)
    got = evaluate_elbo(model, prior, images, labels, seed=3, chunk=chunk)
    noise = ModelGenerators.for_keys(3, range(models or 1), "eval")
    inputs = images if models is None else images.expand(models, -1, -1)
    with torch.no_grad():
        terms = elbo(model, CategoricalLikelihood(), prior, inputs, labels, noise)
    want = {"ELBO": "objective", "data_term": "log-likelihood", "KL": "KL"}
    for name, term in want.items():
        assert got[name] == pytest.approx(float(terms[term].flatten()[0]), rel=1e-12, abs=1e-12)
    assert (got["KL"] > 0) == (family == "mf")


def test_log_prior_under_the_log_uniform_prior_is_minus_the_log_of_the_means() -> None:
    """-sum log|w| over the means (the improper density without its constant), also as the
    default prior of variational dropout; +inf at a zero bias; ARD has no density."""
    torch.manual_seed(0)
    model = vbnn.convert(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)), "vd-layer")
    means = [t for layer in variational_layers(model) for t in layer.means()]
    expected = -sum(t.abs().log().sum() for t in means)
    torch.testing.assert_close(log_prior(model, LogUniformPrior()), expected)
    torch.testing.assert_close(log_prior(model), expected)
    with torch.no_grad():
        model[0].bias.zero_()
    assert log_prior(model, LogUniformPrior()).item() == math.inf
    with pytest.raises(TypeError, match="no fixed density"):
        log_prior(model, ARDPrior())


@pytest.mark.parametrize("objective", ["elbo", "log_joint"])
@pytest.mark.parametrize(
    ("dataset_size", "message"),
    [
        (0, r"elbo: dataset_size must be a positive integer .* got 0"),
        (-3, r"dataset_size must be a positive integer .* got -3"),
        (2.5, r"dataset_size must be a positive integer .* got 2.5"),
        (True, r"dataset_size must be a positive integer .* got True"),
        (2, r"dataset_size=2 is below the batch size 3"),
    ],
)
def test_a_dataset_size_that_is_not_a_count_above_the_batch_is_refused_before_the_forward(
    objective: str, dataset_size: object, message: str
) -> None:
    """The inputs hold a NaN, which the forward pass would name: the dataset_size error comes
    first, so nothing ran on the batch. A numpy integer N >= B is accepted and scales by N / B."""
    layer, x, y = _linear_regression(0)
    likelihood, prior = GaussianLikelihood(fixed_std=0.5, dtype=torch.float64), vbnn.GaussianPrior()
    x_bad = x[:3].clone()
    x_bad[1, 2] = float("nan")
    call = {
        "elbo": lambda xs, n: elbo(layer, likelihood, prior, xs, y[:3], dataset_size=n),
        "log_joint": lambda xs, n: log_joint(layer, likelihood, prior, xs, y[:3], dataset_size=n),
    }[objective]
    with pytest.raises(ValueError, match=message.replace("elbo", objective)):
        call(x_bad, dataset_size)
    with pytest.raises(ValueError, match=r"x\[1, 2\] is nan"):
        call(x_bad, np.int64(12))  # a valid N reaches the forward pass, which names the NaN
    whole = log_joint(layer, likelihood, prior, x[:3], y[:3])
    scaled = log_joint(layer, likelihood, prior, x[:3], y[:3], dataset_size=np.int64(12))
    torch.testing.assert_close(scaled["log-likelihood"], 4 * whole["log-likelihood"])


def test_map_of_a_converted_linear_layer_is_ridge_regression() -> None:
    """Under the prior N(0, p^2) on (w, b) and fixed Gaussian noise s, the MAP estimate of a linear
    model is ridge regression: theta = (X1^T X1 + (s / p)^2 I)^-1 X1^T y, X1 = [X, 1]."""
    torch.manual_seed(0)
    x = torch.randn(40, 3, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + 0.3 + torch.randn(40).double()
    noise_std, prior_std = 0.8, 0.5
    model = vbnn.convert(nn.Linear(3, 1).double(), "point")
    likelihood, prior = (
        GaussianLikelihood(fixed_std=noise_std, dtype=torch.float64),
        GaussianPrior(prior_std),
    )
    optimizer = torch.optim.LBFGS(
        model.parameters(), max_iter=200, tolerance_grad=1e-12, tolerance_change=1e-14,
        line_search_fn="strong_wolfe",
    )  # fmt: skip

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = -log_joint(model, likelihood, prior, x, y)["objective"]
        loss.backward()
        return loss

    optimizer.step(closure)
    design = torch.cat([x, torch.ones(40, 1, dtype=torch.float64)], dim=1)
    ridge = (noise_std / prior_std) ** 2 * torch.eye(4, dtype=torch.float64)
    exact = torch.linalg.solve(design.T @ design + ridge, design.T @ y)
    weight, bias = model.posterior_mean()
    fitted = torch.cat([weight[0, :, 0], bias[0]])
    torch.testing.assert_close(fitted, exact, atol=1e-8, rtol=0)


def test_log_joint_of_a_non_point_family_is_that_of_its_mean_network() -> None:
    torch.manual_seed(2)
    base = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    mean_field, point = vbnn.convert(base, "mf"), vbnn.convert(base, "point")
    x, y, prior = torch.randn(5, 3), torch.randn(5), GaussianPrior(0.7)
    terms = log_joint(mean_field, GaussianLikelihood(), prior, x, y)
    torch.testing.assert_close(terms, log_joint(point, GaussianLikelihood(), prior, x, y))


@pytest.mark.parametrize("family", ["point", "dropout"])
def test_kl_of_a_model_without_a_kl_term_is_zero(family: str) -> None:
    one = vbnn.convert(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double(), family)
    kl = vbnn.kl(one)
    assert kl.shape == () and kl.dtype == torch.float64 and kl.device.type == "cpu"
    assert float(kl) == 0.0
    stack = vbnn.MLP(family, (3, 4, 2), "relu", ModelGenerators([1, 2]))
    torch.testing.assert_close(vbnn.kl(stack), torch.zeros(2), atol=0, rtol=0)
    x, y = torch.randn(6, 3, dtype=torch.float64), torch.randint(0, 2, (6,))
    terms = elbo(one, CategoricalLikelihood(), None, x, y, ModelGenerators([0]))
    torch.testing.assert_close(terms["objective"], terms["log-likelihood"])


def _networks() -> dict[str, nn.Module]:
    torch.manual_seed(3)
    sequential = vbnn.convert(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)), "mf")
    mlp = vbnn.MLP("vd-neuron", (3, 4, 2), "tanh", ModelGenerators([1, 2]))
    lenet = LeNet5(LeNetConfig(families=("point", "zero-mean", "mf", "vd-layer")))
    return {"sequential": sequential, "mlp": mlp, "lenet": lenet}


@pytest.mark.parametrize("name", ["sequential", "mlp", "lenet"])
def test_kl_log_prior_and_elbo_of_any_network_are_sums_over_its_layers(name: str) -> None:
    model = _networks()[name]
    layers = variational_layers(model)
    prior = GaussianPrior(0.9)
    squeeze = (lambda t: t[0]) if name != "mlp" else (lambda t: t)
    expected_kl = sum(layer.kl(layer.default_prior) for layer in layers if layer.has_kl)
    torch.testing.assert_close(vbnn.kl(model), squeeze(expected_kl))
    expected_prior = sum(
        prior.log_prob(layer.means()[0]) + prior.log_prob(layer.means()[1]) for layer in layers
    )
    torch.testing.assert_close(log_prior(model, prior), squeeze(expected_prior))
    x = torch.randn(5, 1, 28, 28) if name == "lenet" else torch.randn(5, 3)
    x = x.expand(2, *x.shape) if name == "mlp" else x
    y = torch.randint(0, 2, (5,))
    noise = ModelGenerators([0, 1] if name == "mlp" else [0])
    terms = elbo(model, CategoricalLikelihood(), None, x, y, noise, dataset_size=50)
    torch.testing.assert_close(terms["KL"], squeeze(expected_kl))
    torch.testing.assert_close(terms["objective"], terms["log-likelihood"] - terms["KL"])


def test_learning_rate_groups_follow_the_roles_the_families_declare() -> None:
    base = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    full = vbnn.convert(base, "fc")
    rates = {ParameterRole.CORRELATION: 1e-5, ParameterRole.LOG_ALPHA: 1.0}
    groups = learning_rate_groups(full, 1e-3, rates)
    assert [group["lr"] for group in groups] == [1e-3, 1e-5]
    assert [id(p) for p in groups[1]["params"]] == [
        id(full[0].scale_lower),
        id(full[2].scale_lower),
    ]
    assert len(groups[0]["params"]) == len(list(full.parameters())) - 2
    dropout = vbnn.convert(base, "vd-layer")
    groups = learning_rate_groups(dropout, 1e-3, rates)
    assert [id(p) for p in groups[1]["params"]] == [
        id(dropout[0].log_alpha),
        id(dropout[2].log_alpha),
    ]
    assert len(learning_rate_groups(dropout, 1e-3, {ParameterRole.LOG_ALPHA: None})) == 1
    groups = learning_rate_groups(dropout, 1e-3, {ParameterRole.MEAN: 1e-2})
    log_alphas = [id(dropout[0].log_alpha), id(dropout[2].log_alpha)]
    means = [id(p) for p in dropout.parameters() if id(p) not in log_alphas]
    assert {id(dropout[0].weight_mean), id(dropout[0].bias)} <= set(means)
    assert [id(p) for p in groups[1]["params"]] == means
    assert [id(p) for p in parameters_with_role(dropout, "mean")] == means
    assert [id(p) for p in groups[0]["params"]] == log_alphas
