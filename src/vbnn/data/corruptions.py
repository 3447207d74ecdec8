"""Image corruptions and rotations for dataset shift, as pure tensor functions.

Every function takes a batch ``images`` (N, C, H, W) of floating pixels in [0, 1] (what
``load_images`` and ``load_cifar`` return, before any normalisation) and returns a new batch of
the same shape and dtype, clamped to [0, 1]. Intensity 0 (and a rotation by a multiple of 360
degrees) returns an exact copy; intensities 1 to 5 follow Hendrycks & Dietterich 2019's
definitions, with the constants of their CIFAR-10-C code (the closest of their sets to 28 x 28
images), applied to any number of channels:

* Gaussian noise: x + sigma eps, eps ~ N(0, 1), sigma = 0.04, 0.06, 0.08, 0.09, 0.10;
* shot noise: Poisson(lambda x) / lambda, lambda = 500, 250, 100, 75, 50;
* Gaussian blur: a Gaussian filter of std 0.4, 0.6, 0.7, 0.8, 1 pixels, truncated at 4 std, the
  border pixels repeated (scikit-image's ``gaussian``);
* contrast: (x - m) c + m with m each image's mean per channel, c = 0.75, 0.5, 0.4, 0.3, 0.15;
* brightness: the value V = max_c x_c of HSV raised by b = 0.05, 0.1, 0.15, 0.2, 0.3 (hue and
  saturation kept): x -> x min(V + b, 1) / V, so clamp(x + b, 0, 1) for one channel;
* pixelate: down to floor(s H) x floor(s W) and back up with Pillow's box filter, s = 0.95, 0.9,
  0.85, 0.75, 0.65.

Pixels stay floating point: their code saves 8-bit images (Pillow rounds between its two resize
passes too); here nothing is rounded, as Pillow does for 32-bit float images.
The random ones draw from an explicit ``torch.Generator`` on the images' device.
Rotation (Ovadia et al. 2019: 0 to 180 degrees in steps of 15) is bilinear, zeros outside.
"""

from __future__ import annotations

import math
from numbers import Integral

import torch
import torch.nn.functional as F

GAUSSIAN_NOISE_STD = (0.04, 0.06, 0.08, 0.09, 0.10)
SHOT_NOISE_RATE = (500.0, 250.0, 100.0, 75.0, 50.0)
GAUSSIAN_BLUR_STD = (0.4, 0.6, 0.7, 0.8, 1.0)
CONTRAST_FACTOR = (0.75, 0.5, 0.4, 0.3, 0.15)
BRIGHTNESS_INCREASE = (0.05, 0.1, 0.15, 0.2, 0.3)
PIXELATE_SCALE = (0.95, 0.9, 0.85, 0.75, 0.65)
INTENSITIES = range(6)  # 0 = unchanged, 1 to 5 = Hendrycks & Dietterich's severities


def check_images(images: torch.Tensor, name: str = "images") -> None:
    """Raise ``ValueError`` unless ``images`` is a floating (N, C, H, W) batch in [0, 1]."""
    if not torch.is_floating_point(images) or images.ndim != 4 or 0 in images.shape:
        raise ValueError(
            f"{name} must be a floating (N, C, H, W) batch with no empty dimension; got "
            f"shape {tuple(images.shape)} and dtype {images.dtype}"
        )
    if not bool(((images >= 0) & (images <= 1)).all()):
        raise ValueError(
            f"{name} must be pixels in [0, 1]; found values in [{images.min().item():.4g}, "
            f"{images.max().item():.4g}]: corrupt before normalising (invert a normalisation "
            "first)"
        )


def _level(intensity: int, table: tuple[float, ...]) -> float | None:
    """The constant of ``intensity`` in ``table``; None for intensity 0."""
    integer = isinstance(intensity, Integral) and not isinstance(intensity, bool)
    if not integer or intensity not in INTENSITIES:
        raise ValueError(f"intensity must be an integer in 0..5; got {intensity!r}")
    return None if intensity == 0 else table[int(intensity) - 1]


