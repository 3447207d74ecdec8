"""``vbnn.diagnose``: pruned units and the variance-network state flagged where they hold, and
only there, on constructed posteriors whose answer is known and on trained networks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import vbnn
from vbnn.diagnostics.layers import diagnose_layers
from vbnn.diagnostics.report import diagnose, layer_kappa


def set_mean_field(layer, mean: torch.Tensor, std: torch.Tensor) -> None:
    """Weight means and stds of a dense ``mf`` layer from (O, I) tensors; bias likewise."""
    with torch.no_grad():
        layer.weight_mean.copy_(mean.t().unsqueeze(0))
        layer.weight_log_std.copy_(std.t().log().unsqueeze(0))
        layer.bias_mean.zero_()
        layer.bias_log_std.copy_(std[:, 0].log().unsqueeze(0))


def half_pruned_network(pruned: int, width: int = 10) -> nn.Module:
    """3 -> width -> 1 mf network whose first ``pruned`` hidden units sit at the N(0, 1) prior
    with silent outgoing weights; the others carry large, certain weights."""
    torch.manual_seed(0)
    net = vbnn.convert(nn.Sequential(nn.Linear(3, width), nn.Tanh(), nn.Linear(width, 1)), "mf")
    first_mean, first_std = torch.full((width, 3), 2.0), torch.full((width, 3), 0.01)
    first_mean[:pruned], first_std[:pruned] = 0.0, 1.0
    second_mean, second_std = torch.full((1, width), 1.5), torch.full((1, width), 0.01)
    second_mean[:, :pruned], second_std[:, :pruned] = 0.0, 1.0
    set_mean_field(net[0], first_mean, first_std)
    set_mean_field(net[2], second_mean, second_std)
    return net


@pytest.mark.parametrize("pruned", [0, 1, 4, 7])
def test_the_pruned_units_of_a_constructed_posterior_are_counted(pruned: int) -> None:
    layers = diagnose_layers(half_pruned_network(pruned))
    assert [layer.units_at_prior for layer in layers] == [pruned, 0]
    assert layers[0].pruned == pruned and layers[1].pruned is None  # the output has no next
    assert layers[0].snr_quantiles[2] == pytest.approx(200.0)  # |2| / 0.01 of the kept units
    if pruned >= 4:  # above a tenth of the weights at SNR 0
        assert layers[0].snr_quantiles[0] == 0.0


def test_overpruning_is_flagged_from_a_fifth_of_the_units() -> None:
    x, y = torch.randn(64, 3), torch.randn(64)
    assert diagnose(half_pruned_network(4), x, y).flags["over-pruning"]
    report = diagnose(half_pruned_network(1), x, y)
    assert not report.flags["over-pruning"]
    assert "no over-pruning" in str(report)


def test_a_unit_whose_outgoing_weights_carry_signal_is_not_pruned() -> None:
    net = half_pruned_network(4)
    with torch.no_grad():  # unit 0 sits at the prior, but its outgoing weight is certain
        net[2].weight_mean[0, 0, 0] = 1.0
        net[2].weight_log_std[0, 0, 0] = math.log(0.01)
    layers = diagnose_layers(net)
    assert layers[0].units_at_prior == 4 and layers[0].pruned == 3


def test_convolution_channels_flattened_into_a_dense_layer_are_units() -> None:
    torch.manual_seed(0)
    net = vbnn.convert(
        nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 2)), "mf"
    )
    with torch.no_grad():  # channel 1: incoming at the prior, its 16 flattened outputs silent
        conv, dense = net[0], net[3]
        conv.weight_mean[0, 1] = 0.0
        conv.weight_log_std[0, 1] = 0.0
        conv.bias_mean[0, 1] = 0.0
        conv.bias_log_std[0, 1] = 0.0
        dense.weight_mean[0, 16:32] = 0.0
        dense.weight_log_std[0, 16:32] = 0.0
    layers = diagnose_layers(net)
    assert layers[0].kind == "conv" and layers[0].units == 4
    assert layers[0].units_at_prior == 1 and layers[0].pruned == 1


def test_a_trained_wide_mean_field_network_prunes_and_a_point_network_does_not() -> None:
    """MF on a 1-D function with 50 tanh units under an N(0, 1) prior switches most units off
    (Trippe & Turner 2017); the same network at point weights has no units at the prior."""
    generator = torch.Generator().manual_seed(0)
    x = torch.linspace(-3, 3, 200).unsqueeze(1)
    y = torch.sin(x[:, 0]) + 0.1 * torch.randn(200, generator=generator)
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(1, 50), nn.Tanh(), nn.Linear(50, 1))
    net = vbnn.convert(base, "mf", init_std=1e-2)
    likelihood = vbnn.GaussianLikelihood()
    optimizer = torch.optim.Adam([*net.parameters(), *likelihood.parameters()], lr=0.02)
    for _ in range(1500):
        terms = vbnn.elbo(net, likelihood, vbnn.GaussianPrior(1.0), x, y)
        optimizer.zero_grad()
        (-terms["objective"] / 200).backward()
        optimizer.step()
    report = diagnose(net, x, y, noise_std=float(likelihood.std().detach()))
    assert report.flags["over-pruning"], str(report)
    assert report.predictive["RMSE"]["ensemble"] < 0.5 * report.predictive["RMSE"]["trivial"]
    assert not report.flags["variance network"]
    assert 0.8 < report.calibration["coverage_95"] <= 1.0
    point = diagnose_layers(vbnn.convert(base, "point"))
    assert point[0].units_at_prior is None and point[0].snr_quantiles[1] == math.inf


def test_a_trained_narrow_mean_field_network_that_needs_every_unit_is_not_flagged() -> None:
    """Four tanh units on sin(x) with noise std 0.05: the likelihood of 200 points pins every
    weight (SNR far above 1), no unit sits at the prior, and ``report.flags`` stays False."""
    generator = torch.Generator().manual_seed(0)
    x = torch.linspace(-3, 3, 200).unsqueeze(1)
    y = torch.sin(x[:, 0]) + 0.05 * torch.randn(200, generator=generator)
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(1, 4), nn.Tanh(), nn.Linear(4, 1))
    net = vbnn.convert(base, "mf", init_std=1e-2)
    likelihood = vbnn.GaussianLikelihood()
    optimizer = torch.optim.Adam([*net.parameters(), *likelihood.parameters()], lr=0.02)
    for _ in range(250):
        terms = vbnn.elbo(net, likelihood, vbnn.GaussianPrior(1.0), x, y)
        optimizer.zero_grad()
        (-terms["objective"] / 200).backward()
        optimizer.step()
    report = diagnose(net, x, y, noise_std=float(likelihood.std().detach()))
    assert report.predictive["RMSE"]["ensemble"] < 0.2 * report.predictive["RMSE"]["trivial"]
    hidden = report.layers[0]
    assert hidden.units == 4 and hidden.units_at_prior == 0 and hidden.pruned == 0
    assert hidden.snr_quantiles[0] > 10.0  # every weight is far from the prior's SNR of 0
    assert report.flags == {"over-pruning": False, "variance network": False}, str(report)
    assert "* no over-pruning: no layer has 20% of its units pruned" in str(report)


def variance_bottleneck(std: float) -> nn.Module:
    """Class 1 when |x| > 1: a zero-mean layer N(0, std^2) whose output magnitude grows with |x|,
    then |.| and a deterministic read-out. Mean propagation outputs the same for every x."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(1, 16, bias=False), Abs(), nn.Linear(16, 2))
    with torch.no_grad():
        # logit_1 - logit_0 = 10 (sum_j |w_j| |x| - E sum_j |w_j|): class 1 about where |x| > 1
        net[2].weight.copy_(torch.stack([torch.full((16,), -5.0), torch.full((16,), 5.0)]))
        net[2].bias.copy_(torch.tensor([0.0, -10 * 16 * std * math.sqrt(2 / math.pi)]))
    return vbnn.convert(net, "zero-mean", keep=["2"], init_std=std)


