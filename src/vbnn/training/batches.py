"""The data of a training run as the batches of its epochs.

``as_batches`` turns what a user hands to ``vbnn.train`` into a ``Batches`` source:

* (x, y) tensors or NumPy arrays (``TensorBatches``): x (N, ...), y (N, ...); each epoch takes
  one random permutation of the N rows from a seeded ``torch.Generator`` (``shuffle`` False: the
  rows in their order) and cuts it into batches of B (the last may be smaller); ``batch_size``
  None is one batch of all N rows, so full batch training is the minibatch training with B = N,
  step for step;
* a ``torch.utils.data.Dataset`` of (x, y) pairs (``DatasetBatches``): the same permutation of
  its indices, each batch collated by ``default_collate``; a ``TensorDataset(x, y)`` gives the
  batches of (x, y) exactly;
* a ``DataLoader`` (``LoaderBatches``): its own batches, in its own order (a loader that shuffles
  draws from its ``generator``, or from torch's global RNG, which the trainer seeds and
  checkpoints);
* per-model rows of a stack (``StackedBatches``): x (M, N, ...), y (M, N), each model m shuffling
  its own rows from its own stream, for a stack of M models trained on M data sets at once; with
  ``replacement`` each step instead draws model m's B rows uniformly with replacement from its
  stream (the minibatches of SGLD, Welling & Teh 2011; B >= N: all rows, nothing drawn), and an
  epoch is ``steps`` such draws.

A batch is mapped to the model's inputs and target by the batch rule (``core.batch_rule``): a
mapping of tensors (a tokenizer's output with its "labels", a HuggingFace collator's batches)
is given as tensors, a ``Dataset`` of mappings or a ``DataLoader`` of them, its x the mapping
without the target (one network only, not a stack).

Every source checks before training that it is not empty and that x and y have one row each,
naming the shapes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from vbnn.core.batch_rule import DEFAULT_RULE, BatchRule, Inputs, apply, split_batch, take
from vbnn.core.randomness import ModelGenerators

Batch = tuple[Inputs, torch.Tensor]


class Batches(Protocol):
    """A data set cut into the batches of an epoch.

    Attributes:
        count: N, the examples of the data set (the ELBO's ``dataset_size``).
        stacked: whether a batch holds each model's own rows (x (M, B, ...)); else one batch is
            shared by every model of a stack.
    """

    count: int
    stacked: bool

    def epoch(self) -> int:
        """Start an epoch (draw its order); returns its number of steps."""
        ...

    def batch(self, step: int) -> Batch:
        """(x, y) of ``step`` (1-based) of the current epoch."""
        ...

    def in_order(self) -> Iterator[Batch]:
        """Every example once, in batches, without drawing (for evaluation)."""
        ...

    def target(self) -> torch.Tensor:
        """Targets to check against the likelihood: all of them, or the first example's."""
        ...


def _tensor(values: Any, name: str) -> torch.Tensor:
    """A tensor of ``values``; floating NumPy arrays take torch's default dtype."""
    if isinstance(values, torch.Tensor):
        return values
    array = np.asarray(values)
    if array.dtype == object:
        raise TypeError(f"{name}: an array of numbers is needed, got dtype object")
    tensor = torch.as_tensor(array)
    return tensor.to(torch.get_default_dtype()) if tensor.is_floating_point() else tensor


def _check_rows(x: Inputs, y: torch.Tensor, name: str, rows: int = 0) -> None:
    """ValueError when x or y has no rows or their numbers of rows (dimension ``rows``) differ
    (a mapping x: each of its tensors)."""
    if isinstance(x, Mapping):
        for key, value in x.items():
            _check_rows(value, y, f"{name} {key!r}", rows)
        return
    if x.dim() <= rows or y.dim() <= rows:
        raise ValueError(
            f"{name}: x {tuple(x.shape)} and y {tuple(y.shape)} need a dimension of examples"
        )
    if x.shape[rows] != y.shape[rows]:
        raise ValueError(
            f"{name}: x {tuple(x.shape)} has {x.shape[rows]} examples but y "
            f"{tuple(y.shape)} has {y.shape[rows]}"
        )
    if x.shape[rows] == 0:
        raise ValueError(f"{name} is empty: x {tuple(x.shape)}, y {tuple(y.shape)}")


def _steps(count: int, batch_size: int | None) -> tuple[int, int]:
    size = count if batch_size is None else min(batch_size, count)
    return size, -(-count // size)


class TensorBatches:
    """(x, y) tensors cut into shuffled batches of ``batch_size`` (module docstring)."""

    stacked = False

    def __init__(
        self,
        x: Inputs,
        y: torch.Tensor,
        batch_size: int | None,
        generator: torch.Generator,
        device: torch.device | None = None,
        name: str = "data",
        shuffle: bool = True,
    ) -> None:
        _check_rows(x, y, name)
        self.x, self.y = apply(x, lambda values: values.to(device)), y.to(device)
        self.count, self.generator, self.shuffle = len(y), generator, shuffle
        self.size, self.steps = _steps(self.count, batch_size)
        self.order = torch.arange(self.count)

    def epoch(self) -> int:
        if self.shuffle:
            self.order = torch.randperm(self.count, generator=self.generator)
        return self.steps

    def batch(self, step: int) -> Batch:
        index = self.order[(step - 1) * self.size : step * self.size]
        return take(self.x, index), self.y[index]

    def in_order(self) -> Iterator[Batch]:
        for first in range(0, self.count, self.size):
            rows = slice(first, first + self.size)
            yield take(self.x, rows), self.y[rows]

    def target(self) -> torch.Tensor:
        return self.y

    def state_dict(self) -> dict[str, Any]:
        """The data-order generator's state (for a checkpoint)."""
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])