def rotate(images: torch.Tensor, degrees: float) -> torch.Tensor:
    """Rotate each image counter-clockwise (as displayed, rows going down) about its centre.

    The output pixel at centred coordinates p (column u right, row v down, in pixels) samples the
    input bilinearly at R p with R = [[cos a, -sin a], [sin a, cos a]], a = ``degrees``; points
    outside the image read 0 (``grid_sample``, ``align_corners=False``, so pixel centres of a
    square image map onto pixel centres at multiples of 90 degrees). A multiple of 360 returns
    an exact copy.

    Args:
        images: (N, C, H, W) in [0, 1].
        degrees: the angle; 90 gives ``torch.rot90(images, 1, (-2, -1))`` for square images.

    Returns:
        (N, C, H, W) in [0, 1].
    """
    check_images(images)
    if float(degrees) % 360 == 0:
        return images.clone()
    angle = math.radians(degrees)
    cosine, sine = math.cos(angle), math.sin(angle)
    height, width = images.shape[-2:]
    # grid coordinates are normalised, n = D p with D = diag(2 / W, 2 / H): theta = D R D^-1
    theta = torch.tensor(
        [[cosine, -sine * height / width, 0.0], [sine * width / height, cosine, 0.0]],
        dtype=images.dtype,
        device=images.device,
    ).expand(len(images), 2, 3)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    rotated = F.grid_sample(
        images, grid, mode="bilinear", padding_mode="zeros", align_corners=False
    )
    return rotated.clamp(0, 1)


def gaussian_noise(
    images: torch.Tensor, intensity: int, generator: torch.Generator | None
) -> torch.Tensor:
    """x + sigma eps with eps ~ N(0, 1) per pixel, clamped (sigma from ``GAUSSIAN_NOISE_STD``).

    Args:
        images: (N, C, H, W) in [0, 1].
        intensity: 0 (an exact copy) to 5.
        generator: the source of eps, on the images' device; needed for intensities 1 to 5.
    """
    check_images(images)
    std = _level(intensity, GAUSSIAN_NOISE_STD)
    if std is None:
        return images.clone()
    noise = torch.randn(
        images.shape, generator=_required(generator), dtype=images.dtype, device=images.device
    )
    return (images + std * noise).clamp(0, 1)


def shot_noise(
    images: torch.Tensor, intensity: int, generator: torch.Generator | None
) -> torch.Tensor:
    """Poisson(lambda x) / lambda per pixel, clamped: photon counts at rate lambda for a white
    pixel (lambda from ``SHOT_NOISE_RATE``; mean x, variance x / lambda).

    Args:
        images: (N, C, H, W) in [0, 1].
        intensity: 0 (an exact copy) to 5.
        generator: the source of the counts, on the images' device; needed for 1 to 5.
    """
    check_images(images)
    rate = _level(intensity, SHOT_NOISE_RATE)
    if rate is None:
        return images.clone()
    return (torch.poisson(images * rate, generator=_required(generator)) / rate).clamp(0, 1)


def _required(generator: torch.Generator | None) -> torch.Generator:
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"a random corruption needs a torch.Generator; got {generator!r}")
    return generator


def gaussian_blur(images: torch.Tensor, intensity: int) -> torch.Tensor:
    """Convolve each channel with a Gaussian of std sigma pixels (``GAUSSIAN_BLUR_STD``).

    The separable kernel w_j = exp(-j^2 / (2 sigma^2)) / sum_i exp(-i^2 / (2 sigma^2)) for
    |j| <= r = floor(4 sigma + 0.5), the image's border pixels repeated outside it: scipy's
    ``gaussian_filter(mode="nearest", truncate=4)``, which scikit-image's ``gaussian`` calls.

    Args:
        images: (N, C, H, W) in [0, 1].
        intensity: 0 (an exact copy) to 5.
    """
    check_images(images)
    sigma = _level(intensity, GAUSSIAN_BLUR_STD)
    if sigma is None:
        return images.clone()
    radius = int(4 * sigma + 0.5)
    offsets = torch.arange(-radius, radius + 1, dtype=torch.float64)
    kernel = torch.exp(-(offsets**2) / (2 * sigma**2))
    kernel = (kernel / kernel.sum()).to(images.dtype).to(images.device)
    channels = images.shape[1]
    padded = F.pad(images, (radius, radius, radius, radius), mode="replicate")
    rows = F.conv2d(padded, kernel.view(1, 1, 1, -1).expand(channels, 1, 1, -1), groups=channels)
    blurred = F.conv2d(rows, kernel.view(1, 1, -1, 1).expand(channels, 1, -1, 1), groups=channels)
    return blurred.clamp(0, 1)


