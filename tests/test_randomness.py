"""The noise sources of core.randomness: every one can be put back to an earlier state."""

from __future__ import annotations

import pytest
import torch

from vbnn.core.randomness import (
    AHEAD_STEPS,
    PARALLEL_DRAWS,
    ModelGenerators,
    NoiseTape,
    TorchNoise,
)


def replaying_tape() -> NoiseTape:
    generator = torch.Generator().manual_seed(4)
    return NoiseTape([torch.randn(2, 3, generator=generator) for _ in range(3)])


NOISE_SOURCES = {
    "model-generators": lambda: ModelGenerators([1, 2]),
    "torch-global": lambda: TorchNoise(2),
    "torch-generator": lambda: TorchNoise(2, torch.Generator().manual_seed(3)),
    "recording-tape": lambda: NoiseTape(source=ModelGenerators([1, 2])),
    "replaying-tape": replaying_tape,
}


@pytest.mark.parametrize("name", list(NOISE_SOURCES))
def test_every_noise_source_repeats_its_draws_after_set_state(name: str) -> None:
    noise = NOISE_SOURCES[name]()
    noise.randn(3)
    state = noise.get_state()
    first = [noise.randn(3), noise.randn(3)]
    noise.set_state(state)
    again = [noise.randn(3), noise.randn(3)]
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], first[1])


def test_a_rewound_recording_tape_records_each_call_once() -> None:
    tape = NoiseTape(source=ModelGenerators([1]))
    tape.randn(3)
    state = tape.get_state()
    drawn = tape.randn(4, dtype=torch.float64)
    tape.set_state(state)
    tape.randn(4, dtype=torch.float64)
    assert tape.calls == [((3,), torch.float32), ((4,), torch.float64)]
    replay = tape.replay()
    replay.randn(3)
    assert torch.equal(replay.randn(4), drawn)


def test_model_generators_state_is_one_stream_per_model_and_not_taken_while_drawing_ahead():
    generators = ModelGenerators([1, 2])
    with pytest.raises(ValueError, match="1 streams for 2 models"):
        generators.set_state(ModelGenerators([1]).get_state())
    ahead = pytest.raises(RuntimeError, match="get_state: not while drawing ahead")
    with generators.drawing_ahead(), ahead:
        generators.get_state()


def test_drawing_ahead_on_the_calling_thread_draws_the_background_threads_numbers():
    """``drawing_ahead(background=False)`` draws each look-ahead block when it is queued: the
    same blocks in the same order on every model's stream as the background thread, so the
    same numbers, for interleaved requests of several shapes."""
    requests = [(3, 2), (5,), (3, 2), (5,), (3, 2), (4, 1), (5,)]
    blocks = {}
    for background in (True, False):
        generators = ModelGenerators([11, 12, 13])
        with generators.drawing_ahead(background):
            blocks[background] = [generators.randn(*shape) for shape in requests]
    for threaded, inline in zip(blocks[True], blocks[False], strict=True):
        assert torch.equal(threaded, inline)


def test_a_large_block_drawn_on_several_threads_is_the_one_drawn_on_one() -> None:
    """Blocks of ``PARALLEL_DRAWS`` numbers or more fill each model's row on its own thread when
    torch has several: the numbers are those of the serial loop, whatever the thread count (the
    test sets the threads itself, as ``pytest -n`` runs its workers on one)."""
    shape = (PARALLEL_DRAWS // 2 + 1,)  # with 2 models, just over the threshold
    before = torch.get_num_threads()
    try:
        blocks = {}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            generators = ModelGenerators([1, 2])
            blocks[threads] = [generators.randn(*shape), generators.randn(*shape)]
    finally:
        torch.set_num_threads(before)
    for parallel, serial in zip(blocks[2], blocks[1], strict=True):
        assert torch.equal(parallel, serial)
    alone = ModelGenerators([2]).randn(*shape)[0]
    assert torch.equal(blocks[2][0][1], alone)  # model 1's row is its own stream's


@pytest.mark.parametrize("steps", [1, 2, 3, AHEAD_STEPS + 2, 2 * AHEAD_STEPS + 1])
@pytest.mark.parametrize("background", [True, False])
def test_next_step_queues_steps_and_draws_the_numbers_of_one_block_at_a_time(steps, background):
    """A training loop that calls ``next_step(steps_after)`` before each step has its blocks
    queued ``AHEAD_STEPS`` steps at a time, yet every model's stream yields the same blocks, in
    the same order, as block-by-block look-ahead, and ends in the same state (the blocks of the
    step after the last are drawn either way). Each step asks for three shapes, one of them twice
    (two layers of equal width)."""
    asked = [(3, 2), (5,), (3, 2), (4,)]
    blocks, states = {}, {}
    for stepped in (True, False):
        generators = ModelGenerators([21, 22])
        with generators.drawing_ahead(background):
            drawn = []
            for step in range(1, steps + 1):
                if stepped:
                    generators.next_step(steps - step)
                drawn += [generators.randn(*shape) for shape in asked]
        blocks[stepped], states[stepped] = drawn, generators.get_state()
    for grouped, single in zip(blocks[True], blocks[False], strict=True):
        assert torch.equal(grouped, single)
    for grouped, single in zip(states[True], states[False], strict=True):
        assert torch.equal(grouped, single)
    with pytest.raises(RuntimeError, match="next_step: only inside drawing_ahead"):
        ModelGenerators([1]).next_step()
