"""The blog's Fashion-MNIST product-matrix covariance (Farquhar et al. 2020 blog, "Investigating
the linear case"): a 10-layer deep *linear* mean-field network is trained on Fashion-MNIST, its
weights are sampled 10,000 times, and the covariance of the entries of the product matrix
M = W_1 W_2 ... W_10 (784 x 10, biases left out: they are not part of the linear map) is shown.

The full covariance has 7840^2 entries; the heatmap shows the entries of ``pixels`` rows of M (the
pixels of largest training-set variance) times the 10 classes. Rows of M depend only on the same
rows of W_1, so each sample of this block is exact without forming the whole product.

Network: vbnn's ``MeanField`` (log-std parameterisation, LRT), identity activations, N(0, 1)
prior, full-data ELBO (KL not re-weighted), Adam, softmax cross-entropy, trained by
``vbnn.train``. The blog does not give the width or the training schedule; both are settings
here.

With a LeakyReLU or ReLU ``activation`` the same network gives the blog's *local* product matrix
(``vbnn.diagnostics.local_product``): M(x) = W_1 D_1(x) ... W_L at a test image x, the pattern
D_l(x) drawn with the weights; :func:`local_product_block_covariance` samples its block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vbnn.core.contracts import Activation, ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.data.mnist import ImageDataset, load_images
from vbnn.diagnostics.local_product import MeanFieldNetwork, sample_local_products
from vbnn.networks.mlp import MLP
from vbnn.priors.gaussian import GaussianPrior
from vbnn.training.likelihoods import CategoricalLikelihood
from vbnn.training.settings import TrainerConfig
from vbnn.training.trainer import train


@dataclass(frozen=True)
class FashionProductConfig:
    layers: int = 10
    width: int = 32
    epochs: int = 3
    train_size: int = 60_000
    batch_size: int = 128
    learning_rate: float = 1e-3
    init_std: float = 1e-3
    samples: int = 10_000
    pixels: int = 10
    activation: Activation = Activation.IDENTITY
    negative_slope: float = 0.01
    seed: int = 0


def flat_images(dataset: ImageDataset, split: str, data_dir) -> tuple[np.ndarray, np.ndarray]:
    """Images as (N, 784) float32 in [0, 1] and labels (N,) int64 (md5-checked IDX files)."""
    images, labels = load_images(dataset, split, data_dir)
    return images.reshape(len(images), -1).numpy(), labels.numpy()


def train_deep_linear(config: FashionProductConfig, data_dir: str | None) -> tuple[MLP, float]:
    """The trained mean-field network (deep linear by default) and its test accuracy (mean
    weights)."""
    images, labels = flat_images(ImageDataset.FASHION_MNIST, "train", data_dir)
    test_images, test_labels = flat_images(ImageDataset.FASHION_MNIST, "test", data_dir)
    x = torch.from_numpy(images[: config.train_size])
    y = torch.from_numpy(labels[: config.train_size])
    sizes = [784] + [config.width] * (config.layers - 1) + [10]
    generators = ModelGenerators([config.seed])
    leaky = Activation(config.activation) is Activation.LEAKY_RELU
    slope = config.negative_slope if leaky else None
    model = MLP(
        "mf", sizes, config.activation, generators, negative_slope=slope,
        init_std=config.init_std,
    )  # fmt: skip
    train(model, (x, y), likelihood=CategoricalLikelihood(), prior=GaussianPrior(1.0),
          epochs=config.epochs, batch_size=config.batch_size,
          learning_rate=config.learning_rate, seed=config.seed, progress=False,
          config=TrainerConfig(description="fashion product"), noise=generators)  # fmt: skip
    with torch.no_grad():
        logits = model(torch.from_numpy(test_images).unsqueeze(0), ForwardMode.MEAN)[0]
    accuracy = float((logits.argmax(-1) == torch.from_numpy(test_labels)).float().mean())
    return model, accuracy


def product_block_covariance(
    model: MLP, rows: np.ndarray, samples: int, seed: int, chunk: int = 1000
) -> np.ndarray:
    """Sample covariance of the entries M[rows, :] (flattened row-major), (R*10, R*10)."""
    generator = torch.Generator().manual_seed(seed)
    index = torch.as_tensor(rows)
    draws = []
    with torch.no_grad():
        for start in range(0, samples, chunk):
            size = min(chunk, samples - start)
            product = None
            for number, layer in enumerate(model.layers):
                mean, std = layer.posterior_mean()[0][0], layer.posterior_std()[0][0]
                if number == 0:
                    mean, std = mean[index], std[index]
                weight = mean + std * torch.randn(size, *mean.shape, generator=generator)
                product = weight if product is None else product @ weight
            draws.append(product.reshape(size, -1).double())
    return np.cov(torch.cat(draws).numpy(), rowvar=False)


def run_fashion_product(config: FashionProductConfig, data_dir: str | None) -> dict:
    """Train, sample and return the block covariance with what made it."""
    images, _ = flat_images(ImageDataset.FASHION_MNIST, "train", data_dir)
    rows = np.sort(np.argsort(images[: config.train_size].var(0))[-config.pixels :])
    model, accuracy = train_deep_linear(config, data_dir)
    covariance = product_block_covariance(model, rows, config.samples, config.seed + 1)
    return {"covariance": covariance, "pixels": rows, "test_accuracy": accuracy}


def mean_field_network(model: MLP, slope: float) -> MeanFieldNetwork:
    """The trained network's means and stds as a ``MeanFieldNetwork`` (float64)."""
    moments = [(layer.posterior_mean(), layer.posterior_std()) for layer in model.layers]
    return MeanFieldNetwork(
        [mean[0][0].detach().double() for mean, _ in moments],
        [std[0][0].detach().double() for _, std in moments],
        [mean[1][0].detach().double() for mean, _ in moments],
        [std[1][0].detach().double() for _, std in moments],
        slope,
    )


def local_product_block_covariance(
    network: MeanFieldNetwork,
    image: np.ndarray,
    rows: np.ndarray,
    samples: int,
    seed: int,
    chunk: int = 250,
) -> np.ndarray:
    """Sample covariance of M(x)[rows, :] (flattened row-major) at the image x (784,)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.as_tensor(image, dtype=torch.float64)
    classes = network.weight_means[-1].shape[1]
    draws = []
    with torch.no_grad():
        for start in range(0, samples, chunk):
            size = min(chunk, samples - start)
            products = sample_local_products(network, x, size, generator)
            draws.append(products.reshape(size, -1, classes)[:, rows].reshape(size, -1))
    return np.cov(torch.cat(draws).numpy(), rowvar=False)
