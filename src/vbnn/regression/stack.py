"""The model stack a ``TrainConfig`` describes: one MLP per key and its Gaussian likelihood.

Training (``engine``) and loading a saved stack (``saved_models``) both build it here, so the
architecture always comes from the config.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vbnn.core.contracts import TrainConfig
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.registry import family as family_spec
from vbnn.networks.mlp import MLP
from vbnn.training.likelihoods import GaussianLikelihood


def build_stack(
    config: TrainConfig,
    in_features: int,
    keys: Sequence[int],
    posterior_std: torch.Tensor | None = None,
) -> tuple[MLP, GaussianLikelihood]:
    """A model stack with one model per key (split id), initialised from its own stream.

    ``posterior_std`` (M,) overrides ``config.posterior_std`` model by model (tuning candidates).
    """
    generators = ModelGenerators.for_keys(config.seed, keys, "init")
    std = config.posterior_std if posterior_std is None else posterior_std
    takes_std = "posterior_std" in family_spec(config.resolved_family).accepted_options()
    options = {"posterior_std": std} if takes_std else {}
    model = MLP(
        config.resolved_family,
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
