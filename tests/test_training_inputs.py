"""``vbnn.train``'s errors for a dataset of dicts without a target and for a damaged
checkpoint: each names the argument or the file, and a damaged file's own error is chained;
batches and outputs that are mappings (the batch rule) train as the pair and the tensor."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import vbnn


class Records(Dataset):
    """Examples as dicts, as many datasets give them."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"image": torch.full((3,), float(index)), "label": torch.tensor(index % 2)}


def network() -> torch.nn.Module:
    return vbnn.convert(torch.nn.Linear(3, 2), "mf")


@pytest.mark.parametrize("data", [Records(), DataLoader(Records(), batch_size=4)])
def test_examples_as_dicts_are_named(data) -> None:
    with pytest.raises(
        ValueError, match=r"data: the .* gives a dict with keys \['image', 'label'\]"
    ):
        vbnn.train(network(), data, epochs=1, progress=False)


class Named(torch.nn.Module):
    """``inner`` called by keyword, its output a mapping holding the logits."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": self.inner(features), "hidden": features}


def test_mappings_of_batches_and_outputs_train_as_pairs_and_tensors() -> None:
    """The same network, seed and data give the same history whether the batches are (x, y)
    and the output a tensor, or mappings {"features", "labels"} and {"logits", ...}."""
    x, y = torch.randn(24, 3), torch.randint(0, 2, (24,))
    plain = network()
    named = Named(copy.deepcopy(plain))
    settings = {"epochs": 2, "batch_size": 8, "progress": False}
    paired = vbnn.train(plain, (x, y), validation=(x, y), **settings).history
    mapped = vbnn.train(
        named, {"features": x, "labels": y}, validation={"features": x, "labels": y}, **settings
    ).history
    for row, other in zip(paired, mapped, strict=True):
        assert {k: v for k, v in row.items() if k != "seconds"} == {
            k: v for k, v in other.items() if k != "seconds"
        }


def test_a_damaged_checkpoint_names_its_file(tmp_path: Path) -> None:
    x, y = torch.randn(16, 3), torch.randint(0, 2, (16,))
    folder = tmp_path / "run"
    vbnn.train(network(), (x, y), epochs=2, checkpoint=folder, progress=False)
    (path,) = folder.iterdir()
    whole = path.read_bytes()
    for damaged in (whole[: len(whole) // 2], b"not a checkpoint at all"):
        path.write_bytes(damaged)
        with pytest.raises(ValueError, match="unreadable, corrupted or truncated") as error:
            vbnn.train(network(), (x, y), epochs=3, checkpoint=folder, progress=False)
        assert str(path) in str(error.value) and error.value.__cause__ is not None
    torch.save({"weights": torch.zeros(2)}, path)  # readable, but not vbnn.train's
    with pytest.raises(ValueError, match=r"not a vbnn.train checkpoint \(it lacks \['settings'"):
        vbnn.train(network(), (x, y), epochs=3, checkpoint=folder, progress=False)
