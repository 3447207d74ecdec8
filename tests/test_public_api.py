"""vbnn.convert, vbnn.kl, vbnn.sample and vbnn.mode on a user's own modules."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import vbnn
import vbnn.regression
from vbnn.core.gaussian import kl_diagonal_gaussian
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.modes import network_output
from vbnn.layers.shell import VariationalLayer
from vbnn.networks import LeNet5, LeNetConfig

WITH_MEANS = [name for name, spec in vbnn.FAMILIES.items() if spec.name not in
              ("zero-mean", "bernoulli-variance", "uniform-variance")]  # fmt: skip


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, stride=2, padding=1, dilation=1),
        nn.ReLU(),
        nn.Conv2d(4, 3, 3, padding=2, dilation=2),
        nn.Flatten(),
        nn.Linear(3 * 4 * 4, 5),
    ).double()


@pytest.mark.parametrize("family", sorted(vbnn.FAMILIES))
def test_converted_network_in_eval_mode_is_the_original_network(family: str) -> None:
    """Means come from the original weights: the posterior-mean network is the network."""
    original = small_cnn()
    x = torch.randn(6, 1, 8, 8, dtype=torch.float64)
    if not vbnn.FAMILIES[family].convolution:
        with pytest.raises(ValueError, match=rf"nn\.Conv2d; family '{family}' is dense only"):
            vbnn.convert(original, family)
        return
    converted = vbnn.convert(original, family).eval()
    replaced = [m for m in converted.modules() if isinstance(m, VariationalLayer)]
    assert len(replaced) == 3 and all(type(m) is vbnn.FAMILIES[family].layer for m in replaced)
    kinds = [nn.Conv2d, nn.ReLU, nn.Conv2d, nn.Flatten, nn.Linear]
    assert [type(m) for m in original] == kinds  # the original is left as it was
    if family in WITH_MEANS:
        torch.testing.assert_close(converted(x), original(x))
    assert converted.train()(x).shape == (6, 5)


def test_convert_keeps_named_layers_and_names_bad_input() -> None:
    original = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    converted = vbnn.convert(original, "vd-layer", keep=["2"], log_alpha=-4.6)
    assert isinstance(converted[0], VariationalLayer) and type(converted[2]) is nn.Linear
    with pytest.raises(ValueError, match=r"keep=\['3'\] are not modules of Sequential"):
        vbnn.convert(original, "mf", keep=["3"])
    with pytest.raises(ValueError, match="unknown family 'gauss'; choose from mf, gd"):
        vbnn.convert(original, "gauss")
    grouped = nn.Sequential(nn.Conv2d(2, 2, 3, groups=2))
    with pytest.raises(ValueError, match=r"0 \(Conv2d\) has groups=2"):
        vbnn.convert(grouped, "mf")
    full = vbnn.convert(original, "fc").eval()  # dense full covariance
    x = torch.randn(4, 3)
    torch.testing.assert_close(full(x), original(x))


def test_kl_sums_every_layer_against_each_family_default_prior() -> None:
    """MF with N(0, 1): sum of the closed-form diagonal KLs; VD with log-uniform: its own KL;
    a kept deterministic layer adds nothing."""
    original = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2), nn.Linear(2, 1))
    mf = vbnn.convert(original, "mf", keep=["3"], init_std=0.2)
    expected = sum(
        kl_diagonal_gaussian(layer.weight_mean, layer.weight_std(), 1.0)
        + kl_diagonal_gaussian(layer.bias_mean, layer.bias_std(), 1.0)
        for layer in (mf[0], mf[2])
    )
    assert vbnn.kl(mf).shape == ()
    torch.testing.assert_close(vbnn.kl(mf), expected[0])
    torch.testing.assert_close(vbnn.kl(mf, vbnn.GaussianPrior(2.0)),
                               mf[0].kl(vbnn.GaussianPrior(2.0))[0]
                               + mf[2].kl(vbnn.GaussianPrior(2.0))[0])  # fmt: skip
    vd = vbnn.convert(original, "vd-weight")
    torch.testing.assert_close(
        vbnn.kl(vd), sum(vd[i].kl(vbnn.LogUniformPrior())[0] for i in (0, 2, 3))
    )
    with pytest.raises(ValueError, match="family 'vd-layer' takes no option \\['init_std'\\]"):
        vbnn.convert(original, "vd-layer", init_std=0.1)


def test_sample_moments_of_a_linear_model_match_the_exact_predictive() -> None:
    """One MF linear layer: f(x) = x w + b is Gaussian with mean x mu + mu_b and variance
    x^2 var_w + var_b; 4000 function samples match both within their standard errors."""
    torch.manual_seed(3)
    layer = vbnn.convert(nn.Linear(2, 1).double(), "mf", init_std=0.5)
    x = torch.randn(5, 2, dtype=torch.float64)
    samples = vbnn.sample(layer, x, 4000).squeeze(-1)  # (K, N)
    mean = (x @ layer.weight_mean[0] + layer.bias_mean[0]).squeeze(-1).detach()
    variance = (x**2 @ layer.weight_std()[0] ** 2 + layer.bias_std()[0] ** 2).squeeze(-1).detach()
    z = (samples.mean(0) - mean) / (variance / 4000).sqrt()
    assert z.abs().max() < 4
    relative = samples.var(0) / variance - 1  # standard error of a variance: sqrt(2 / (K - 1))
    assert relative.abs().max() < 4 * math.sqrt(2 / 3999)


@pytest.mark.parametrize("mode", ["weights", "zero-mean"])
@pytest.mark.parametrize("source", ["global", "use_noise", "explicit"])
def test_sample_keeps_one_function_per_sample_across_chunks(source: str, mode: str) -> None:
    """A pass in "weights" (or "zero-mean") mode draws one weight sample, so sample k is one
    function f_k: the K samples are K passes in a row from the layers' noise source, and cut
    into chunks they are the same numbers, whichever source the layers draw from (torch's
    global RNG, the ``use_noise`` source or an explicit ``noise``)."""
    original = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
    model = vbnn.convert(original, "mf", init_std=0.3)
    x = torch.randn(9, 2)

    def draws(draw):
        torch.manual_seed(5)
        streams = ModelGenerators([7])
        if source == "explicit":
            return draw(streams)
        with vbnn.use_noise(model, streams if source == "use_noise" else None):
            return draw(None)

    whole = draws(lambda noise: vbnn.sample(model, x, 3, mode, noise=noise))
    chunked = draws(lambda noise: vbnn.sample(model, x, 3, mode, batch_size=4, noise=noise))
    passes = draws(lambda noise: [network_output(model, x, mode, noise) for _ in range(3)])
    assert torch.equal(whole, torch.stack(passes))
    assert torch.equal(chunked, whole)
    assert not torch.equal(whole[0], whole[1])
    with vbnn.mode(model, "mean"):
        torch.testing.assert_close(model(x), model.eval()(x))
    with pytest.raises(
        ValueError, match="mode 'mean' draws nothing; choose 'weights', 'zero-mean' or 'local'"
    ):
        vbnn.sample(model, x, 2, mode="mean")


def test_phase_transition_tracking_and_plot_work_for_a_converted_model(tmp_path) -> None:
    from vbnn.classification.training import (
        ClassifierConfig,
        PhaseTransitionTracker,
        plot_phase_transition,
        train_classifier,
    )

    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(1, 3, 5), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 24 * 24, 10))
    model = vbnn.convert(cnn, "vd-layer", keep=["0"])
    images, labels = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
    tracker = PhaseTransitionTracker(images[:16], labels[:16], samples=2)
    config = ClassifierConfig(epochs=2, batch_size=32)
    train_classifier(
        model, vbnn.LogUniformPrior(), images, labels, config, callback=tracker, progress=False
    )
    frame = tracker.frame()
    assert list(frame["epoch"]) == [1, 2]
    expected = float(model[3].mean_log_alpha().flatten()[0])
    assert frame["log_alpha_3"].iloc[-1] == pytest.approx(expected)
    assert {"deterministic", "sample", "ensemble", "zero-mean"} <= set(frame.columns)
    plot_phase_transition(frame, tmp_path / "phase.png")
    assert (tmp_path / "phase.png").stat().st_size > 0


def test_unknown_method_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown method 'bbb'; choose from es, map, sgld, mf"):
        vbnn.regression.method_config("bbb")


def test_the_top_level_has_one_name_per_concept() -> None:
    """The UCI engine's and the papers' names live in their subpackages; no concept has two
    names at the top level."""
    assert set(vbnn.__all__) <= set(dir(vbnn))
    for moved in ("Method", "TrainConfig", "LeNet5", "LeNetConfig", "kl_divergence", "use_mode"):
        assert not hasattr(vbnn, moved), moved
    assert vbnn.regression.method_config("mf").method == "mf"
    assert isinstance(LeNet5(LeNetConfig()), nn.Module)
    assert vbnn.kl is vbnn.training.objectives.kl
    assert vbnn.train_loop is vbnn.training.loop.train_loop
    assert not hasattr(vbnn.training.loop, "run")
    assert vbnn.NoiseSource is vbnn.core.randomness.NoiseSource
    objects = [getattr(vbnn, name) for name in vbnn.__all__ if name != "__version__"]
    assert len({id(value) for value in objects}) == len(objects)  # no object under two names
