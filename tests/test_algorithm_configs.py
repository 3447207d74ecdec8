"""Each algorithm's config answers what differs between algorithms (objective, prior, predictive,
early stopping, rates, layer options, search space), and each family's spec answers its own
(search space, covariance cost, stated defaults); the answers are checked against the maths and
the layers they describe."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

from vbnn.core.contracts import ParameterRole
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.registry import FAMILIES
from vbnn.regression.full_batch import parameter_groups
from vbnn.regression.methods import method_config, method_names
from vbnn.regression.presets import preset
from vbnn.regression.runs import (
    CONFIGS,
    ESConfig,
    MAPConfig,
    ModelValues,
    PredictiveKind,
    SGLDConfig,
    TrainConfig,
    VIConfig,
)
from vbnn.regression.stack import build_stack

MODELS, ROWS, INPUTS = 2, 7, 3


def _problem(config: TrainConfig, values: ModelValues | None = None):
    torch.manual_seed(0)
    model, likelihood = build_stack(config, INPUTS, list(range(MODELS)), values)
    x = torch.randn(MODELS, ROWS, INPUTS)
    y = torch.randn(MODELS, ROWS)
    return model, likelihood, x, y


@pytest.mark.parametrize("method", method_names())
def test_every_method_searches_its_own_fields_on_a_positive_log_range(method: str) -> None:
    config = method_config(method)
    fields = {f.name for f in dataclasses.fields(config)}
    space = config.search_space()
    assert space and set(space) <= fields
    assert all(0 < low < high for low, high in space.values())
    searched = dataclasses.replace(config, **{name: low for name, (low, _) in space.items()})
    assert all(getattr(searched, name) == low for name, (low, _) in space.items())


def test_a_family_adds_its_search_space_after_the_prior_std() -> None:
    assert list(VIConfig(family="gd").search_space()) == ["prior_std", "posterior_std"]
    assert list(VIConfig(family="mf").search_space()) == ["prior_std"]
    assert list(SGLDConfig().search_space()) == ["prior_std", "step_size"]
    assert list(ESConfig().search_space()) == ["learning_rate"]


def test_the_configs_objectives_differ_by_the_log_prior_and_the_kl() -> None:
    """MAP's objective is ES's log-likelihood plus sum_w log N(w; 0, s^2) at the same weights; VI
    with point weights (no KL, no noise) is the log-likelihood again."""
    es, vi_point = ESConfig(), VIConfig(family="point")
    map_config = MAPConfig(prior_std=0.7)
    model, likelihood, x, y = _problem(map_config)
    noise = ModelGenerators.for_keys(0, range(MODELS), "train")
    values = ModelValues()
    data = es.objective_terms(model, likelihood, es.prior(values), x, y, noise)["objective"]
    joint = map_config.objective_terms(model, likelihood, map_config.prior(values), x, y, noise)[
        "objective"
    ]
    normal = torch.distributions.Normal(0.0, 0.7)
    log_prior = sum(
        normal.log_prob(p.detach()).reshape(MODELS, -1).sum(-1)
        for name, p in model.named_parameters()
    )
    torch.testing.assert_close(joint - data, log_prior)
    point = vi_point.objective_terms(model, likelihood, vi_point.prior(values), x, y, noise)
    torch.testing.assert_close(point["objective"], data)
    torch.testing.assert_close(point["KL"], torch.zeros(MODELS))
    assert es.prior(values) is None


def test_per_model_prior_stds_reach_the_prior() -> None:
    stds = torch.tensor([0.5, 2.0])
    for config in (MAPConfig(), SGLDConfig(), VIConfig()):
        torch.testing.assert_close(config.prior(ModelValues(prior_std=stds)).std, stds)


def test_predictive_early_stopping_and_samples_per_step() -> None:
    vi = VIConfig(test_samples=7, train_samples=3)
    assert (vi.predictive.kind, vi.predictive.samples, vi.predictive.stochastic) == (
        PredictiveKind.DRAWS,
        7,
        True,
    )
    assert vi.samples_per_step == 3
    for config in (ESConfig(), MAPConfig()):
        assert config.predictive.kind is PredictiveKind.POINT
        assert (config.predictive.samples, config.predictive.stochastic) == (1, False)
        assert config.samples_per_step == 1
    assert SGLDConfig().predictive.kind is PredictiveKind.CHAIN
    stopping = ESConfig(validation_fraction=0.3, eval_every=4).early_stopping()
    assert (stopping.validation_fraction, stopping.eval_every) == (0.3, 4)
    assert all(cls().early_stopping() is None for cls in (MAPConfig, SGLDConfig, VIConfig))
    assert set(CONFIGS.values()) == {ESConfig, MAPConfig, SGLDConfig, VIConfig}


def test_the_correlation_rate_reaches_exactly_the_correlation_parameters() -> None:
    config = VIConfig(family="fc", correlation_learning_rate=0.125, learning_rate=0.01)
    model, likelihood, _, _ = _problem(config)
    groups = parameter_groups(config, nn.ModuleDict({"model": model, "likelihood": likelihood}))
    rates = [group["lr"] for group in groups]
    assert rates == [0.01, 0.125]
    correlation = {id(p) for layer in model.modules() if hasattr(layer, "scale_lower")
                   for p in [layer.scale_lower]}  # fmt: skip
    assert {id(p) for p in groups[1]["params"]} == correlation
    assert ESConfig().role_learning_rates() == {}
    assert config.role_learning_rates() == {ParameterRole.CORRELATION: 0.125}


def test_layer_options_name_the_family_std_and_refuse_one_it_lacks() -> None:
    stds = torch.tensor([0.02, 0.03])
    assert set(VIConfig(family="gd").layer_options(ModelValues())) == {"std"}
    options = VIConfig(family="mf").layer_options(ModelValues(posterior_std=stds))
    assert set(options) == {"init_std"} and options["init_std"] is stds
    assert VIConfig(family="vd-layer").layer_options(ModelValues()) == {}
    assert MAPConfig().layer_options(ModelValues(posterior_std=stds)) == {}
    with pytest.raises(ValueError, match="vd-layer: its layers have no posterior std"):
        VIConfig(family="vd-layer", posterior_std=0.1).layer_options(ModelValues())


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_covariance_elements_count_the_layers_covariance_factor(name: str) -> None:
    """The engine's chunking cost of a family is the per-model size of its D x D covariance
    factor over the layer's D = (I + 1) O weights where it holds one, else 0."""
    spec = FAMILIES[name]
    layer = spec.build(INPUTS, 4, ModelGenerators.for_keys(0, [0], "init"))
    weights = (INPUTS + 1) * 4  # D, the layer's weights and biases
    factors = [p for p in layer.parameters() if p.shape[-2:] == (weights, weights)]
    expected = factors[0][0].numel() if factors else 0
    assert spec.covariance_elements(INPUTS, 4) == expected
    assert (expected > 0) == spec.dense_covariance


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_familys_stated_defaults_and_search_space_are_vi_settings(name: str) -> None:
    spec = FAMILIES[name]
    fields = {f.name for f in dataclasses.fields(VIConfig)}
    assert set(spec.config_defaults) <= fields and set(spec.search_space) <= fields
    values, source = preset("no-such-data-set", name)
    assert values == dict(spec.config_defaults)
    assert (source != "") == bool(spec.config_defaults)
    for key, value in spec.config_defaults.items():
        low, high = spec.search_space.get(key, (0.0, math.inf))
        assert low <= value <= high
