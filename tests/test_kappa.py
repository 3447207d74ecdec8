"""Kappa criterion (Neklyudov et al. 2018 eq. 16) against closed forms and brute-force Hessians;
sparse ensembles."""

from __future__ import annotations

import gzip

import pytest
import torch
from torch.nn import functional

from vbnn.classification.inference import predict_probabilities
from vbnn.classification.kappa import (
    categorical_log_likelihood,
    clear_masks,
    count_above,
    dense_layer_kappa,
    sparse_ensemble_masks,
)
from vbnn.core.contracts import ForwardMode
from vbnn.core.gaussian import gaussian_log_prob
from vbnn.core.randomness import ModelGenerators
from vbnn.data.mnist import load_images, read_idx
from vbnn.data.uci import DataError
from vbnn.layers import Additive, Point
from vbnn.metrics import accuracy


def test_kappa_of_a_linear_gaussian_model_is_its_closed_form() -> None:
    """y = x W + c + N(0, s^2): d^2 log p / dW_ij^2 = -sum_n x_ni^2 / s^2, so
    kappa_ij = sigma_ij^2 sum_n x_ni^2 / s^2."""
    layer = Additive(3, 2, ModelGenerators([1, 2]), init_std=0.3, dtype=torch.float64)
    with torch.no_grad():
        layer.weight_log_std.uniform_(-2.0, 0.0)
    x = torch.randn(2, 7, 3, dtype=torch.float64)
    y = torch.randn(7, 2, dtype=torch.float64)
    noise = 0.5

    def log_likelihood(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return gaussian_log_prob(target, output, noise).sum(-1)

    kappa = dense_layer_kappa(layer, x, lambda b: b, y, log_likelihood)
    sigma2 = layer.posterior_std()[0].detach() ** 2
    expected = sigma2 * (x**2).sum(1).unsqueeze(-1) / noise**2
    torch.testing.assert_close(kappa, expected)


def test_kappa_equals_the_brute_force_hessian_diagonal_of_a_small_network() -> None:
    generators = ModelGenerators([3])
    first = Additive(4, 3, generators, init_std=0.2, dtype=torch.float64)
    second = Point(3, 5, generators, dtype=torch.float64)
    x = torch.randn(1, 9, 4, dtype=torch.float64)
    labels = torch.randint(0, 5, (9,))

    def head(b: torch.Tensor) -> torch.Tensor:
        return second(functional.softplus(b), ForwardMode.MEAN)

    kappa = dense_layer_kappa(first, x, head, labels)

    def total(weight_flat: torch.Tensor) -> torch.Tensor:
        b = x @ weight_flat.reshape(1, 4, 3) + first.bias.detach().unsqueeze(1)
        return categorical_log_likelihood(head(b), labels).sum()

    full = torch.autograd.functional.hessian(total, first.weight_mean.detach().flatten())
    sigma2 = first.posterior_std()[0].detach() ** 2
    torch.testing.assert_close(kappa, sigma2 * torch.diagonal(full).abs().reshape(1, 4, 3))
    assert int(count_above(kappa, -30.0)[0]) == 12
    assert int(count_above(kappa, 30.0)[0]) == 0


def test_sparse_ensemble_replaces_low_kappa_weights() -> None:
    generators = ModelGenerators([5])
    first = Additive(4, 3, generators, init_std=0.5, dtype=torch.float64)
    second = Point(3, 5, generators, dtype=torch.float64)
    model = torch.nn.Sequential()  # a small network with the forward(x, mode, generators) API

    class Small(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.second = first, second

        def forward(self, x, mode=None, noise=None):
            return self.second(functional.softplus(self.first(x, mode, noise)), mode)

    model = Small()
    x = torch.randn(1, 40, 4, dtype=torch.float64)
    labels = torch.randint(0, 5, (40,))
    kappa = dense_layer_kappa(first, x, lambda b: second(functional.softplus(b), "mean"), labels)
    deterministic = predict_probabilities(model, x, ForwardMode.MEAN)
    # threshold above every kappa, replace by means: the ensemble is the mean network
    assert sparse_ensemble_masks(first, kappa, float("inf"), "mean") == 1.0
    ensemble = predict_probabilities(model, x, "weights", ModelGenerators([1]), samples=5)
    torch.testing.assert_close(ensemble, deterministic)
    # replace by zeros: the first layer outputs its bias only
    sparse_ensemble_masks(first, kappa, float("inf"), "zero")
    torch.testing.assert_close(
        first(x, ForwardMode.WEIGHTS, ModelGenerators([1])),
        first.bias.detach().unsqueeze(1).expand(1, 40, 3),
    )
    # median threshold: half of the weights replaced, the others still random
    median = float(kappa.median())
    fraction = sparse_ensemble_masks(first, kappa, median, "mean")
    assert fraction == pytest.approx(float((kappa < median).float().mean()))
    draws = torch.stack([first.effective_sample(ModelGenerators([k]))[0] for k in range(3)])
    varies = draws.std(0) > 0
    assert torch.equal(varies, kappa >= median)
    clear_masks(first)
    assert first.to_mean is None and first.to_zero is None
    assert 0.0 <= float(accuracy(deterministic[0], labels)) <= 1.0


def test_idx_reader_checks_checksum_and_magic(tmp_path) -> None:
    path = tmp_path / "bad-idx1-ubyte.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(b"\x00\x00\x08\x01\x00\x00\x00\x02\x05\x07")
    assert read_idx(path).tolist() == [5, 7]
    with pytest.raises(DataError, match="md5"):
        read_idx(path, "0" * 32)
    with gzip.open(path, "wb") as handle:
        handle.write(b"\x00\x00\x09\x99\x00\x00\x00\x02\x05\x07")
    with pytest.raises(DataError, match="magic number"):
        read_idx(path)


def test_missing_mnist_names_the_directory(tmp_path) -> None:
    with pytest.raises(DataError, match=r"not found in .*mnist"):
        load_images("mnist", "test", tmp_path)


def test_mnist_test_labels_have_the_official_counts(data_dir) -> None:
    if not (data_dir / "mnist" / "t10k-labels-idx1-ubyte.gz").is_file():
        pytest.skip("MNIST not in the data directory")
    images, labels = load_images("mnist", "test", data_dir)
    assert images.shape == (10_000, 1, 28, 28) and float(images.max()) == 1.0
    counts = torch.bincount(labels).tolist()
    assert counts == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def test_fashion_mnist_is_balanced(data_dir) -> None:
    if not (data_dir / "fashion-mnist" / "t10k-labels-idx1-ubyte.gz").is_file():
        pytest.skip("Fashion-MNIST not in the data directory")
    images, labels = load_images("fashion-mnist", "test", data_dir)
    assert images.shape == (10_000, 1, 28, 28)
    assert torch.bincount(labels).tolist() == [1000] * 10
