"""Dataset shift: rotations and corruptions against closed forms and the libraries they follow."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from vbnn.data import corruptions
from vbnn.data.shift import (
    Normalisation,
    Shift,
    ShiftKind,
    covariate_shift,
    ovadia_shifts,
    shifted_copies,
)


def _images(seed: int = 0, shape=(4, 1, 28, 28)) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("kind", list(ShiftKind))
def test_intensity_zero_is_an_exact_copy(kind: ShiftKind) -> None:
    images = _images()
    shifted = Shift(kind, 0).apply(images, torch.Generator().manual_seed(1))
    assert torch.equal(shifted, images) and shifted.data_ptr() != images.data_ptr()
    assert torch.equal(corruptions.rotate(images, 360), images)


def test_rotation_by_quarter_turns_is_rot90() -> None:
    """Pixel centres of a square image land on pixel centres: only cos(pi / 2) ~ 6e-17 is off."""
    images = _images(shape=(3, 2, 7, 7))
    for degrees, turns in ((90, 1), (180, 2), (270, 3), (-90, -1)):
        expected = torch.rot90(images, turns, (-2, -1))
        torch.testing.assert_close(
            corruptions.rotate(images, degrees), expected, atol=1e-12, rtol=0
        )
    wide = _images(shape=(2, 1, 4, 6))
    twice = corruptions.rotate(corruptions.rotate(wide, 180), 180)
    torch.testing.assert_close(twice, wide, atol=1e-12, rtol=0)


def test_rotation_of_an_affine_image_is_the_function_at_the_rotated_point() -> None:
    """Bilinear interpolation is exact for f(u, v) = a + b u + c v: inside the image the
    rotated copy is f(R p), R = [[cos, -sin], [sin, cos]], p the centred pixel coordinates."""
    size, angle = 29, 30.0
    centred = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    v, u = torch.meshgrid(centred, centred, indexing="ij")

    def image(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return 0.5 + 0.01 * u + 0.005 * v

    rotated = corruptions.rotate(image(u, v)[None, None], angle)[0, 0]
    cosine, sine = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    source_u, source_v = cosine * u - sine * v, sine * u + cosine * v
    inside = (source_u.abs() <= (size - 1) / 2) & (source_v.abs() <= (size - 1) / 2)
    assert inside.sum() > size**2 / 2
    expected = image(source_u, source_v)
    torch.testing.assert_close(rotated[inside], expected[inside], atol=1e-12, rtol=0)
    assert bool((rotated[~inside] < expected[~inside] + 1e-12).all())  # zeros mixed in


@pytest.mark.parametrize("kind", sorted(set(ShiftKind) - {ShiftKind.ROTATION}))
def test_corruption_severity_is_monotone(kind: ShiftKind) -> None:
    """The mean squared change grows strictly from intensity 0 to 5."""
    images = _images()
    generator = torch.Generator()
    changes = [
        float(((Shift(kind, level).apply(images, generator) - images) ** 2).mean())
        for level in corruptions.INTENSITIES
    ]
    assert changes[0] == 0.0
    assert all(a < b for a, b in itertools.pairwise(changes)), changes


def test_contrast_and_brightness_closed_forms() -> None:
    images = torch.tensor([[[[0.0, 0.2], [0.4, 1.0]]]], dtype=torch.float64)
    mean = 0.4
    for level, factor in enumerate(corruptions.CONTRAST_FACTOR, start=1):
        expected = (images - mean) * factor + mean
        torch.testing.assert_close(corruptions.contrast(images, level), expected)
    for level, increase in enumerate(corruptions.BRIGHTNESS_INCREASE, start=1):
        assert torch.equal(corruptions.brightness(images, level), (images + increase).clamp(0, 1))


def test_brightness_of_colour_images_is_the_hsv_round_trip() -> None:
    """Raise V of HSV by b, keep H and S (matplotlib's conversions as the reference)."""
    from matplotlib.colors import hsv_to_rgb, rgb_to_hsv

    images = _images(shape=(2, 3, 5, 5))
    images[0, :, 0, 0] = 0.0  # black: becomes the grey b
    for level, increase in enumerate(corruptions.BRIGHTNESS_INCREASE, start=1):
        hsv = rgb_to_hsv(images.permute(0, 2, 3, 1).numpy())
        hsv[..., 2] = np.clip(hsv[..., 2] + increase, 0, 1)
        expected = torch.from_numpy(hsv_to_rgb(hsv)).permute(0, 3, 1, 2)
        torch.testing.assert_close(corruptions.brightness(images, level), expected)


def test_gaussian_blur_is_scipys_gaussian_filter() -> None:
    from scipy.ndimage import gaussian_filter

    images = _images(shape=(2, 3, 28, 28))
    for level, sigma in enumerate(corruptions.GAUSSIAN_BLUR_STD, start=1):
        expected = gaussian_filter(
            images.numpy(), (0, 0, sigma, sigma), mode="nearest", truncate=4.0
        )
        torch.testing.assert_close(
            corruptions.gaussian_blur(images, level), torch.from_numpy(expected)
        )


def test_pixelate_keeps_a_constant_image_and_is_pillows_box_resize() -> None:
    constant = torch.full((2, 1, 28, 28), 0.3, dtype=torch.float64)
    for level in range(1, 6):
        torch.testing.assert_close(
            corruptions.pixelate(constant, level), constant, atol=1e-15, rtol=0
        )
    image_module = pytest.importorskip("PIL.Image")
    images = _images(shape=(2, 1, 28, 28))
    for level, scale in enumerate(corruptions.PIXELATE_SCALE, start=1):
        small = int(28 * scale)
        expected = np.stack(
            [
                np.asarray(
                    image_module.fromarray(image[0].numpy().astype(np.float32))
                    .resize((small, small), image_module.BOX)
                    .resize((28, 28), image_module.BOX)
                )
                for image in images
            ]
        )[:, None]
        torch.testing.assert_close(
            corruptions.pixelate(images, level),
            torch.from_numpy(expected).double(),
            atol=1e-6,
            rtol=0,
        )


def test_noise_is_reproducible_and_has_its_moments() -> None:
    """Same seed, same copy. On a grey 0.5 image (no clamping in reach): Gaussian noise has mean
    0 and std sigma; shot noise has mean 0.5 and variance 0.5 / lambda (5 standard errors)."""
    images = torch.full((50, 1, 28, 28), 0.5, dtype=torch.float64)
    for kind in (ShiftKind.GAUSSIAN_NOISE, ShiftKind.SHOT_NOISE):
        first = Shift(kind, 3).apply(images, torch.Generator().manual_seed(7))
        again = Shift(kind, 3).apply(images, torch.Generator().manual_seed(7))
        other = Shift(kind, 3).apply(images, torch.Generator().manual_seed(8))
        assert torch.equal(first, again) and not torch.equal(first, other)
    count = images.numel()
    sigma = corruptions.GAUSSIAN_NOISE_STD[4]
    noise = Shift(ShiftKind.GAUSSIAN_NOISE, 5).apply(images, torch.Generator().manual_seed(3))
    assert abs(float((noise - 0.5).mean())) < 5 * sigma / math.sqrt(count)
    assert abs(float((noise - 0.5).std()) - sigma) < 5 * sigma / math.sqrt(2 * count)
    rate = corruptions.SHOT_NOISE_RATE[4]
    shot = Shift(ShiftKind.SHOT_NOISE, 5).apply(images, torch.Generator().manual_seed(3))
    variance = 0.5 / rate
    assert abs(float(shot.mean()) - 0.5) < 5 * math.sqrt(variance / count)
    assert abs(float(shot.var()) / variance - 1) < 5 * math.sqrt(2 / count)
    with pytest.raises(ValueError, match=r"needs a torch\.Generator"):
        corruptions.gaussian_noise(images, 1, None)


def test_shifted_copies_in_order_and_normalised() -> None:
    images = _images()
    normalisation = Normalisation((0.1307,), (0.3081,))
    shifts = ovadia_shifts()
    assert len(shifts) == 13 + 6 * 6 and shifts[12] == Shift("rotation", 180)
    chosen = [Shift("rotation", 90), Shift("gaussian-noise", 2), ("contrast", 5)]
    copies = list(shifted_copies(images, chosen, torch.Generator().manual_seed(0), normalisation))
    assert [shift for shift, _ in copies] == [
        Shift(ShiftKind(k), i)
        for k, i in [("rotation", 90), ("gaussian-noise", 2), ("contrast", 5)]
    ]
    expected = normalisation(corruptions.rotate(images, 90))
    torch.testing.assert_close(copies[0][1], expected)
    torch.testing.assert_close(normalisation.invert(copies[2][1]), corruptions.contrast(images, 5))
    with pytest.raises(ValueError, match=r"is random: pass a torch\.Generator"):
        list(shifted_copies(images, chosen))
    with pytest.raises(ValueError, match=r"pixels in \[0, 1\].*invert a normalisation"):
        list(shifted_copies(normalisation(images), chosen[:1]))
    with pytest.raises(ValueError, match=r"intensity of contrast must lie in 0\.\.5; got 6"):
        Shift("contrast", 6)
    with pytest.raises(ValueError, match="'blur' is not a valid ShiftKind"):
        Shift("blur", 1)
    with pytest.raises(ValueError, match=r"intensity must be an integer; got 1\.5"):
        Shift("pixelate", 1.5)
    assert Shift("pixelate", np.int64(2)) == Shift(ShiftKind.PIXELATE, 2)


def test_covariate_shift_moves_named_columns_by_training_stds() -> None:
    train = torch.tensor([[0.0, 1.0, 5.0], [2.0, 3.0, 5.0], [4.0, 8.0, 5.0]])
    test = torch.zeros(2, 3)
    std = train[:, 1].std(correction=0)
    shifted = covariate_shift(test, train, ["b", 0], 2.0, names=["a", "b", "c"])
    expected = torch.stack(
        [torch.full((2,), 2.0 * math.sqrt(8 / 3)), 2.0 * std.expand(2), torch.zeros(2)], 1
    )
    torch.testing.assert_close(shifted, expected)
    assert torch.equal(test, torch.zeros(2, 3))  # the input is left as it was
    with pytest.raises(ValueError, match="column 'd' is not among the names"):
        covariate_shift(test, train, ["d"], 1.0, names=["a", "b", "c"])
    with pytest.raises(ValueError, match=r"column 3 is not an index in 0\.\.2"):
        covariate_shift(test, train, [3], 1.0)


def test_shift_figure_draws_the_mean_of_each_entry_per_intensity(tmp_path) -> None:
    import pandas as pd

    from vbnn.plots import plot_shift

    rows = [
        {
            "entry": entry,
            "shift": shift,
            "intensity": level,
            "seed": seed,
            "accuracy": 1.0 - 0.1 * level * (1 + (entry == "mf")) + 0.01 * seed,
            "nll": 0.2 * level + seed,
            "ece": 0.01 * level,
            "brier": 0.05 * level,
        }
        for entry in ("mf", "ensemble")
        for shift, levels in (("rotation", (0, 15, 30)), ("contrast", (0, 1, 2)))
        for level in levels
        for seed in (0, 1)
    ]
    figure = plot_shift(pd.DataFrame(rows), path=tmp_path / "shift.png")
    axes = np.array(figure.axes).reshape(4, 2)
    assert [axis.get_ylabel() for axis in axes[:, 0]] == ["accuracy", "NLL", "ECE", "Brier"]
    assert axes[0, 1].get_xlabel() == "contrast intensity"
    curves = axes[0, 0].containers  # one errorbar per entry, in the frame's order
    assert [curve.get_label() for curve in curves] == ["mf", "ensemble"]
    mf, ensemble = (curve.lines[0] for curve in curves)
    np.testing.assert_array_equal(mf.get_xdata(), [0, 15, 30])
    np.testing.assert_allclose(mf.get_ydata(), [1.005, 1.005 - 3.0, 1.005 - 6.0])
    np.testing.assert_allclose(ensemble.get_ydata(), [1.005, 1.005 - 1.5, 1.005 - 3.0])
    assert (tmp_path / "shift.png").read_bytes().startswith(b"\x89PNG")
    with pytest.raises(ValueError, match=r"metric columns \['auroc'\] not in"):
        plot_shift(pd.DataFrame(rows), metrics=["auroc"])
