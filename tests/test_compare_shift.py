"""``vbnn.compare(network, ..., shift=...)``: the rows of intensity 0 are the in-distribution
metrics exactly, a shifted row is the entry's score on the shifted copy made by hand, the shifts
key the stored runs, the figure, and the errors before any training."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import vbnn
from vbnn.comparison.config import NetworkConfig
from vbnn.comparison.entries import NetworkSource, train_entry
from vbnn.comparison.folds import Task
from vbnn.comparison.network import prepare, score
from vbnn.comparison.shifts import ShiftedTests, shift_seed
from vbnn.data.corruptions import rotate
from vbnn.data.shift import Normalisation, Shift

FAST = {"epochs": 2, "batch_size": 32, "test_samples": 4}
SHIFTS = [Shift("rotation", 0), Shift("rotation", 90), Shift("gaussian-noise", 0),
          Shift("gaussian-noise", 4)]  # fmt: skip
METRICS = ["log_likelihood", "accuracy", "ece", "brier", "aurc"]


def small_cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 8 * 8, 2))


def pixels(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, 1, 10, 10) pixels in [0, 1]; the class: is the left half brighter than the right."""
    x = torch.rand(rows, 1, 10, 10, generator=torch.Generator().manual_seed(seed))
    return x, (x[..., :5].mean((1, 2, 3)) > x[..., 5:].mean((1, 2, 3))).long()