def _first_target(
    example: Any, collate: Any, rule: BatchRule, name: str, source: str
) -> torch.Tensor:
    """The target of ``example`` (a dataset's first item): y of an (x, y) pair; of a mapping,
    the target of a batch of one collated by ``collate``, split by ``rule``.

    Raises:
        ValueError: an example that is neither an (x, y) pair nor a mapping holding the target.
    """
    if isinstance(example, Mapping):
        batch = collate([example])
        if isinstance(batch, Mapping) and rule.target in batch:
            return split_batch(batch, rule, name)[1]
        keys = batch if isinstance(batch, Mapping) else example
        got = f"a dict with keys {sorted(map(str, keys))}"
        need = f"without the target {rule.target!r} (vbnn.BatchRule(target=...))"
    elif isinstance(example, tuple | list) and len(example) == 2:
        return torch.as_tensor(example[1])
    else:
        got = f"a {type(example).__name__}"
        if isinstance(example, tuple | list):
            got += f" of {len(example)} items"
        need = "but vbnn.train needs (x, y) pairs or mappings holding the target (vbnn.BatchRule)"
    raise ValueError(f"{name}: the {source} gives {got} per example, {need}")


class DatasetBatches(TensorBatches):
    """A ``Dataset`` of (x, y) pairs in the batches ``TensorBatches`` would cut (module
    docstring)."""

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int | None,
        generator: torch.Generator,
        device: torch.device | None = None,
        name: str = "data",
        shuffle: bool = True,
        rule: BatchRule = DEFAULT_RULE,
    ) -> None:
        count = len(dataset)  # type: ignore[arg-type]
        if count == 0:
            raise ValueError(f"{name} is empty: the Dataset has no examples")
        self.first = _first_target(dataset[0], default_collate, rule, name, "Dataset")
        self.dataset, self.device, self.count, self.generator = dataset, device, count, generator
        self.shuffle, self.rule = shuffle, rule
        self.size, self.steps = _steps(count, batch_size)
        self.order = torch.arange(count)

    def _collate(self, index: torch.Tensor) -> Batch:
        batch = default_collate([self.dataset[i] for i in index.tolist()])
        x, y = split_batch(batch, self.rule)
        return apply(x, lambda values: values.to(self.device)), y.to(self.device)

    def batch(self, step: int) -> Batch:
        return self._collate(self.order[(step - 1) * self.size : step * self.size])

    def in_order(self) -> Iterator[Batch]:
        for index in torch.arange(self.count).split(self.size):
            yield self._collate(index)

    def target(self) -> torch.Tensor:
        return self.first


