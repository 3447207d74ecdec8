"""The model stack a ``TrainConfig`` describes: one MLP per key and its Gaussian likelihood.

Training (``engine``) and loading a saved stack (``saved_models``) both build it here, so the
architecture always comes from the config.
"""

from __future__ import annotations

from collections.abc import Sequence

from vbnn.core.randomness import ModelGenerators
from vbnn.core.runs import ModelValues, TrainConfig, VIConfig
from vbnn.layers.registry import family as family_spec
from vbnn.networks.mlp import MLP
from vbnn.regression.methods import check_method
from vbnn.training.likelihoods import GaussianLikelihood


def build_stack(
    config: TrainConfig,
    in_features: int,
    keys: Sequence[int],
    values: ModelValues | None = None,
) -> tuple[MLP, GaussianLikelihood]:
    """A model stack with one model per key (split id), initialised from its own stream.

    ``values.posterior_std`` (M,) overrides VI's ``posterior_std`` model by model (tuning
    candidates); it reaches the family's layers under their name for it
    (``FamilySpec.std_option``: ``init_std``, or ``std`` for ``gd``).
    """
    check_method(config.network_family)  # a family without a closed-form Gaussian KL: why not
    generators = ModelGenerators.for_keys(config.seed, keys, "init")
    options = {}
    spec = family_spec(config.network_family)
    option = spec.std_option()
    if isinstance(config, VIConfig) and option in spec.accepted_options():
        options[option] = (values or ModelValues()).get(config, "posterior_std")
    elif isinstance(config, VIConfig) and config.posterior_std != VIConfig.posterior_std:
        raise ValueError(
            f"{config.family}: its layers have no posterior std to set, got posterior_std="
            f"{config.posterior_std}; leave it at its default"
        )
    model = MLP(
        config.network_family,
        (in_features, *config.hidden, 1),
        config.activation,
        generators,
        dtype=config.torch_dtype,
        **options,
    )
    likelihood = GaussianLikelihood(
        len(keys), config.noise_std, config.noise_std_init, config.torch_dtype
    )
    return model, likelihood
