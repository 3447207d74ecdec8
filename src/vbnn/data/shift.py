"""Dataset shift: shifted copies of a test set, for accuracy and calibration against intensity.

Ovadia et al. 2019 score every method on the test images rotated by 0 to 180 degrees and under
Hendrycks & Dietterich 2019's corruptions at intensities 1 to 5 (``vbnn.data.corruptions``), and
on tables under a covariate shift. A ``Shift`` names one such copy; ``shifted_copies`` yields
them for a list of shifts. Images are shifted in pixel space [0, 1], then normalised as the
model's data loader does (``Normalisation``), if it does: ``load_images`` and ``load_cifar``
return pixels in [0, 1] without normalisation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from numbers import Integral

import torch

from vbnn.data import corruptions
from vbnn.data.corruptions import check_images


class ShiftKind(str, Enum):
    """What a shift does to an image; ``Shift.intensity`` says how much."""

    ROTATION = "rotation"
    GAUSSIAN_NOISE = "gaussian-noise"
    SHOT_NOISE = "shot-noise"
    GAUSSIAN_BLUR = "gaussian-blur"
    CONTRAST = "contrast"
    BRIGHTNESS = "brightness"
    PIXELATE = "pixelate"


RANDOM_KINDS = frozenset({ShiftKind.GAUSSIAN_NOISE, ShiftKind.SHOT_NOISE})
CORRUPTIONS: dict[ShiftKind, Callable[..., torch.Tensor]] = {
    ShiftKind.GAUSSIAN_NOISE: corruptions.gaussian_noise,
    ShiftKind.SHOT_NOISE: corruptions.shot_noise,
    ShiftKind.GAUSSIAN_BLUR: corruptions.gaussian_blur,
    ShiftKind.CONTRAST: corruptions.contrast,
    ShiftKind.BRIGHTNESS: corruptions.brightness,
    ShiftKind.PIXELATE: corruptions.pixelate,
}
ROTATION_DEGREES = tuple(range(0, 181, 15))  # Ovadia et al. 2019's rotated MNIST


@dataclass(frozen=True)
class Shift:
    """One shifted copy of a test set.

    Attributes:
        kind: the ``ShiftKind`` (or its value, e.g. "gaussian-blur").
        intensity: for a rotation, the angle in whole degrees in [0, 360), counter-clockwise;
            for a corruption, the severity 0 (none) to 5.
    """

    kind: ShiftKind
    intensity: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ShiftKind(self.kind))
        highest = 359 if self.kind is ShiftKind.ROTATION else 5
        if isinstance(self.intensity, bool) or not isinstance(self.intensity, Integral):
            raise ValueError(f"Shift intensity must be an integer; got {self.intensity!r}")
        object.__setattr__(self, "intensity", int(self.intensity))
        if not 0 <= self.intensity <= highest:
            raise ValueError(
                f"Shift intensity of {self.kind.value} must lie in 0..{highest}; "
                f"got {self.intensity}"
            )

    @property
    def random(self) -> bool:
        """Whether applying it draws random numbers (it then needs a generator)."""
        return self.kind in RANDOM_KINDS and self.intensity > 0

    def apply(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The shifted copy of ``images`` (N, C, H, W) in [0, 1]; ``generator`` (on the images'
        device) for the random kinds."""
        if self.kind is ShiftKind.ROTATION:
            return corruptions.rotate(images, self.intensity)
        if self.kind in RANDOM_KINDS:
            return CORRUPTIONS[self.kind](images, self.intensity, generator)
        return CORRUPTIONS[self.kind](images, self.intensity)


def ovadia_shifts(kinds: Iterable[ShiftKind | str] | None = None) -> tuple[Shift, ...]:
    """The shifts of Ovadia et al. 2019 for image sets: rotations by ``ROTATION_DEGREES`` and
    each corruption at intensities 0 to 5.

    Each kind starts at its own intensity 0, the unshifted set, so that every curve starts at
    the clean score (the unshifted set is then evaluated once per kind).

    Args:
        kinds: the kinds to include; None: every ``ShiftKind``.
    """
    chosen = list(ShiftKind) if kinds is None else [ShiftKind(kind) for kind in kinds]
    shifts = []
    for kind in chosen:
        levels = ROTATION_DEGREES if kind is ShiftKind.ROTATION else corruptions.INTENSITIES
        shifts.extend(Shift(kind, level) for level in levels)
    return tuple(shifts)