@pytest.fixture
def one_thread():
    """One torch thread: an entry trained in ``compare`` and by hand must agree exactly."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_intensity_zero_is_in_distribution_and_a_shifted_row_is_its_copy_scored(
    tmp_path: Path, one_thread
) -> None:
    data, test = pixels(80, 0), pixels(30, 1)
    result = vbnn.compare(small_cnn, data, test=test, families=["point", "mf", "point+ts"],
                          shift=SHIFTS, database=tmp_path / "c.sqlite", **FAST)  # fmt: skip
    shifts = result.shifts
    assert len(shifts) == 3 * len(SHIFTS)
    assert list(shifts.columns[:4]) == ["entry", "replicate", "shift", "intensity"]
    for _, row in shifts.iterrows():
        clean = result.folds[result.folds["family"] == row["entry"]].iloc[0]
        same = [row[m] == clean[m] for m in METRICS]
        assert all(same) if row["intensity"] == 0 else not same[0]
    # the rotated and the noisy copy, made by hand, scored by the entry trained by hand
    config = NetworkConfig(**FAST)
    prepared = prepare(small_cnn, data, test, None, ["point"], 1, None, None, config, None)
    noise = SHIFTS[3]
    noisy = noise.apply(test[0], torch.Generator().manual_seed(shift_seed(0, noise)))
    for kind, copy in (("rotation", rotate(test[0], 90)), ("gaussian-noise", noisy)):
        trained = train_entry(NetworkSource(small_cnn), prepared.runs["point"], 0, data, copy,
                              None, False)  # fmt: skip
        expected = score(trained, test[1], Task.CLASSIFICATION, config.level)
        row = shifts[(shifts["entry"] == "point") & (shifts["shift"] == kind)]
        row = row[row["intensity"] > 0].iloc[0]
        assert row["log_likelihood"] == pytest.approx(expected["test_log_likelihood"], abs=1e-9)
        assert row["accuracy"] == pytest.approx(expected["accuracy"], abs=1e-12)


def test_shifts_key_the_runs_and_leave_the_in_distribution_rows(
    tmp_path: Path, entry_trainings
) -> None:
    data, test = pixels(60, 0), pixels(20, 1)
    arguments = {"test": test, "families": ["point", "mf"], "database": tmp_path / "c.sqlite",
                 **FAST}  # fmt: skip
    plain = vbnn.compare(small_cnn, data, **arguments)
    assert plain.shifts is None and len(entry_trainings) == 2
    with pytest.raises(ValueError, match="ran without shift="):
        plain.plot_shift()
    shifted = vbnn.compare(small_cnn, data, shift=SHIFTS[:2], **arguments)
    assert len(entry_trainings) == 4 and shifted.name != plain.name  # not read back as plain
    assert shifted.folds.drop(columns="seconds").equals(plain.folds.drop(columns="seconds"))
    again = vbnn.compare(small_cnn, data, shift=SHIFTS[:2], **arguments)
    assert len(entry_trainings) == 4 and again.shifts.equals(shifted.shifts)
    other = vbnn.compare(small_cnn, data, shift=SHIFTS[1:3], **arguments)
    assert len(entry_trainings) == 6 and other.name != shifted.name
    figure = again.plot_shift(tmp_path / "shift.png")
    assert (tmp_path / "shift.png").stat().st_size > 0 and len(figure.axes) == 4  # 4 metrics
    assert again.plot_shift(metrics=["accuracy"]).axes[0].get_ylabel() == "accuracy"


def test_normalised_images_are_shifted_as_pixels(tmp_path: Path) -> None:
    (x, y), (x_test, y_test) = pixels(60, 0), pixels(20, 1)
    normal = Normalisation(mean=(0.5,), std=(0.25,))
    with pytest.raises(ValueError, match=r"pixels in \[0, 1\].*normalisation=vbnn.data.shift"):
        vbnn.compare(small_cnn, (normal(x), y), test=(normal(x_test), y_test), shift=SHIFTS,
                     families=["point"], **FAST)  # fmt: skip
    result = vbnn.compare(small_cnn, (normal(x), y), test=(normal(x_test), y_test),
                          families=["point"], shift=SHIFTS[:2], normalisation=normal,
                          **FAST)  # fmt: skip
    assert len(result.shifts) == 2
    tests = ShiftedTests((SHIFTS[1],), 0, normal)
    ((_, copy),) = list(tests.copies(normal(x_test)))
    torch.testing.assert_close(copy, normal(rotate(x_test, 90)))


def test_bad_shift_arguments_fail_before_training(entry_trainings) -> None:
    data, test = pixels(40, 0), pixels(10, 1)
    cases = [
        ({"shift": "rotations"}, "give 'ovadia' or a list"),
        ({"shift": []}, "non-empty list"),
        ({"shift": [("blur", 1)]}, r"shift\[0\]=\('blur', 1\)"),
        ({"shift": [SHIFTS[1], SHIFTS[1]]}, r"shift\[1\].*given twice"),
        ({"normalisation": Normalisation((0.5,), (0.25,))}, "applies with shift="),
        ({"shift": SHIFTS, "test": (test[0].flatten(1), test[1])}, r"\(N, C, H, W\)"),
    ]
    for changes, message in cases:
        arguments = {"test": test, "families": ["point"], **FAST} | changes
        network = small_cnn if arguments["test"][0].dim() == 4 else nn.Linear(100, 2)
        given = data if arguments["test"][0].dim() == 4 else (data[0].flatten(1), data[1])
        with pytest.raises(ValueError, match=message):
            vbnn.compare(network, given, **arguments)
    with pytest.raises(ValueError, match="shift and normalisation apply to a network"):
        vbnn.compare("yacht", shift="ovadia")
    assert entry_trainings == []


def test_a_regressor_on_images_is_scored_on_the_shifted_copies_too() -> None:
    (x, _), (x_test, _) = pixels(50, 0), pixels(20, 1)
    y, y_test = x.mean((1, 2, 3)), x_test.mean((1, 2, 3))  # the brightness itself
    shifts = [Shift("brightness", 0), Shift("brightness", 5)]
    result = vbnn.compare(lambda: nn.Sequential(nn.Flatten(), nn.Linear(100, 1)), (x, y),
                          test=(x_test, y_test), families=["point"], shift=shifts,
                          **FAST)  # fmt: skip
    clean, bright = result.shifts.iloc[0], result.shifts.iloc[1]
    for metric in ("log_likelihood", "rmse", "coverage"):
        assert clean[metric] == result.folds[metric].iloc[0]
    assert bright["rmse"] != clean["rmse"]
