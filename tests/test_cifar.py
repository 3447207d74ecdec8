"""CIFAR reader and VGG-like network on tiny synthetic files in the CIFAR python format."""

from __future__ import annotations

import hashlib
import io
import pickle
import tarfile
from dataclasses import replace

import numpy as np
import pytest
import torch

import vbnn
from vbnn.data.cifar import (
    SPECS,
    CifarDataset,
    download_cifar,
    extract_verified,
    load_cifar,
    read_batch,
    write_batch,
)
from vbnn.data.uci import DataError
from vbnn.networks.vgg import VGGConfig, VGGLike
from vbnn.priors.log_uniform import LogUniformPrior


def _images(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (count, 3, 32, 32), dtype=np.uint8), rng.integers(0, 10, count)


def _cifar10_folder(root, count: int = 4):
    folder = root / "cifar10"
    folder.mkdir(parents=True)
    written = {}
    for k, name in enumerate([*SPECS[CifarDataset.CIFAR10].train, "test_batch"]):
        written[name] = _images(count, k)
        write_batch(folder / name, *written[name])
    return written


def test_reader_returns_the_written_pixels_in_channel_row_column_order(tmp_path):
    images, labels = _images(5, 0)
    write_batch(tmp_path / "batch", images, labels)
    read_images, read_labels = read_batch(tmp_path / "batch")
    np.testing.assert_array_equal(read_images, images)
    np.testing.assert_array_equal(read_labels, labels)
    # the official layout: 1024 red values, then green, then blue, each row-major
    with open(tmp_path / "batch", "rb") as handle:
        flat = pickle.load(handle, encoding="bytes")[b"data"]
    assert flat[2, 1024 + 32 * 3 + 7] == images[2, 1, 3, 7]


def test_load_cifar_concatenates_the_five_training_batches_in_order(tmp_path):
    written = _cifar10_folder(tmp_path)
    x, _ = load_cifar("cifar10", "train", tmp_path, verify=False)
    assert x.shape == (20, 3, 32, 32) and x.dtype == torch.float32
    expected = np.concatenate([written[f"data_batch_{k}"][0] for k in range(1, 6)])
    np.testing.assert_allclose(x.numpy(), expected / 255.0, rtol=0, atol=1e-7)
    _, test_y = load_cifar("cifar10", "test", tmp_path, verify=False)
    np.testing.assert_array_equal(test_y.numpy(), written["test_batch"][1])


def test_official_checksums_reject_a_file_of_another_content(tmp_path):
    _cifar10_folder(tmp_path)
    with pytest.raises(DataError, match=r"data_batch_1: md5 .* does not match the official"):
        load_cifar("cifar10", "train", tmp_path)


def test_missing_files_and_foreign_pickles_get_clear_errors(tmp_path):
    with pytest.raises(DataError, match=r"data_batch_1.*vbnn data download cifar10"):
        load_cifar("cifar10", "train", tmp_path)
    (tmp_path / "evil").write_bytes(pickle.dumps({b"data": print}))
    with pytest.raises(DataError, match=r"builtins.print is not allowed"):
        read_batch(tmp_path / "evil")
    (tmp_path / "short").write_bytes(pickle.dumps({b"data": np.zeros((2, 10)), b"labels": [0, 1]}))
    with pytest.raises(DataError, match=r"shape \(2, 10\), expected \(N, 3072\)"):
        read_batch(tmp_path / "short")


def _archive(tmp_path, spec, files: dict[str, bytes]):
    path = tmp_path / spec.archive
    with tarfile.open(path, "w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(f"{spec.top_folder}/{name}")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return path


def test_extraction_checks_every_member_against_its_md5(tmp_path):
    images, labels = _images(3, 1)
    write_batch(tmp_path / "one", images, labels, b"fine_labels")
    content = (tmp_path / "one").read_bytes()
    md5 = hashlib.md5(content).hexdigest()
    spec = replace(SPECS[CifarDataset.CIFAR100], checksums={"train": md5})
    archive = _archive(tmp_path, spec, {"train": content})
    out = tmp_path / "out"
    out.mkdir()
    extract_verified(archive, spec, out)
    np.testing.assert_array_equal(read_batch(out / "train", b"fine_labels")[0], images)
    bad = replace(spec, checksums={"train": "0" * 32})
    with pytest.raises(DataError, match="cifar-100-python/train: md5"):
        extract_verified(archive, bad, out)


def test_download_of_a_wrong_archive_leaves_nothing_behind(tmp_path):
    spec = SPECS[CifarDataset.CIFAR10]
    source = tmp_path / "mirror"
    source.mkdir()
    _archive(source, spec, {"test_batch": b"not the official file"})
    with pytest.raises(DataError, match=r"cifar-10-python.tar.gz: md5"):
        download_cifar("cifar10", tmp_path / "data", base_url=source.as_uri())
    assert not (tmp_path / "data" / "cifar10").exists()


def test_vgg_like_reads_the_synthetic_file_and_learns_it(tmp_path):
    _cifar10_folder(tmp_path, count=8)
    x, y = load_cifar("cifar10", "test", tmp_path, verify=False)
    torch.manual_seed(0)
    model = VGGLike(
        VGGConfig(classes=10, width=1 / 16), generators=torch.Generator().manual_seed(0)
    )
    assert [type(layer).__name__ for layer in model.convs[-3:]] == ["LayerDropout"] * 3
    assert type(model.dense1).__name__ == "LayerDropout"
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(model(x, "mean"), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # 8 images, 10 classes: memorised (cross-entropy of a uniform guess is log 10 = 2.30)
    assert losses[-1] < 0.2 < 2.0 < losses[0] + 0.5
    model.eval()
    assert model(x, "local").shape == (8, 10)
    assert torch.isfinite(vbnn.kl(model, LogUniformPrior())).all()
    with pytest.raises(ValueError, match=r"input of shape \(8, 1, 32, 32\)"):
        model(x[:, :1])


def test_vgg_like_full_width_has_the_papers_layer_sizes():
    model = VGGLike(VGGConfig(classes=100, family="point"))
    assert [layer.out_features for layer in model.convs] == [
        64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512,
    ]  # fmt: skip
    assert (model.dense1.in_features, model.dense1.out_features) == (512, 512)
    assert model.dense2.out_features == 100
    assert [getattr(layer, "rate", 0.0) for layer in model.convs][:4] == [0.0, 0.3, 0.0, 0.4]
    assert type(model.convs[0]).__name__ == "Point"  # no dropout: a point layer