@dataclass(frozen=True)
class Normalisation:
    """x -> (x - mean_c) / std_c per channel c, as a data loader normalises pixels.

    Attributes:
        mean: one value per channel (or one for all).
        std: one positive value per channel (or one for all).
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", tuple(float(m) for m in self.mean))
        object.__setattr__(self, "std", tuple(float(s) for s in self.std))
        if len(self.mean) != len(self.std) or not self.mean:
            raise ValueError(f"Normalisation needs as many means {self.mean} as stds {self.std}")
        if min(self.std) <= 0:
            raise ValueError(f"Normalisation std must be positive; got {self.std}")

    def _parameters(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if len(self.mean) not in (1, images.shape[1]):
            raise ValueError(
                f"Normalisation has {len(self.mean)} channels; images {tuple(images.shape)} "
                f"have {images.shape[1]}"
            )
        shape = (1, len(self.mean), 1, 1)
        mean = torch.tensor(self.mean, dtype=images.dtype, device=images.device).view(shape)
        return mean, torch.tensor(self.std, dtype=images.dtype, device=images.device).view(shape)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """Normalise pixels (N, C, H, W)."""
        mean, std = self._parameters(images)
        return (images - mean) / std

    def invert(self, images: torch.Tensor) -> torch.Tensor:
        """Pixels back from normalised images (N, C, H, W): x std_c + mean_c."""
        mean, std = self._parameters(images)
        return images * std + mean


def shifted_copies(
    images: torch.Tensor,
    shifts: Sequence[Shift],
    generator: torch.Generator | None = None,
    normalise: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> Iterator[tuple[Shift, torch.Tensor]]:
    """Yield (shift, shifted images) for each shift in order, one copy at a time.

    The random shifts draw from ``generator`` in the order of ``shifts``: the same seed and list
    give the same copies.

    Args:
        images: (N, C, H, W) test pixels in [0, 1] (``Normalisation.invert`` first if they are
            normalised).
        shifts: the shifts, e.g. ``ovadia_shifts()``.
        generator: on the images' device; needed when a shift is random.
        normalise: applied to each shifted copy (the data loader's normalisation), or None.

    Raises:
        ValueError: images not in [0, 1]; a random shift without a generator (before any copy).
    """
    check_images(images)
    shifts = [shift if isinstance(shift, Shift) else Shift(*shift) for shift in shifts]
    if generator is None and (random := [s for s in shifts if s.random]):
        raise ValueError(f"{random[0]} is random: pass a torch.Generator")
    for shift in shifts:
        shifted = shift.apply(images, generator)
        yield shift, shifted if normalise is None else normalise(shifted)


def covariate_shift(
    inputs: torch.Tensor,
    train_inputs: torch.Tensor,
    columns: Sequence[int | str],
    standard_deviations: float,
    names: Sequence[str] | None = None,
) -> torch.Tensor:
    """Tabular covariate shift: x_j + k s_j on each named column j, other columns unchanged.

    s_j is the standard deviation (ddof 0, as ``data.splits.standard_scale``) of column j of the
    training inputs, so k = ``standard_deviations`` reads in the model's standardised units.

    Args:
        inputs: (N, D) test inputs.
        train_inputs: (M, D) training inputs.
        columns: indices, or names found in ``names``.
        standard_deviations: k, any real number (negative moves down).
        names: the D column names, when ``columns`` holds names.

    Returns:
        (N, D) shifted copy.
    """
    if inputs.ndim != 2 or train_inputs.ndim != 2 or inputs.shape[1] != train_inputs.shape[1]:
        raise ValueError(
            f"inputs (N, D) and train_inputs (M, D) must share D; got {tuple(inputs.shape)} "
            f"and {tuple(train_inputs.shape)}"
        )
    indices = [_column_index(column, inputs.shape[1], names) for column in columns]
    shifted = inputs.clone()
    scale = train_inputs[:, indices].to(inputs.dtype).std(0, correction=0)
    shifted[:, indices] += standard_deviations * scale
    return shifted


def _column_index(column: int | str, width: int, names: Sequence[str] | None) -> int:
    if isinstance(column, str):
        if names is None or column not in names:
            raise ValueError(f"column {column!r} is not among the names {names}")
        return list(names).index(column)
    if isinstance(column, bool) or not isinstance(column, int) or not 0 <= column < width:
        raise ValueError(f"column {column!r} is not an index in 0..{width - 1}")
    return column
