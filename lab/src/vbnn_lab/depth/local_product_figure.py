"""The local product matrix on Fashion-MNIST (Farquhar et al. 2020 blog, "New tool").

Mean-field LeakyReLU networks with 2 and 4 weight layers are trained on Fashion-MNIST as the deep
linear one of ``fashion_product``; at a test image x the local product matrix M(x) = W_1 D_1(x)
... W_L (``vbnn.diagnostics.local_product``, the pattern drawn with the weights) is sampled and
the correlation of its block M(x)[pixels, classes] is shown as a heatmap. The blog's claim, from
the linear case: with 2 weight layers entries that share neither a pixel (row) nor a class
(column) are (nearly) uncorrelated; with 3 or more every pair is. ``fashion_local_product.json``
holds the median |correlation| of both kinds of pairs per depth.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from vbnn.core.contracts import Activation
from vbnn.data.mnist import ImageDataset
from vbnn.plots import pyplot, save_figure
from vbnn.stores.atomic import write_atomic
from vbnn_lab.depth.fashion_product import (
    FashionProductConfig,
    flat_images,
    local_product_block_covariance,
    mean_field_network,
    train_deep_linear,
)

LAYERS = (2, 4)
SLOPE = 0.2


def pair_correlations(covariance: np.ndarray, classes: int) -> dict[str, float]:
    """Median |correlation| of block entries sharing a pixel or a class, and of the others."""
    scale = np.sqrt(np.outer(np.diag(covariance), np.diag(covariance)))
    correlation = np.abs(covariance / scale)
    index = np.arange(len(covariance))
    pixel, label = index // classes, index % classes
    shares = (pixel[:, None] == pixel[None]) | (label[:, None] == label[None])
    off_diagonal = ~np.eye(len(covariance), dtype=bool)
    return {
        "median_abs_correlation_sharing_pixel_or_class": float(
            np.median(correlation[shares & off_diagonal])
        ),
        "median_abs_correlation_sharing_neither": float(np.median(correlation[~shares])),
    }


def run_local_product_figure(
    out: Path, base: FashionProductConfig, data_dir: str | None
) -> dict[str, Any]:
    """Train, sample, plot ``fashion_local_product.png`` and write its JSON."""
    images, _ = flat_images(ImageDataset.FASHION_MNIST, "train", data_dir)
    test_images, _ = flat_images(ImageDataset.FASHION_MNIST, "test", data_dir)
    rows = np.sort(np.argsort(images[: base.train_size].var(0))[-base.pixels :])
    image = test_images[0]
    figure, axes = pyplot().subplots(1, len(LAYERS), figsize=(5.2 * len(LAYERS), 4.6))
    record: dict[str, Any] = {"pixels": rows.tolist(), "slope": SLOPE, "test_image": 0}
    for axis, layers in zip(axes, LAYERS, strict=True):
        config = dataclasses.replace(
            base, layers=layers, activation=Activation.LEAKY_RELU, negative_slope=SLOPE
        )
        model, accuracy = train_deep_linear(config, data_dir)
        network = mean_field_network(model, SLOPE)
        covariance = local_product_block_covariance(
            network, image, rows, config.samples, config.seed + 1
        )
        scale = np.sqrt(np.outer(np.diag(covariance), np.diag(covariance)))
        shown = axis.imshow(covariance / scale, cmap="RdBu_r", vmin=-1, vmax=1)
        axis.set_title(
            f"{layers} weight layers, LeakyReLU({SLOPE}): corr of M(x)\n"
            f"({config.pixels} pixels x 10 classes, {config.samples} samples)",
            fontsize=9,
        )
        record[f"layers_{layers}"] = {
            "test_accuracy": accuracy,
            **pair_correlations(covariance, 10),
            "config": {k: str(v) for k, v in dataclasses.asdict(config).items()},
        }
    figure.colorbar(shown, ax=list(axes))
    save_figure(figure, out / "fashion_local_product.png", dpi=120)
    write_atomic(out / "fashion_local_product.json", json.dumps(record, indent=2))
    return record
