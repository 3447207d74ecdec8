"""Standardised tensors for a group of splits of equal size, stacked on the model dimension."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from vbnn.data.uci import RegressionDataset


@dataclass(frozen=True)
class StackedSplits:
    """Splits as (M, N, I) inputs and (M, N) targets, standardised by each split's training stats.

    ``target_scale`` (M,) is the training target's std: multiply a standardised RMSE by it, and
    subtract its log from a standardised log-likelihood, to get original units.
    """

    split_ids: tuple[int, ...]
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    target_scale: torch.Tensor

    def to(self, device: torch.device | str) -> StackedSplits:
        """The same splits with every tensor on ``device`` (itself when they are there)."""
        if self.x_train.device == torch.device(device):
            return self
        return StackedSplits(
            self.split_ids,
            *(t.to(device) for t in (self.x_train, self.y_train, self.x_test, self.y_test)),
            self.target_scale.to(device),
        )


def standard_scale(train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean and the scale of each column of ``train`` (N, ...) over its rows: x -> (x - mean)
    / scale standardises. The scale is the std (ddof 0), and 1 where the std is 0: a constant
    column (naval has some inputs so) is only centred, never divided by zero."""
    mean = train.mean(0)
    std = train.std(0)
    return mean, np.where(std > 0, std, 1.0)


def standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centre and scale both parts by the training part's ``standard_scale``; returns the two
    parts and the scale."""
    mean, scale = standard_scale(train)
    return (train - mean) / scale, (test - mean) / scale, scale


def stack_splits(
    dataset: RegressionDataset, split_ids: Sequence[int], dtype: torch.dtype = torch.float32
) -> StackedSplits:
    """Standardise every split with its own training statistics and stack them.

    Raises:
        ValueError: if the splits differ in training or test size (group them first).
    """
    parts = []
    for k in split_ids:
        train, test = dataset.split(k)
        x_train, x_test, _ = standardise(dataset.inputs[train], dataset.inputs[test])
        y_train, y_test, y_std = standardise(dataset.target[train], dataset.target[test])
        parts.append((x_train, y_train, x_test, y_test, float(y_std)))
    shapes = {(p[0].shape, p[2].shape) for p in parts}
    if len(shapes) != 1:
        raise ValueError(f"splits {list(split_ids)} differ in size {shapes}: stack equal sizes")

    def stack(i: int) -> torch.Tensor:
        return torch.as_tensor(np.stack([p[i] for p in parts]), dtype=dtype)

    return StackedSplits(
        split_ids=tuple(split_ids),
        x_train=stack(0),
        y_train=stack(1),
        x_test=stack(2),
        y_test=stack(3),
        target_scale=torch.tensor([p[4] for p in parts], dtype=dtype),
    )


def group_by_size(dataset: RegressionDataset, split_ids: Sequence[int]) -> list[list[int]]:
    """Split ids grouped by (train size, test size), in first-seen order."""
    groups: dict[tuple[int, int], list[int]] = {}
    for k in split_ids:
        train, test = dataset.split(k)
        groups.setdefault((len(train), len(test)), []).append(k)
    return list(groups.values())


def parse_splits(text: str | None) -> list[int] | None:
    """'0-19', '3', '0,4,7' or '0-4,10' -> split ids; None -> all."""
    if text is None:
        return None
    ids: list[int] = []
    try:
        for part in text.split(","):
            if "-" in part:
                low, high = (int(v) for v in part.split("-", 1))
                if high < low:
                    raise ValueError
                ids.extend(range(low, high + 1))
            else:
                ids.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--splits {text!r}: expected e.g. '0-19', '3' or '0,4,7'"
        ) from None
    if any(k < 0 for k in ids):
        raise argparse.ArgumentTypeError(f"--splits {text!r}: split ids must be >= 0")
    return ids
