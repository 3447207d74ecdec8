"""``compare(network, ..., shift=...)``: every entry scored on shifted copies of the test inputs.

Ovadia et al. 2019 ask how a method's accuracy and calibration hold up as the test inputs drift
from the training ones: test images rotated by 0 to 180 degrees, and under Hendrycks &
Dietterich 2019's corruptions at intensities 0 to 5 (``vbnn.data.shift``). Each (entry,
replicate) trains once and draws its predictive on the test inputs and on every shifted copy of
them (``comparison.entries.train_entry``); each copy is scored with the metric table
(``comparison.scores``) and stored with the replicate under the key ``"shift=KIND:INTENSITY
METRIC"`` (``shift_key``), which ``shift_frame`` reads back as one row per (entry, replicate,
shift kind, intensity).

The copies are made in pixel space [0, 1]: images given normalised, x' = (p - mean) / std, are
mapped back to pixels p (``Normalisation.invert``), shifted, and normalised again. A shift of
intensity 0 is the identity: its copy is the test inputs themselves, so its row equals the
replicate's in-distribution metrics exactly. A corruption that draws noise draws from its own
generator, seeded by (the comparison's seed, the shift), so every entry and every replicate
sees the same corrupted copy of the same images.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from vbnn.core.randomness import derive_seed
from vbnn.data.shift import Normalisation, Shift, ShiftKind, ovadia_shifts

PREFIX = "shift="
PIXEL_TOLERANCE = 1e-4  # pixels given normalised come back from float arithmetic a hair outside


def shift_key(shift: Shift, metric: str) -> str:
    """The key of ``metric`` on the copy shifted by ``shift`` in a replicate's metrics."""
    return f"{PREFIX}{shift.kind.value}:{shift.intensity} {metric}"


def resolve_shifts(shift: Any) -> tuple[Shift, ...] | None:
    """``compare``'s ``shift=``: None, "ovadia" (``ovadia_shifts()``) or a sequence of ``Shift``
    (or (kind, intensity) pairs), as a tuple of distinct shifts.

    Raises:
        ValueError: another string or type, an empty sequence, a bad shift (its position named)
            or one given twice.
    """
    if shift is None:
        return None
    if isinstance(shift, str):
        if shift != "ovadia":
            raise ValueError(f"shift={shift!r}: give 'ovadia' or a list of vbnn.data.shift.Shift")
        return ovadia_shifts()
    if not isinstance(shift, Sequence) or not shift:
        raise ValueError(
            f"shift={shift!r}: give 'ovadia' or a non-empty list of vbnn.data.shift.Shift"
        )
    shifts = []
    for position, item in enumerate(shift):
        try:
            chosen = item if isinstance(item, Shift) else Shift(*item)
        except (TypeError, ValueError) as error:
            raise ValueError(f"shift[{position}]={item!r}: {error}") from error
        if chosen in shifts:
            raise ValueError(f"shift[{position}]={chosen}: given twice")
        shifts.append(chosen)
    return tuple(shifts)


def shift_seed(seed: int, shift: Shift) -> int:
    """The seed of the generator of ``shift``'s noise: (the comparison's seed, the shift)."""
    return derive_seed(seed, list(ShiftKind).index(shift.kind) * 1000 + shift.intensity, "shift")


@dataclass(frozen=True)
class ShiftedTests:
    """The shifted copies of a comparison's test inputs (module docstring).

    Attributes:
        shifts: the shifts, in order.
        seed: the comparison's seed (``shift_seed``).
        normalisation: how the given images were normalised (None: they are pixels in [0, 1]).
    """

    shifts: tuple[Shift, ...]
    seed: int
    normalisation: Normalisation | None = None

    @property
    def key(self) -> str:
        """What keys the stored runs: the shifts and the normalisation."""
        names = [f"{s.kind.value}:{s.intensity}" for s in self.shifts]
        return repr({"shift": names, "normalisation": self.normalisation})

    def check(self, images: Any, name: str) -> None:
        """Raise ``ValueError`` unless ``images`` are a floating (N, C, H, W) batch of pixels in
        [0, 1] (after inverting the normalisation); the message says how to pass one."""
        if not isinstance(images, torch.Tensor) or not images.is_floating_point():
            kind = type(images).__name__ if not isinstance(images, torch.Tensor) else images.dtype
            raise ValueError(f"shift: {name} must be floating images (N, C, H, W); got {kind}")
        if images.dim() != 4:
            raise ValueError(
                f"shift: {name} must be images (N, C, H, W); got shape {tuple(images.shape)}"
            )
        pixels = images if self.normalisation is None else self.normalisation.invert(images)
        low, high = float(pixels.min()), float(pixels.max())
        if low < -PIXEL_TOLERANCE or high > 1 + PIXEL_TOLERANCE:
            given = "" if self.normalisation is None else f" after inverting {self.normalisation}"
            raise ValueError(
                f"shift: {name} must be pixels in [0, 1]{given}; found [{low:.4g}, {high:.4g}]. "
                "Images normalised per channel, (p - mean) / std: pass normalisation="
                "vbnn.data.shift.Normalisation(mean=(...), std=(...)) and the shifts are made on "
                "the pixels and normalised again"
            )

    def copies(self, images: torch.Tensor) -> Iterator[tuple[Shift, torch.Tensor]]:
        """(shift, the shifted copy of ``images``) for each shift, one copy at a time; intensity
        0: ``images`` themselves."""
        pixels = None
        for shift in self.shifts:
            if shift.intensity == 0:
                yield shift, images
                continue
            if pixels is None:
                pixels = images if self.normalisation is None else self.normalisation.invert(images)
                pixels = pixels.clamp(0, 1)
            generator = None
            if shift.random:
                generator = torch.Generator(pixels.device).manual_seed(shift_seed(self.seed, shift))
            shifted = shift.apply(pixels, generator)
            yield shift, shifted if self.normalisation is None else self.normalisation(shifted)


def shift_frame(rows: Sequence[Mapping[str, Any]], shifts: Sequence[Shift]) -> pd.DataFrame:
    """One row per (entry, replicate, shift) from the rows of ``run._replicate_rows``: columns
    ``entry``, ``replicate``, ``shift`` (the kind's value), ``intensity`` and each metric of
    the shifted copy (``log_likelihood``, ``accuracy``, ``ece``, ...)."""
    frame = []
    for row in rows:
        for shift in shifts:
            start = f"{PREFIX}{shift.kind.value}:{shift.intensity} "
            values = {k[len(start) :]: v for k, v in row.items() if k.startswith(start)}
            likelihood = values.pop("test_log_likelihood", float("nan"))
            frame.append(
                {
                    "entry": row["family"],
                    "replicate": row["fold"],
                    "shift": shift.kind.value,
                    "intensity": shift.intensity,
                    "log_likelihood": likelihood,
                    **values,
                }
            )
    return pd.DataFrame(frame)