class LoaderBatches:
    """A ``DataLoader``'s own batches of (x, y) or of mappings (split by ``rule``); its
    shuffling generator travels in the checkpoint (``state_dict``)."""

    stacked = False

    def __init__(
        self,
        loader: DataLoader,
        device: torch.device | None = None,
        name: str = "data",
        rule: BatchRule = DEFAULT_RULE,
    ) -> None:
        self.loader, self.device, self.rule = loader, device, rule
        self.count = len(loader.dataset)  # type: ignore[arg-type]
        if self.count == 0 or len(loader) == 0:
            raise ValueError(f"{name} is empty: the DataLoader has no examples")
        first = loader.dataset[0]  # type: ignore[index]
        self.first = _first_target(first, loader.collate_fn, rule, name, "DataLoader's dataset")
        self.iterator: Iterator = iter(())

    def _moved(self, batch: Any) -> Batch:
        x, y = split_batch(batch, self.rule)
        return apply(x, lambda values: values.to(self.device)), y.to(self.device)

    def _generators(self) -> list[torch.Generator]:
        found = [self.loader.generator, getattr(self.loader.sampler, "generator", None)]
        return [g for g in found if isinstance(g, torch.Generator)]

    def epoch(self) -> int:
        self.iterator = iter(self.loader)
        return len(self.loader)

    def batch(self, step: int) -> Batch:
        return self._moved(next(self.iterator))

    def in_order(self) -> Iterator[Batch]:
        for batch in self.loader:
            yield self._moved(batch)

    def target(self) -> torch.Tensor:
        return self.first

    def state_dict(self) -> dict[str, Any]:
        return {"generators": [g.get_state() for g in self._generators()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for generator, saved in zip(self._generators(), state["generators"], strict=True):
            generator.set_state(saved)


class StackedBatches:
    """Per-model rows x (M, N, ...), y (M, N): model m takes batch b of its own permutation,
    drawn from its own stream of ``streams``, or with ``replacement`` B rows drawn anew at each
    of an epoch's ``steps`` (None: ceil(N / B)) (module docstring)."""

    stacked = True

    def __init__(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        batch_size: int | None,
        streams: ModelGenerators,
        name: str = "data",
        replacement: bool = False,
        steps: int | None = None,
    ) -> None:
        _check_rows(x, y, name, rows=1)
        if x.shape[0] != len(streams) or y.shape[0] != len(streams):
            raise ValueError(
                f"{name}: x {tuple(x.shape)} and y {tuple(y.shape)} need one "
                f"data set per model ({len(streams)})"
            )
        if steps is not None and (not replacement or steps < 1):
            raise ValueError(f"{name}: steps={steps} needs replacement=True and must be >= 1")
        self.x, self.y, self.streams, self.count = x, y, streams, y.shape[1]
        self.size, self.steps = _steps(self.count, batch_size)
        self.replacement = replacement
        self.steps = self.steps if steps is None else steps
        self.order = torch.empty(0, dtype=torch.int64)

    def epoch(self) -> int:
        if not self.replacement:
            self.order = torch.stack(self.streams.permutation(self.count))  # (M, N)
        return self.steps

    def batch(self, step: int) -> Batch:
        if self.replacement:
            if self.size >= self.count:
                return self.x, self.y
            index = torch.stack(
                [
                    torch.randint(self.count, (self.size,), generator=g)
                    for g in self.streams.generators
                ]
            ).to(self.x.device)
        else:
            index = self.order[:, (step - 1) * self.size : step * self.size]
        return _take(self.x, index), _take(self.y, index)

    def in_order(self) -> Iterator[Batch]:
        for first in range(0, self.count, self.size):
            rows = slice(first, first + self.size)
            yield self.x[:, rows], self.y[:, rows]

    def target(self) -> torch.Tensor:
        return self.y


def _take(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """values (M, N, ...) at rows index (M, B) of each model -> (M, B, ...)."""
    if values.dim() == 2:
        return torch.gather(values, 1, index)
    return torch.gather(values, 1, index.unsqueeze(-1).expand(-1, -1, values.shape[-1]))


def as_batches(
    data: Any,
    batch_size: int | None,
    generator: torch.Generator,
    device: torch.device | None = None,
    name: str = "data",
    shuffle: bool = True,
    rule: BatchRule = DEFAULT_RULE,
) -> Batches:
    """The ``Batches`` of ``data`` (module docstring); a ``Batches`` source passes through
    (``shuffle`` False: tensors and a ``Dataset`` keep their order); ``rule`` splits mappings
    into inputs and target (``core.batch_rule``).

    Raises:
        ValueError: empty data, or x and y of different numbers of rows (the shapes named);
            ``batch_size`` < 1.
        TypeError: ``data`` of another form.
    """
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 or None (full batch), got {batch_size}")
    if isinstance(data, TensorBatches | LoaderBatches | StackedBatches):
        return data
    if isinstance(data, DataLoader):
        return LoaderBatches(data, device, name, rule)
    if isinstance(data, Dataset):
        return DatasetBatches(data, batch_size, generator, device, name, shuffle, rule)
    if isinstance(data, Mapping) or (isinstance(data, tuple | list) and len(data) == 2):
        inputs, target = split_batch(data, rule, name)
        x = apply(inputs, lambda values: _tensor(values, f"{name} x"))
        y = _tensor(target, f"{name} y")
        return TensorBatches(x, y, batch_size, generator, device, name, shuffle)
    raise TypeError(
        f"{name}: expected (x, y) tensors or arrays, a mapping of them holding the target, a "
        f"torch Dataset or a DataLoader, got {type(data).__name__}"
    )