class Abs(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.abs()


def test_a_network_whose_information_sits_in_the_variances_is_flagged() -> None:
    generator = torch.Generator().manual_seed(1)
    x = 3 * torch.rand(400, 1, generator=generator) - 1.5
    y = (x[:, 0].abs() > 1).long()
    report = diagnose(variance_bottleneck(2.0), x, y, samples=64)
    accuracy = report.predictive["accuracy"]
    assert accuracy["ensemble"] > 0.85 and accuracy["ensemble"] > accuracy["trivial"] + 0.15
    assert accuracy["mean"] == pytest.approx(accuracy["trivial"])
    assert report.flags["variance network"] and "variance network:" in str(report)


def test_a_network_that_predicts_with_its_means_is_not_a_variance_network() -> None:
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(300, 2, generator=generator)
    y = (x[:, 0] > 0).long()
    torch.manual_seed(0)
    net = vbnn.convert(nn.Sequential(nn.Linear(2, 2)), "mf", init_std=0.05)
    with torch.no_grad():
        net[0].weight_mean.copy_(torch.tensor([[[-4.0, 4.0], [0.0, 0.0]]]))
    report = diagnose(net, x, y)
    assert report.predictive["accuracy"]["mean"] > 0.95
    assert not report.flags["variance network"] and "not a variance network" in str(report)
    assert 0 <= report.calibration["ECE"] < 0.1


def test_the_report_renders_as_text_markdown_dict_and_figure(tmp_path) -> None:
    x, y = torch.randn(32, 3), torch.randn(32)
    report = diagnose(half_pruned_network(4), x, y, samples=4)
    assert "| 0 | mf | dense | 10 |" in report.to_markdown()
    assert report.to_dict()["layers"][0]["pruned"] == 4
    report.plot(tmp_path / "diagnosis.png")
    assert (tmp_path / "diagnosis.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"samples": 1}, "samples must be >= 2"),
        ({"task": "ranking"}, "task must be 'classification' or 'regression'"),
    ],
)
def test_bad_arguments_are_named(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        diagnose(half_pruned_network(1), torch.randn(8, 3), torch.randn(8), **kwargs)


def test_mismatched_rows_and_models_without_family_layers_are_refused() -> None:
    with pytest.raises(ValueError, match="x has 8 rows and y 7"):
        diagnose(half_pruned_network(1), torch.randn(8, 3), torch.randn(7))
    with pytest.raises(ValueError, match="holds no vbnn family layer"):
        diagnose_layers(nn.Linear(3, 1))
    with pytest.raises(TypeError, match=r"nn\.Module, a BayesianRegressor .* got dict"):
        diagnose({}, torch.randn(8, 3), torch.randn(8))


def test_a_fitted_regressor_is_diagnosed_in_its_own_units() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, size=(200, 1))
    y = np.sin(x[:, 0]) + 0.1 * rng.standard_normal(200)
    model = vbnn.BayesianRegressor(  # tanh: the over-pruning setting of Trippe & Turner 2017
        hidden=(50,),
        activation="tanh",
        iterations=1500,
        learning_rate=0.02,
        posterior_std=1e-2,
        seed=0,
    ).fit(x, y)
    report = vbnn.diagnose(model, x, y)
    assert report.task == "regression" and report.layers[0].units == 50
    assert report.flags["over-pruning"], str(report)
    # standardised units: the RMSE of the trivial predictor is the standardised std, 1
    assert report.predictive["RMSE"]["trivial"] == pytest.approx(1.0)
    assert 0.8 < report.calibration["coverage_95"] <= 1.0


