"""Explicit randomness for stacks of models.

Every model in a stack owns its own ``torch.Generator``: a model draws the same numbers whether it
is trained alone or inside a batch of other models, which makes "batched == alone" exact.
Seeds of the streams are derived from (base seed, model key, purpose) with NumPy's
``SeedSequence``, so independent purposes (initialisation, training noise, evaluation noise,
validation split) never share a stream.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from functools import cache
from typing import Any, Protocol

import numpy as np
import torch

PURPOSES = {
    "init": 0,
    "train": 1,
    "eval": 2,
    "validation": 3,
    "tuning": 4,
    "folds": 5,
    "global": 6,
    "shift": 7,
}

# torch's CPU normal_ runs on one thread; above this many draws in one call the models' streams
# are filled on parallel threads (each stream is still read in the same order).
PARALLEL_DRAWS = 1 << 16
# ModelGenerators.next_step queues this many training steps' noise blocks a hand-over.
AHEAD_STEPS = 8


@cache
def _pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vbnn-rng")


def derive_seed(seed: int, key: int, purpose: str) -> int:
    """A 63-bit seed for the stream (seed, key, purpose); ``key`` is e.g. the split index."""
    if purpose not in PURPOSES:
        raise ValueError(
            f"derive_seed: unknown purpose {purpose!r}; expected one of {list(PURPOSES)}"
        )
    if seed < 0 or key < 0:
        raise ValueError(f"derive_seed: seed and key must be >= 0, got seed={seed}, key={key}")
    state = np.random.SeedSequence([seed, key, PURPOSES[purpose]]).generate_state(2, np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1]))


class _Done:
    """A finished task's result behind ``Future.result`` (without a Future's lock)."""

    __slots__ = ("value",)

    def __init__(self, value: torch.Tensor) -> None:
        self.value = value

    def result(self) -> torch.Tensor:
        return self.value


class _Block:
    """Block ``index`` of a task that draws several blocks in one go (a step's noise)."""

    __slots__ = ("index", "task")

    def __init__(self, task: Future | _Done, index: int) -> None:
        self.task, self.index = task, index

    def result(self) -> torch.Tensor:
        return self.task.result()[self.index]


class _AtOnce:
    """The executor interface of ``ThreadPoolExecutor`` that runs each task when submitted."""

    def submit(self, function: Any, *args: Any) -> _Done:
        return _Done(function(*args))

    def shutdown(self, wait: bool = True) -> None:
        pass


class ModelGenerators:
    """One ``torch.Generator`` per model of a stack.

    Args:
        seeds: one seed per model, in the order of the model dimension.
    """

    def __init__(self, seeds: Sequence[int], device: torch.device | str = "cpu") -> None:
        if len(seeds) == 0:
            raise ValueError("ModelGenerators: need at least one seed")
        self.device = torch.device(device)
        self.generators = [torch.Generator(self.device).manual_seed(int(s)) for s in seeds]
        self._ahead: ThreadPoolExecutor | _AtOnce | None = None
        self._pending: defaultdict[tuple, deque[_Block]] = defaultdict(deque)
        self._asked: list[tuple] | None = None  # the blocks asked for since ``next_step``
        self._grouped = False  # the steps' blocks are queued by ``next_step``
        self._steps_queued = 0  # steps, from the current one on, whose blocks are queued

    @classmethod
    def for_keys(
        cls, seed: int, keys: Sequence[int], purpose: str, device: torch.device | str = "cpu"
    ) -> ModelGenerators:
        return cls([derive_seed(seed, k, purpose) for k in keys], device)

    def __len__(self) -> int:
        return len(self.generators)

    def randn(
        self,
        *shape: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """Standard normal draws of shape (M, *shape), model m from its own generator.

        The draws are made on the generators' device (``device`` of the constructor) and moved to
        ``device`` when it differs, so a model's numbers do not depend on where it computes.
        """
        out = self._fill(shape, dtype) if self._ahead is None else self._ahead_block((shape, dtype))
        if device is None or out.device == device:
            return out
        return out.to(device, non_blocking=True)

    def _ahead_block(self, key: tuple) -> torch.Tensor:
        """The block drawn ahead for ``key`` (drawn now, behind the queued ones, if none is)."""
        pending = self._pending[key]
        if not pending:
            self._queue([key])
        out = pending.popleft().result()
        if self._asked is not None:
            self._asked.append(key)
        if not self._grouped:
            self._queue([key])  # the next training step asks for the same block
        return out

    def _queue(self, keys: list[tuple]) -> None:
        """Draw the blocks ``keys`` (in order) as one task of the look-ahead thread."""
        assert self._ahead is not None
        task = self._ahead.submit(self._fill_all, keys)
        for index, key in enumerate(keys):
            self._pending[key].append(_Block(task, index))

    def _fill_all(self, keys: list[tuple]) -> list[torch.Tensor]:
        return [self._fill(*key) for key in keys]

    def _fill(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        out = torch.empty((len(self.generators), *shape), dtype=dtype, device=self.device)
        workers = min(torch.get_num_threads(), len(self.generators))
        if self._ahead is None and workers > 1 and out.numel() >= PARALLEL_DRAWS:
            rows = list(zip(out, self.generators, strict=True))
            list(_pool(workers).map(lambda pair: pair[0].normal_(generator=pair[1]), rows))
        else:
            for row, generator in zip(out, self.generators, strict=True):
                row.normal_(generator=generator)
        return out

    @contextmanager
    def drawing_ahead(self, background: bool = True) -> Iterator[ModelGenerators]:
        """Draw every ``randn`` block one step ahead, on a background thread.

        Inside the context each ``randn(*shape)`` returns a block drawn earlier and queues the
        draw of the next block of the same shape, so the noise of step t+1 is generated while
        step t computes (torch's ``normal_`` is a serial Mersenne twister and the largest single
        cost of an LRT training step; measured: benchmarks/README.md). All draws run in
        submission order on one thread, so every model's stream sees the same sequence of requests
        as without batching and the numbers are reproducible; they differ from those drawn
        without the context, because the look-ahead blocks are taken from the stream earlier. The
        blocks drawn ahead and never used are discarded on exit. A training loop that calls
        ``next_step`` before each step hands the thread several steps' blocks at a time, with
        the same numbers.

        Args:
            background: False draws each look-ahead block at once, on the calling thread: the
                same blocks in the same order, hence the same numbers, without the thread. For
                a small step (a UCI split of a few hundred rows) the thread's hand-over costs
                more than the draws it hides (measured: benchmarks/README.md).
        """
        if self._ahead is not None:
            raise RuntimeError("ModelGenerators.drawing_ahead: already drawing ahead")
        self._ahead = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="vbnn-noise")
            if background
            else _AtOnce()
        )
        try:
            yield self
        finally:
            self._ahead.shutdown(wait=True)
            self._ahead, self._asked, self._grouped, self._steps_queued = None, None, False, 0
            self._pending.clear()

    def next_step(self, steps_after: int = AHEAD_STEPS) -> None:
        """Inside ``drawing_ahead``: a training step begins; ``steps_after`` steps follow it.

        The first step queues the next block of each shape as it asks for one (as without
        ``next_step``). From the second step on, whenever only the beginning step's blocks are
        queued, the blocks of the next min(``AHEAD_STEPS``, ``steps_after`` + 1) steps are queued
        at once: the shapes the step that ended asked for, in its order, once a step. The look-
        ahead thread is then woken once every ``AHEAD_STEPS`` steps instead of once a block.
        Every model's stream is read in the order of the requests either way, so a loop whose
        steps ask for the same blocks in the same order gets the numbers it gets without
        ``next_step``, and its streams end where they would end (past the blocks of the step
        after the last); a block not drawn ahead is drawn when asked for.

        Raises:
            RuntimeError: outside ``drawing_ahead``.
        """
        if self._ahead is None:
            raise RuntimeError("ModelGenerators.next_step: only inside drawing_ahead")
        if self._grouped:
            self._steps_queued -= 1  # the step that ended
        elif self._asked:  # the step beginning was queued block by block by the first one
            self._grouped, self._steps_queued = True, 1
        if self._grouped and self._asked and self._steps_queued <= 1:
            count = min(AHEAD_STEPS, steps_after + 1)
            for _ in range(count):
                self._queue(self._asked)
            self._steps_queued += count
        self._asked = []

    def get_state(self) -> list[torch.Tensor]:
        """The state of every model's generator, in model order (for ``set_state``).

        Raises:
            RuntimeError: inside ``drawing_ahead`` (the streams are already past the blocks
                drawn ahead).
        """
        self._check_not_ahead("get_state")
        return [generator.get_state() for generator in self.generators]

    def set_state(self, state: Sequence[torch.Tensor]) -> None:
        """Put every model's generator back to a state of ``get_state``.

        Raises:
            ValueError: ``state`` holds another number of streams than there are models.
            RuntimeError: inside ``drawing_ahead``.
        """
        self._check_not_ahead("set_state")
        if len(state) != len(self.generators):
            raise ValueError(f"ModelGenerators.set_state: {len(state)} streams for "
                             f"{len(self.generators)} models")  # fmt: skip
        for generator, stream in zip(self.generators, state, strict=True):
            generator.set_state(stream)

    def _check_not_ahead(self, caller: str) -> None:
        if self._ahead is not None:
            raise RuntimeError(f"ModelGenerators.{caller}: not while drawing ahead")

    def permutation(self, n: int) -> list[torch.Tensor]:
        """One random permutation of range(n) per model."""
        return [torch.randperm(n, generator=g, device=self.device) for g in self.generators]

    def subset(self, index: Sequence[int]) -> ModelGenerators:
        """A view onto some of the models (shares the generator objects)."""
        view = ModelGenerators.__new__(ModelGenerators)
        view.generators = [self.generators[i] for i in index]
        view.device = self.device
        view._ahead, view._pending = None, defaultdict(deque)
        view._asked, view._grouped, view._steps_queued = None, False, 0
        return view


class NoiseSource(Protocol):
    """Anything that hands out standard normal blocks of shape (M, *shape) like ModelGenerators,
    and can be put back to an earlier position of its streams.

    ``get_state()`` returns the position, ``set_state(state)`` returns to it: the draws after
    ``set_state`` repeat those made after the ``get_state`` (``vbnn.sample`` runs the chunks of
    one sample from the same state, so in "weights" mode they share the sample's weights).
    """

    def randn(
        self,
        *shape: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> torch.Tensor: ...

    def get_state(self) -> Any: ...

    def set_state(self, state: Any) -> None: ...


class TorchNoise:
    """Noise for M models from one ``torch.Generator``, or torch's global RNG when it is None.

    With no generator it is the noise of a layer that is given none (``torch.manual_seed`` makes
    it reproducible); with one, it initialises a single model from that generator. A draw is made
    on the generator's device and moved to ``device`` if needed.
    """

    def __init__(self, num_models: int, generator: torch.Generator | None = None) -> None:
        self.num_models, self.generator = num_models, generator

    def __len__(self) -> int:
        return self.num_models

    def randn(
        self,
        *shape: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        size = (self.num_models, *shape)
        if self.generator is None:
            return torch.randn(size, dtype=dtype, device=device)
        out = torch.randn(size, dtype=dtype, device=self.generator.device, generator=self.generator)
        return out if device is None else out.to(device)

    def get_state(self) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """The generator's state; with none, torch's global CPU state and that of every CUDA
        device torch has initialised."""
        if self.generator is not None:
            return self.generator.get_state()
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []
        return torch.get_rng_state(), cuda

    def set_state(self, state: torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]) -> None:
        if self.generator is not None:
            self.generator.set_state(state)
            return
        cpu, cuda = state
        torch.set_rng_state(cpu)
        if cuda:
            torch.cuda.set_rng_state_all(cuda)


class NoiseTape:
    """The noise blocks of a pass, recorded from a source or replayed from tensors.

    A recording tape, ``NoiseTape(source=generators)``, draws every ``randn`` from ``source``,
    keeps the block and its call, (shape, dtype), in ``calls``; ``replay()`` is a tape that hands
    the same blocks back, in order, to a later pass making the same calls. Two uses:

    * A compiled training step (``TrainConfig.compile``) cannot call the generators' Python code.
      Its first, eager step draws through a recording tape; every later step draws the blocks of
      its ``calls`` from the generators in the same order and passes them into the compiled
      graph, where the layers read them back from ``NoiseTape(blocks)``.
    * Weights fixed for an episode (``vbnn reproduce exploration``): the rollout draws them through
      a recording tape and the policy-gradient pass replays it, so both use the same numbers.

    Args:
        blocks: the blocks to replay, in order (replaying tape).
        source: the noise source to draw from and record (recording tape).

    Raises:
        RuntimeError: a replaying tape asked for more blocks than it holds, or for a shape other
            than that of the block at its position (a pass that draws differently).
    """

    def __init__(
        self, blocks: Sequence[torch.Tensor] = (), source: NoiseSource | None = None
    ) -> None:
        self.blocks, self.source, self.index = list(blocks), source, 0
        self.calls: list[tuple[tuple[int, ...], torch.dtype]] = []

    def randn(
        self,
        *shape: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        if self.source is not None:
            self.calls.append((shape, dtype))
            self.blocks.append(self.source.randn(*shape, dtype=dtype, device=device))
            return self.blocks[-1]
        if self.index == len(self.blocks):
            raise RuntimeError(f"NoiseTape: asked for block {self.index} of {shape}; the tape "
                               f"holds {len(self.blocks)}")  # fmt: skip
        block = self.blocks[self.index]
        if tuple(block.shape[1:]) != shape:
            raise RuntimeError(f"NoiseTape: asked for {shape} at block {self.index}, the tape "
                               f"holds {tuple(block.shape[1:])}")  # fmt: skip
        self.index += 1
        return block

    def get_state(self) -> tuple[int, int, Any]:
        """(position of a replaying tape, blocks recorded, the source's state)."""
        source = None if self.source is None else self.source.get_state()
        return self.index, len(self.blocks), source

    def set_state(self, state: tuple[int, int, Any]) -> None:
        """Back to ``state``: a recording tape forgets the blocks drawn since and puts its source
        back, so it records the same calls again."""
        self.index, recorded, source = state
        if self.source is not None:
            del self.blocks[recorded:], self.calls[recorded:]
            self.source.set_state(source)

    def replay(self) -> NoiseTape:
        """A tape that hands back this tape's blocks from the first."""
        return NoiseTape(self.blocks)
