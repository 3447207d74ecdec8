"""The UCI regression engine: any method on any set of splits, trained as batched model stacks.

Splits of equal size are stacked on the model dimension and trained in chunks. Batching amortises
Python and autograd overhead, which dominates small problems (boston), but a stack whose
activations fall out of the CPU cache runs slower per model than one model alone (power): the
chunk size keeps the activations of a chunk under ``CHUNK_ELEMENTS`` floats (benchmarks/README.md
has the measurements behind it). Every model draws from its own random streams, so the numbers do
not depend on the chunking.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

import torch

from vbnn.core.contracts import Method, RunResult, SplitResult, TrainConfig
from vbnn.core.randomness import ModelGenerators
from vbnn.core.runtime import keep_freed_memory
from vbnn.data.splits import StackedSplits, group_by_size, stack_splits
from vbnn.data.uci import RegressionDataset
from vbnn.layers.registry import family as family_spec
from vbnn.networks.mlp import MLP
from vbnn.regression import sgld
from vbnn.regression.evaluation import PredictiveMetrics, evaluate, metrics_from_predictions
from vbnn.training.full_batch import StepCallback, Validation, fit
from vbnn.training.likelihoods import GaussianLikelihood

# Floats of one hidden activation tensor (models x rows x width) that a chunk may hold.
CHUNK_ELEMENTS = 1 << 19
# Floats of the full-covariance factors (models x D x D) that a chunk may hold.
CHUNK_COVARIANCE_ELEMENTS = 1 << 22


def choose_chunk_size(config: TrainConfig, train_rows: int, in_features: int, count: int) -> int:
    """How many models train together: all of them unless the chunk would leave the cache."""
    if config.chunk_size is not None:
        return min(config.chunk_size, count)
    width = max((*config.hidden, 1))
    per_model = train_rows * width * config.train_samples
    chunk = CHUNK_ELEMENTS // max(per_model, 1)
    if config.resolved_family == "fc":
        sizes = (in_features, *config.hidden, 1)
        largest = max((i + 1) * o for i, o in pairwise(sizes))
        chunk = min(chunk, CHUNK_COVARIANCE_ELEMENTS // largest**2)
    return max(1, min(count, chunk))


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


def _carve_validation(
    config: TrainConfig, data: StackedSplits, keys: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor, Validation]:
    """ES: hold out ``validation_fraction`` of each split's training rows (seeded per split)."""
    rows = data.x_train.shape[1]
    held_out = max(1, round(config.validation_fraction * rows))
    orders = ModelGenerators.for_keys(config.seed, keys, "validation").permutation(rows)
    order = torch.stack(orders).to(data.x_train.device)  # (M, rows)
    fit_rows, validation_rows = order[:, held_out:], order[:, :held_out]

    def take(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        if t.dim() == 3:
            return torch.gather(t, 1, index.unsqueeze(-1).expand(-1, -1, t.shape[-1]))
        return torch.gather(t, 1, index)

    validation = Validation(
        take(data.x_train, validation_rows), take(data.y_train, validation_rows)
    )
    return take(data.x_train, fit_rows), take(data.y_train, fit_rows), validation


@dataclass
class TrainedStack:
    """A trained stack, the data it saw, and its test metrics (one entry per model)."""

    model: MLP
    likelihood: GaussianLikelihood
    config: TrainConfig
    data: StackedSplits
    metrics: PredictiveMetrics
    stopped_iteration: torch.Tensor | None  # ES: (M,) iteration of the kept weights
    seconds_per_model: float

    @property
    def results(self) -> list[SplitResult]:
        """Per-split results in the data's order (split ids from ``data.split_ids``)."""
        stopped = self.stopped_iteration
        return [
            SplitResult(
                split=k,
                test_log_likelihood=float(self.metrics.log_likelihood[m]),
                test_rmse=float(self.metrics.rmse[m]),
                train_seconds=self.seconds_per_model,
                stopped_iteration=None if stopped is None else int(stopped[m]),
            )
            for m, k in enumerate(self.data.split_ids)
        ]


MakeCallback = Callable[[MLP, GaussianLikelihood], StepCallback]


def train_stack(
    config: TrainConfig,
    data: StackedSplits,
    progress: bool = False,
    prior_std: torch.Tensor | None = None,
    posterior_std: torch.Tensor | None = None,
    make_callback: MakeCallback | None = None,
    step_size: torch.Tensor | None = None,
) -> TrainedStack:
    """Train a stack on ``data``'s training part and evaluate it on its test part.

    Model m draws from the streams of key ``data.split_ids[m]`` (the tuner repeats one split's id
    so that its candidates share initialisation and noise: common random numbers).

    Args:
        prior_std, posterior_std, step_size: (M,) per-model overrides of the config's values
            (``step_size``: SGLD's eta).
        make_callback: called with the built model and likelihood; returns the
            ``training.fit`` step callback (e.g. a ``diagnostics.trajectories.TrajectoryLogger``).
    """
    start = time.perf_counter()
    keys = list(data.split_ids)
    device = training_device(config)
    data = data.to(device)
    prior_std, posterior_std, step_size = (
        None if t is None else t.to(device) for t in (prior_std, posterior_std, step_size)
    )
    model, likelihood = build_stack(config, data.x_train.shape[-1], keys, posterior_std)
    model, likelihood = model.to(device), likelihood.to(device)
    callback = make_callback(model, likelihood) if make_callback is not None else None
    x, y, validation = data.x_train, data.y_train, None
    if config.method is Method.ES:
        x, y, validation = _carve_validation(config, data, keys)
    train_streams = ModelGenerators.for_keys(config.seed, keys, "train")
    description = f"{config.method.value} splits {keys[0]}-{keys[-1]}"
    stopped = None
    if config.method is Method.SGLD:
        states = sgld.sample(
            config,
            model,
            likelihood,
            x,
            y,
            train_streams,
            prior_std,
            progress,
            description,
            step_size,
        )
        outputs, noise_stds = sgld.predictions(model, likelihood, states, data.x_test)
        metrics = metrics_from_predictions(outputs, noise_stds, data.y_test, data.target_scale)
    else:
        info = fit(
            config,
            model,
            likelihood,
            x,
            y,
            train_streams,
            validation=validation,
            labels=[f"split {k}" for k in keys],
            progress=progress,
            description=description,
            callback=callback,
            prior_std=prior_std,
        )
        stopped = info.stopped_iteration
        metrics = evaluate(
            model,
            likelihood,
            data.x_test,
            data.y_test,
            data.target_scale,
            ModelGenerators.for_keys(config.seed, keys, "eval"),
            samples=config.test_samples,
            stochastic=config.method not in (Method.ES, Method.MAP),
        )
    metrics = PredictiveMetrics(metrics.log_likelihood.cpu(), metrics.rmse.cpu())
    stopped = None if stopped is None else stopped.cpu()
    seconds = (time.perf_counter() - start) / len(keys)
    return TrainedStack(model, likelihood, config, data, metrics, stopped, seconds)


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """``--compile`` and ``--device``: where and how a stack trains (neither changes the config
    hash of stored runs: ``stores.results_db``)."""
    parser.add_argument(
        "--compile", action="store_true", help="fuse each training step (torch.compile; needs g++)"
    )
    parser.add_argument(
        "--device", default="cpu", help="where stacks train: cpu (default), cuda, cuda:1, ..."
    )


def training_device(config: TrainConfig) -> torch.device:
    """``config.device``, with a clear error when this machine has no such device."""
    device = torch.device(config.device)
    if device.type != "cuda":
        return device
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0 or (device.index or 0) >= count:
        raise RuntimeError(
            f"device={config.device!r} (--device, TrainConfig or BayesianRegressor): torch sees "
            f"{count} CUDA device(s) here"
        )
    return device


# Hyper-parameters that may differ between the models of one stack (per-model tensors).
PER_MODEL_SETTINGS = ("prior_std", "posterior_std", "step_size")

Overrides = Mapping[int, Mapping[str, float]]  # split id -> hyper-parameter values for it


def shared_settings(values: Mapping[str, float]) -> dict[str, float]:
    """The values that must agree across a stack (all but ``PER_MODEL_SETTINGS``)."""
    return {k: v for k, v in values.items() if k not in PER_MODEL_SETTINGS}


def run_stack(
    config: TrainConfig,
    data: StackedSplits,
    progress: bool = False,
    per_split: Overrides | None = None,
) -> TrainedStack:
    """``train_stack`` with each split's own values from ``per_split`` (tuned per split).

    Only ``PER_MODEL_SETTINGS`` may differ inside one stack; others must agree (``run_splits``
    chunks accordingly).
    """
    if not per_split:
        return train_stack(config, data, progress)
    values = [per_split[k] for k in data.split_ids]
    shared = shared_settings(values[0])
    if any(shared_settings(v) != shared for v in values):
        raise ValueError(f"run_stack: splits {list(data.split_ids)} need different {shared}")
    per_model = {
        name: torch.tensor([v[name] for v in values], dtype=config.torch_dtype)
        for name in PER_MODEL_SETTINGS
        if name in values[0]
    }
    return train_stack(dataclasses.replace(config, **shared), data, progress, **per_model)


def run_splits(
    dataset: RegressionDataset,
    split_ids: Sequence[int] | None,
    config: TrainConfig,
    progress: bool = False,
    per_split: Overrides | None = None,
    on_stack: Callable[[TrainedStack], None] | None = None,
) -> RunResult:
    """Run ``config.method`` on the given splits (all when None), chunked batches of models.

    Args:
        per_split: each split id's own hyper-parameter values (``--tune per-split``).
        on_stack: called with every trained chunk as soon as it finishes (the results database
            stores it, ``io`` saves the model), so a killed run loses at most one chunk.
    """
    keep_freed_memory()
    split_ids = list(range(dataset.num_splits)) if split_ids is None else list(split_ids)
    for k in split_ids:
        dataset.split(k)  # a clear error for a split that does not exist, before any training
        if per_split is not None and k not in per_split:
            raise ValueError(f"run_splits: no hyper-parameter values for split {k}")
    # splits that disagree on a setting one Adam cannot vary per model train one at a time
    separate = per_split is not None and (
        len({tuple(sorted(shared_settings(v).items())) for v in per_split.values()}) > 1
    )
    results: list[SplitResult] = []
    for group in group_by_size(dataset, split_ids):
        train_rows = len(dataset.split(group[0])[0])
        chunk = choose_chunk_size(config, train_rows, dataset.inputs.shape[1], len(group))
        chunk = 1 if separate else chunk
        for begin in range(0, len(group), chunk):
            data = stack_splits(dataset, group[begin : begin + chunk], config.torch_dtype)
            trained = run_stack(config, data, progress, per_split)
            if on_stack is not None:
                on_stack(trained)
            results.extend(trained.results)
    results.sort(key=lambda r: r.split)
    notes = () if per_split is None else (f"per-split values: {dict(per_split)}",)
    return RunResult(dataset=dataset.name, config=config, splits=tuple(results), notes=notes)
