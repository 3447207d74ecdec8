"""The model stack a ``TrainConfig`` describes: one MLP per key and its Gaussian likelihood
(homoscedastic, or heteroscedastic: two outputs, the mean and the log std).

Training (``engine``) and loading a saved stack (``saved_models``) both build it here, so the
architecture always comes from the config.
"""

from __future__ import annotations

from collections.abc import Sequence

from vbnn.core.randomness import ModelGenerators
from vbnn.networks.mlp import MLP
from vbnn.regression.methods import check_method
from vbnn.regression.runs import ModelValues, TrainConfig
from vbnn.training.likelihoods import GaussianLikelihood, HeteroscedasticGaussianLikelihood


def build_stack(
    config: TrainConfig,
    in_features: int,
    keys: Sequence[int],
    values: ModelValues | None = None,
    heteroscedastic: bool = False,
) -> tuple[MLP, GaussianLikelihood | HeteroscedasticGaussianLikelihood]:
    """A model stack with one model per key (split id), initialised from its own stream.

    ``values`` overrides settings model by model (tuning candidates), e.g. VI's
    ``posterior_std`` (M,), which reaches the family's layers under their name for it
    (``TrainConfig.layer_options``). ``heteroscedastic``: two outputs per model, the mean and
    the log std of ``HeteroscedasticGaussianLikelihood`` (the config's noise std unused).
    """
    check_method(config.network_family)  # a family without a closed-form Gaussian KL: why not
    generators = ModelGenerators.for_keys(config.seed, keys, "init")
    options = config.layer_options(values or ModelValues())
    model = MLP(
        config.network_family,
        (in_features, *config.hidden, 2 if heteroscedastic else 1),
        config.activation,
        generators,
        dtype=config.torch_dtype,
        **options,
    )
    if heteroscedastic:
        return model, HeteroscedasticGaussianLikelihood()
    likelihood = GaussianLikelihood(
        len(keys), config.noise_std, config.noise_std_init, config.torch_dtype
    )
    return model, likelihood
