"""The data of a comparison: the task (given or inferred, with its reason), the folds, the checks.

Every check here runs before any training, and every error names the argument, the value and,
where there is one, the position at fault.

K folds partition the rows: a seeded permutation dealt round-robin into K test parts, so the
test parts differ in size by at most one row. For classification the deal goes class by class
(stratified), so every class with at least two rows appears in at least two test parts and so in
every training part.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Sequence
from enum import Enum

import numpy as np

from vbnn.core.randomness import derive_seed

Split = tuple[np.ndarray, np.ndarray]  # (training rows, test rows), 0-based row indices

# A target of integers with at most this many distinct values is taken for class labels.
MAX_INFERRED_CLASSES = 20


class Task(str, Enum):
    REGRESSION = "regression"
    CLASSIFICATION = "classification"


def infer_task(target: np.ndarray) -> tuple[Task, str]:
    """(task, why) from the target's values.

    Classification when every value is an integer and there are at most
    ``MAX_INFERRED_CLASSES`` distinct ones; regression otherwise.
    """
    values = np.unique(target)
    if not np.all(values == np.round(values)):
        return Task.REGRESSION, "the target holds non-integer values"
    if len(values) > MAX_INFERRED_CLASSES:
        return Task.REGRESSION, (
            f"the target holds {len(values)} distinct integers (more than "
            f"{MAX_INFERRED_CLASSES} classes)"
        )
    shown = ", ".join(f"{v:g}" for v in values[:6]) + (", ..." if len(values) > 6 else "")
    return Task.CLASSIFICATION, f"the target holds {len(values)} distinct integers ({shown})"


def check_labels(target: np.ndarray, folds: int | None) -> None:
    """Classification targets: at least two classes, and every class on at least two rows when
    K folds are dealt (so that every training fold holds every class).

    Raises:
        ValueError: one class, or a class on a single row.
    """
    values, counts = np.unique(target, return_counts=True)
    if len(values) < 2:
        raise ValueError(f"y: every row holds the class {values[0]:g}; classification needs two")
    if folds is not None and counts.min() < 2:
        single = values[counts.argmin()]
        row = int(np.flatnonzero(target == single)[0])
        raise ValueError(
            f"y: class {single:g} appears on one row only (row {row}); with K folds a training "
            "fold would lack it: drop the row or give the splits"
        )


def k_folds(target: np.ndarray, folds: int, task: Task, seed: int) -> tuple[Split, ...]:
    """K (training rows, test rows) splits whose test parts partition the rows.

    Raises:
        ValueError: K < 2, or fewer than two rows per test part (N < 2K).
    """
    rows = len(target)
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ValueError(f"folds={folds!r}: K folds need an integer K >= 2")
    if rows < 2 * folds:
        raise ValueError(
            f"folds={folds}: {rows} rows are too few for {folds} folds (each test fold needs at "
            f"least 2 rows, so at least {2 * folds} rows); use fewer folds"
        )
    order = np.random.default_rng(derive_seed(seed, 0, "folds")).permutation(rows)
    if task is Task.CLASSIFICATION:  # stratified: each class dealt round-robin in turn
        order = np.concatenate([order[target[order] == c] for c in np.unique(target)])
    part = np.empty(rows, dtype=np.int64)
    part[order] = np.arange(rows) % folds
    return tuple((np.flatnonzero(part != k), np.flatnonzero(part == k)) for k in range(folds))


def check_splits(splits: Sequence[Split], rows: int) -> tuple[Split, ...]:
    """Given splits as integer arrays, checked: in range, training and test parts disjoint and
    non-empty.

    Raises:
        ValueError: naming the split and the fault.
    """
    checked = []
    if len(splits) == 0:
        raise ValueError("splits: no splits given")
    for k, pair in enumerate(splits):
        if len(pair) != 2:
            raise ValueError(f"splits[{k}]: expected (training rows, test rows), got {pair!r}")
        train, test = (np.asarray(part, dtype=np.int64).ravel() for part in pair)
        for name, part in (("training", train), ("test", test)):
            if part.size == 0:
                raise ValueError(f"splits[{k}]: no {name} rows")
            if part.min() < 0 or part.max() >= rows:
                bad = int(part[(part < 0) | (part >= rows)][0])
                raise ValueError(f"splits[{k}]: {name} row {bad} is outside 0-{rows - 1}")
        shared = np.intersect1d(train, test)
        if shared.size:
            raise ValueError(f"splits[{k}]: row {int(shared[0])} is both a training and a test row")
        if train.size < 2:
            raise ValueError(f"splits[{k}]: {train.size} training row; training needs two")
        checked.append((train, test))
    return tuple(checked)


def splits_from_column(fold: np.ndarray) -> tuple[Split, ...]:
    """Splits from a column naming each row's fold: split k tests the rows of the k-th fold
    value (in sorted order) and trains on the others."""
    values = np.unique(fold)
    if len(values) < 2:
        raise ValueError(f"the fold column holds one value ({values[0]:g}); it needs two or more")
    return tuple((np.flatnonzero(fold != v), np.flatnonzero(fold == v)) for v in values)


def check_classes_in_training(target: np.ndarray, splits: Sequence[Split]) -> None:
    """Classification: every class must appear in every training part.

    Raises:
        ValueError: naming the split and the missing class.
    """
    classes = np.unique(target)
    for k, (train, _) in enumerate(splits):
        missing = np.setdiff1d(classes, target[train])
        if missing.size:
            raise ValueError(
                f"splits[{k}]: its training rows lack class {missing[0]:g}; every training part "
                "needs every class"
            )


class UnseenClassWarning(UserWarning):
    """Test labels hold a class that the training labels they are paired with do not: the
    network never trained on it, and its test metrics score those examples all the same."""


def warn_unseen_classes(
    target: np.ndarray,
    replicates: Sequence[tuple[np.ndarray, np.ndarray | None]],
    test_target: np.ndarray | None = None,
) -> None:
    """An ``UnseenClassWarning`` when the test labels of a replicate hold classes its training
    labels lack, naming them and how many test examples carry them.

    Args:
        target: the labels (N,) the replicates' rows index.
        replicates: (training rows, test rows) per replicate; test rows None: ``test_target``.
        test_target: the labels of a separate test set.
    """
    found = []
    for k, (train, held) in enumerate(replicates):
        tested = test_target if held is None else target[held]
        unseen = np.setdiff1d(tested, target[train])
        if unseen.size:
            found.append((k, unseen.tolist(), int(np.isin(tested, unseen).sum()), len(tested)))
    if not found:
        return
    k, classes, count, total = found[0]
    what = f"{len(classes)} class(es) absent from the training labels, {classes}"
    if test_target is not None:
        message = f"test: y_test holds {what}, in {count} of {total} test examples"
    else:
        message = (
            f"{len(found)} of {len(replicates)} replicates test on classes absent from their "
            f"training rows; replicate {k}'s test rows hold {what}, in {count} of {total}"
        )
    warnings.warn(
        f"{message}: the networks never train on them, yet their test metrics count them",
        UnseenClassWarning,
        stacklevel=5,  # compare's caller (through prepare and _compare_network)
    )


def data_key(
    label: str,
    inputs: np.ndarray,
    target: np.ndarray,
    splits: Sequence[Split],
    settings: str = "",
) -> str:
    """The name a comparison's runs and searches are stored under: ``label`` and 12 hex digits of
    SHA-256 over the data, the splits and ``settings`` (the comparison's settings as text), so
    that other data, other folds or other settings (training length, search budget, interval
    level, ...) never resume these runs or their searches."""
    digest = hashlib.sha256(settings.encode())
    for array in (inputs, target, *(part for pair in splits for part in pair)):
        digest.update(np.ascontiguousarray(array).tobytes())
        digest.update(str(array.shape).encode())
    return f"{label}-{digest.hexdigest()[:12]}"