def contrast(images: torch.Tensor, intensity: int) -> torch.Tensor:
    """(x - m) c + m with m the mean of each image and channel over its pixels
    (c from ``CONTRAST_FACTOR``).

    Args:
        images: (N, C, H, W) in [0, 1].
        intensity: 0 (an exact copy) to 5.
    """
    check_images(images)
    factor = _level(intensity, CONTRAST_FACTOR)
    if factor is None:
        return images.clone()
    means = images.mean((-2, -1), keepdim=True)
    return ((images - means) * factor + means).clamp(0, 1)


def brightness(images: torch.Tensor, intensity: int) -> torch.Tensor:
    """Raise the HSV value V = max_c x_c by b (``BRIGHTNESS_INCREASE``), keeping hue and
    saturation.

    Every RGB channel is V times a function of hue and saturation, so the result is
    x min(V + b, 1) / V, and the grey min(b, 1) where V = 0 (Hendrycks & Dietterich's
    rgb -> hsv -> rgb round trip in closed form). One channel: clamp(x + b, 0, 1), exactly.

    Args:
        images: (N, C, H, W) in [0, 1].
        intensity: 0 (an exact copy) to 5.
    """
    check_images(images)
    increase = _level(intensity, BRIGHTNESS_INCREASE)
    if increase is None:
        return images.clone()
    value = images.amax(1, keepdim=True)
    chroma = torch.where(value > 0, images / value.clamp_min(torch.finfo(images.dtype).tiny), 1.0)
    return ((value + increase).clamp(0, 1) * chroma).clamp(0, 1)


def pixelate(images: torch.Tensor, intensity: int) -> torch.Tensor:
    """Resize each image to floor(s H) x floor(s W) and back with Pillow's box filter
    (s from ``PIXELATE_SCALE``): x -> A_H x A_W^T with A = up @ down (``box_resize_matrix``).

    Args:
        images: (N, C, H, W) in [0, 1].
        intensity: 0 (an exact copy) to 5.
    """
    check_images(images)
    scale = _level(intensity, PIXELATE_SCALE)
    if scale is None:
        return images.clone()
    height, width = images.shape[-2:]
    matrices = []
    for size in (height, width):
        small = max(1, int(size * scale))
        down = box_resize_matrix(size, small)
        matrices.append((box_resize_matrix(small, size) @ down).to(images))
    return (matrices[0] @ images @ matrices[1].T).clamp(0, 1)


def box_resize_matrix(size_in: int, size_out: int) -> torch.Tensor:
    """(size_out, size_in) float64 weights of Pillow's box-filter resize along one axis.

    Output pixel i has centre c_i = (i + 1/2) s in input pixels, s = size_in / size_out; it
    averages with equal weights the input pixels j whose centre lies in (c_i - h, c_i + h],
    h = max(s, 1) / 2 (Pillow's ``precompute_coeffs`` with its box filter). Each row sums to 1,
    so a constant image is kept.
    """
    scale = size_in / size_out
    half = max(scale, 1.0) / 2
    centres = (torch.arange(size_out, dtype=torch.float64) + 0.5) * scale
    offsets = torch.arange(size_in, dtype=torch.float64) + 0.5 - centres[:, None]
    weights = ((offsets > -half) & (offsets <= half)).double()
    return weights / weights.sum(1, keepdim=True)
