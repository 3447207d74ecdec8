"""Saved models: a trained stack (any family) and its config in one folder, written atomically.

Layout of a model folder:
    ``model.json`` - format tag and version, the TrainConfig, input width, the model keys (split
    ids), the data set name and any caller metadata;
    ``state.pt`` - ``torch.save({"model": MLP.state_dict(), "likelihood": ...state_dict()})``.

Loading rebuilds the stack with ``stack.build_stack`` (so the architecture comes from the
config, never from pickled code) and loads the tensors with ``torch.load(weights_only=True)``.
The folder is written under a temporary name and renamed into place, so a reader sees either the
old model or the new one, never half of one.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vbnn.networks.mlp import MLP
from vbnn.regression.runs import TrainConfig, config_from_dict
from vbnn.regression.stack import build_stack
from vbnn.stores.atomic import write_folder_atomic
from vbnn.training.likelihoods import GaussianLikelihood, HeteroscedasticGaussianLikelihood

FORMAT = "vbnn-model"
FORMAT_VERSION = 3  # a folder of another version is refused
CONFIG_FILE = "model.json"
STATE_FILE = "state.pt"


class ModelFileError(ValueError):
    """A model folder that is missing, incomplete or does not match its config (path named)."""


@dataclass
class SavedModel:
    """A loaded stack: the model, its likelihood, the config and what the stack was trained on."""

    model: MLP
    likelihood: GaussianLikelihood | HeteroscedasticGaussianLikelihood
    config: TrainConfig
    in_features: int
    keys: tuple[int, ...]
    dataset: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


# Parameters: one per field of ``SavedModel`` (what ``load_model`` returns); callers hold the
# pieces, not the record
def save_model(
    folder: str | Path,
    model: MLP,
    likelihood: GaussianLikelihood,
    config: TrainConfig,
    in_features: int,
    keys: Sequence[int],
    dataset: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write the stack to ``folder`` atomically (replacing a previous model there).

    Args:
        model, likelihood: the trained stack of M models.
        config: the TrainConfig it was built and trained with.
        in_features: input width I.
        keys: the M keys passed to ``build_stack`` (split ids).
        dataset: name of the data set the stack was trained on (for later diagnostics).
        metadata: further JSON-serialisable facts to keep (e.g. metrics).

    Returns:
        The folder.
    """
    folder = Path(folder)
    if len(keys) != model.layers[0].num_models:
        raise ValueError(
            f"save_model: {len(keys)} keys for a stack of {model.layers[0].num_models} models"
        )
    description = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "config": config.to_dict(),
        "in_features": int(in_features),
        "keys": [int(k) for k in keys],
        "dataset": dataset,
        "metadata": metadata or {},
        "heteroscedastic": isinstance(likelihood, HeteroscedasticGaussianLikelihood),
    }

    def fill(staging: Path) -> None:
        (staging / CONFIG_FILE).write_text(json.dumps(description, indent=2, sort_keys=True))
        state = {"model": model.state_dict(), "likelihood": likelihood.state_dict()}
        torch.save(state, staging / STATE_FILE)

    return write_folder_atomic(folder, fill)


def load_model(folder: str | Path) -> SavedModel:
    """Rebuild a saved stack (``stack.build_stack``) and load its tensors.

    Raises:
        ModelFileError: folder or file missing, not a vbnn model, or tensors that do not fit the
            architecture its config describes.
    """
    folder = Path(folder)
    config_path, state_path = folder / CONFIG_FILE, folder / STATE_FILE
    for path in (config_path, state_path):
        if not path.is_file():
            raise ModelFileError(f"{path}: not found; is {folder} a folder written by save_model?")
    try:
        description = json.loads(config_path.read_text())
    except json.JSONDecodeError as error:
        raise ModelFileError(f"{config_path}: not valid JSON ({error})") from None
    version = description.get("format_version")
    if description.get("format") != FORMAT:
        raise ModelFileError(
            f"{config_path}: format {description.get('format')!r}, expected {FORMAT!r}"
        )
    if version != FORMAT_VERSION:
        raise ModelFileError(
            f"{config_path}: format version {version!r}, this vbnn reads {FORMAT_VERSION} only; "
            "load it with the vbnn that saved it, or train the model anew"
        )
    try:
        config = config_from_dict(description["config"])
        in_features, keys = int(description["in_features"]), tuple(description["keys"])
    except (KeyError, TypeError, ValueError) as error:
        raise ModelFileError(f"{config_path}: bad config ({error})") from None
    heteroscedastic = bool(description.get("heteroscedastic", False))
    model, likelihood = build_stack(config, in_features, keys, heteroscedastic=heteroscedastic)
    try:
        state = torch.load(state_path, weights_only=True, map_location="cpu")
        model.load_state_dict(state["model"])
        likelihood.load_state_dict(state["likelihood"])
    except (RuntimeError, KeyError, TypeError, EOFError, OSError, pickle.UnpicklingError) as error:
        raise ModelFileError(
            f"{state_path}: tensors do not fit the model described by {config_path} ({error})"
        ) from None
    return SavedModel(
        model=model,
        likelihood=likelihood,
        config=config,
        in_features=in_features,
        keys=keys,
        dataset=description.get("dataset"),
        metadata=description.get("metadata", {}),
    )