def test_a_fitted_classifier_is_diagnosed_with_its_labels() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((200, 2))
    y = np.where(x[:, 0] > 0, "right", "left")
    model = vbnn.BayesianClassifier(hidden=(8,), epochs=20, seed=0).fit(x, y)
    report = vbnn.diagnose(model, x, y)
    assert report.task == "classification"
    assert report.predictive["accuracy"]["ensemble"] > 0.9
    assert not report.flags["variance network"]
    with pytest.raises(ValueError, match="y holds labels outside"):
        vbnn.diagnose(model, x[:2], np.array(["left", "up"]))


def test_kappa_of_any_dense_layer_equals_a_brute_force_hessian() -> None:
    """kappa_ij = sigma_ij^2 |d^2 / dW_ij^2 sum_n log p(y_n | x_n)| (Neklyudov et al. 2018 eq. 16),
    read through a hook on a converted model, against the autograd Hessian of the written-out
    network."""
    torch.manual_seed(0)
    net = vbnn.convert(nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)), "vd-weight")
    x, y = torch.randn(20, 4), torch.randint(0, 3, (20,))
    kappa = layer_kappa(net.eval(), net[0], x, y)
    first_mean, first_bias = (t.detach()[0] for t in net[0].posterior_mean())
    second_mean, second_bias = (t.detach()[0] for t in net[2].posterior_mean())

    def log_likelihood(weight: torch.Tensor) -> torch.Tensor:
        logits = torch.tanh(x @ weight + first_bias) @ second_mean + second_bias
        return torch.log_softmax(logits, -1)[torch.arange(20), y].sum()

    hessian = torch.autograd.functional.hessian(log_likelihood, first_mean)  # (I, O, I, O)
    diagonal = torch.einsum("ijij->ij", hessian)
    expected = net[0].weight_moments()[1].detach()[0] * diagonal.abs()
    torch.testing.assert_close(kappa, expected, rtol=1e-4, atol=1e-7)


def test_a_dropout_classifier_reports_its_kappa_count() -> None:
    x = torch.randn(100, 4)
    y = (x[:, 0] > 0).long()
    net = vbnn.convert(nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2)), "vd-layer")
    report = diagnose(net, x, y, samples=4)
    assert set(report.kappa_above) == {"0", "2"}
    assert all(0 <= count <= 24 for count in report.kappa_above.values())
    assert "log10 kappa > 1.5 for" in str(report)


def test_a_fitted_regressor_of_several_inputs_is_sampled_per_example() -> None:
    """The ensemble of a stack of one is K weight draws of the whole network on all N rows: its
    RMSE is that of the mean of K forward passes drawn from the same seeded stream."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(30, 3))
    y = x @ np.array([1.0, -0.5, 0.2])
    model = vbnn.BayesianRegressor(hidden=(5,), iterations=30, seed=0).fit(x, y)
    report = vbnn.diagnose(model, x, y, samples=6, seed=3)
    inputs = torch.as_tensor((x - model.x_mean_) / model.x_scale_).unsqueeze(0)
    noise = vbnn.ModelGenerators([3])
    with torch.no_grad():
        draws = torch.stack([model.model_(inputs, "weights", noise)[0, :, 0] for _ in range(6)])
    target = torch.as_tensor((y - model.y_mean_) / model.y_scale_)
    expected = float(((draws.mean(0) - target) ** 2).mean().sqrt())
    assert report.predictive["RMSE"]["ensemble"] == pytest.approx(expected, rel=1e-12)
    assert report.examples == 30
