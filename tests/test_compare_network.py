"""``vbnn.compare`` on the user's own network: metrics by hand, the ensemble's and MC dropout's
predictive, resuming, the command line with ``--model`` and an .npz, and the errors before any
training."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import vbnn
from vbnn.cli import main
from vbnn.comparison import UnseenClassWarning
from vbnn.comparison.config import NetworkConfig
from vbnn.comparison.entries import EntryRun, NetworkSource, train_entry
from vbnn.comparison.folds import Task
from vbnn.comparison.network import prepare, score
from vbnn.methods.mc_dropout import dropout_samples

FAST = {"epochs": 2, "batch_size": 32, "test_samples": 6}


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 3, 3), nn.ReLU(), nn.Flatten(), nn.Dropout(0.3), nn.Linear(3 * 6 * 6, 3)
    )


def no_dropout() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 3))


def images(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, 1, 8, 8) inputs and three classes from the image's mean and one pixel."""
    x = torch.randn(rows, 1, 8, 8, generator=torch.Generator().manual_seed(seed))
    y = (x.mean((1, 2, 3)) > 0).long() + (x[:, 0, 0, 0] > 1).long()
    return x, y


def run(name: str, **changes) -> EntryRun:
    values = {"method": name, "epochs": 2, "batch_size": 32, "learning_rate": 1e-3,
              "samples": 6, "ensemble_size": 1, "seed": 0} | changes  # fmt: skip
    return EntryRun(**values)


@pytest.fixture
def one_thread():
    """One torch thread for the test: it trains an entry twice (in ``compare`` and by hand) and
    compares the two to 1e-9, which several threads' reductions do not repeat exactly."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
def test_metrics_equal_a_computation_by_hand(tmp_path: Path) -> None:
    data, test, ood = images(120, 0), images(60, 1), 3 * images(40, 2)[0]
    result = vbnn.compare(small_cnn, data, test=test, ood=ood, families=["point", "mf"],
                          seeds=2, database=tmp_path / "c.sqlite", **FAST)  # fmt: skip
    assert result.task is Task.CLASSIFICATION and result.over == "seeds"
    trained = train_entry(NetworkSource(small_cnn), run("mf"), 1, data, test[0], ood, False)
    assert trained.test.shape == (6, 60, 3) and trained.ood.shape == (6, 40, 3)
    p = torch.softmax(trained.test.double(), -1).numpy()  # (K, N, C)
    mean, labels = p.mean(0), test[1].numpy()
    confidence, correct = mean.max(1), (mean.argmax(1) == labels).astype(float)
    bins = np.clip(np.ceil(confidence * 15).astype(int) - 1, 0, 14)
    ece = sum(
        abs(correct[bins == b].mean() - confidence[bins == b].mean()) * (bins == b).mean()
        for b in range(15)
        if (bins == b).any()
    )

    def entropy(q: np.ndarray) -> np.ndarray:
        return -(q * np.log(q)).sum(-1)

    q = torch.softmax(trained.ood.double(), -1).numpy()
    inside, outside = entropy(mean), entropy(q.mean(0))
    pairs = (outside[:, None] > inside[None, :]) + 0.5 * (outside[:, None] == inside[None, :])
    information = entropy(q.mean(0)) - entropy(q).mean(0)
    row = result.folds.set_index(["family", "fold"]).loc[("mf", 1)]
    expected = {
        "log_likelihood": np.log(mean[np.arange(60), labels]).mean(),
        "accuracy": correct.mean(),
        "ece": ece,
        "brier": ((mean - np.eye(3)[labels]) ** 2).sum(1).mean(),
        "entropy AUROC": pairs.mean(),
    }
    for column, value in expected.items():
        assert row[column] == pytest.approx(value, rel=1e-9), column
    assert row["mutual_information AUROC"] == pytest.approx(
        vbnn.metrics.auroc(
            torch.as_tensor(entropy(mean) - entropy(p).mean(0)), torch.as_tensor(information)
        ).item()
    )
    point = result.folds.set_index(["family", "fold"]).loc[("point", 0)]
    assert math.isnan(point["mutual_information AUROC"])  # one sample: no epistemic part
    summary = result.summary.loc["mf"]
    values = result.folds[result.folds["family"] == "mf"]["accuracy"]
    assert summary["accuracy"] == pytest.approx(values.mean())
    assert summary["accuracy sem"] == pytest.approx(values.std(ddof=1) / math.sqrt(2))


def test_regression_log_likelihood_by_hand() -> None:
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(100, 2, generator=generator)
    y = x[:, 0] - x[:, 1] + 0.1 * torch.randn(100, generator=generator)
    network = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))
    trained = train_entry(NetworkSource(network), run("mf"), 0, (x[:80], y[:80]), x[80:],
                          None, True)  # fmt: skip
    metrics = score(trained, y[80:], Task.REGRESSION, 0.95)
    means, std = trained.test.double().squeeze(-1), trained.noise_std[0, 0].item()
    density = torch.exp(-0.5 * ((y[80:] - means) / std) ** 2) / (std * math.sqrt(2 * math.pi))
    assert metrics["test_log_likelihood"] == pytest.approx(density.mean(0).log().mean().item())
    assert metrics["rmse"] == pytest.approx(((means.mean(0) - y[80:]) ** 2).mean().sqrt().item())
    assert 0 <= metrics["coverage"] <= 1
    result = vbnn.compare(network, (x.double().numpy(), y.double().numpy()), folds=2,
                          families=["point", "gd"], epochs=2)  # fmt: skip
    assert result.task is Task.REGRESSION and result.over == "folds"
    assert set(result.folds["fold"]) == {0, 1} and result.folds["coverage"].between(0, 1).all()


def test_the_ensemble_averages_its_members_and_member_zero_is_point() -> None:
    data, test = images(90, 0), images(30, 1)
    source = NetworkSource(small_cnn())  # a module: members > 0 draw fresh weights
    ensemble = train_entry(source, run("ensemble", ensemble_size=3), 0, data, test[0], None, False)
    point = train_entry(source, run("point"), 0, data, test[0], None, False)
    assert ensemble.test.shape == (3, 30, 3)
    torch.testing.assert_close(ensemble.test[0], point.test[0], rtol=0, atol=0)
    assert not torch.allclose(ensemble.test[1], ensemble.test[2])
    members = torch.softmax(ensemble.test.double(), -1)
    by_hand = np.log(members.mean(0)[torch.arange(30), test[1]].numpy()).mean()
    assert score(ensemble, test[1], Task.CLASSIFICATION, 0.95)["test_log_likelihood"] == (
        pytest.approx(by_hand, rel=1e-12)
    )


def test_mc_dropout_keeps_dropout_active_and_needs_it(tmp_path: Path, entry_trainings) -> None:
    data, test = images(60, 0), images(20, 1)
    network = small_cnn()
    network.eval()
    samples = dropout_samples(network, test[0], run("mc-dropout"), 5)
    assert not torch.allclose(samples[0], samples[1])  # dropout active at test time
    again = dropout_samples(network, test[0], run("mc-dropout"), 5)
    torch.testing.assert_close(samples, again, rtol=0, atol=0)  # seeded
    assert not network.training and not network[3].training  # left in eval mode
    with pytest.raises(ValueError, match="'mc-dropout': Sequential has no dropout layer"):
        vbnn.compare(no_dropout, data, test=test, families=["mc-dropout"], **FAST)
    assert entry_trainings == []


def test_an_identical_second_call_trains_nothing(tmp_path: Path, entry_trainings) -> None:
    data, test = images(60, 0), images(20, 1)
    arguments = {"test": test, "families": ["gd", "point", "mc-dropout"], "seeds": 2,
                 "database": tmp_path / "c.sqlite", **FAST}  # fmt: skip
    first = vbnn.compare(small_cnn, data, **arguments)
    assert len(entry_trainings) == 6
    second = vbnn.compare(small_cnn, data, **arguments)
    assert len(entry_trainings) == 6
    assert first.folds.equals(second.folds) and first.verdict == second.verdict
    as_dataset = vbnn.compare(small_cnn, TensorDataset(*data), **arguments)  # the same data
    assert len(entry_trainings) == 6 and as_dataset.folds.equals(first.folds)
    vbnn.compare(small_cnn, data, **(arguments | {"epochs": 3}))  # other settings: trained
    assert len(entry_trainings) == 12


def test_other_ivon_settings_retrain_only_the_ivon_entries(tmp_path: Path, entry_trainings) -> None:
    data, test = images(60, 0), images(20, 1)
    arguments = {"test": test, "families": ["ivon", "point"], "database": tmp_path / "c.sqlite",
                 **FAST}  # fmt: skip
    first = vbnn.compare(small_cnn, data, **arguments)
    assert len(entry_trainings) == 2
    slower = vbnn.compare(small_cnn, data, ivon=vbnn.IVON(learning_rate=0.01), **arguments)
    assert len(entry_trainings) == 3  # ivon alone: the point network's run is read back
    before = first.folds.set_index("family")["log_likelihood"]
    after = slower.folds.set_index("family")["log_likelihood"]
    assert before["point"] == after["point"] and before["ivon"] != after["ivon"]
    with pytest.raises(ValueError, match="ivon"):
        vbnn.compare(small_cnn, data, ivon={"learning_rate": 0.01}, **arguments)


def test_bad_input_fails_before_training(entry_trainings) -> None:
    data, test = images(40, 0), images(10, 1)
    with pytest.raises(ValueError, match=r"families\[1\]='deep': unknown; choose from \[.*'mf'"):
        vbnn.compare(small_cnn, data, test=test, families=["mf", "deep"])
    with pytest.raises(ValueError, match=r"network: <lambda>\(\) returned int, not an nn\.Module"):
        vbnn.compare(lambda: 3, data, test=test)
    with pytest.raises(ValueError, match="data: x has 40 examples, y has 39"):
        vbnn.compare(small_cnn, (data[0], data[1][:39]), test=test)
    with pytest.raises(ValueError, match=r"test: its examples have shape \(1, 9, 9\), the "):
        vbnn.compare(small_cnn, data, test=(torch.zeros(5, 1, 9, 9), test[1][:5]))
    with pytest.raises(ValueError, match=r"classes 1 \.\. 5 do not fit the 3 logits"):
        vbnn.compare(small_cnn, (data[0], data[1] * 2 + 1), test=test)
    with pytest.raises(
        ValueError, match=r"'fc': convert: 0 is an nn\.Conv2d; family 'fc' is dense only"
    ):
        vbnn.compare(small_cnn, data, test=test, families=["fc"])
    assert entry_trainings == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_without_cuda_is_refused_before_any_unit(entry_trainings) -> None:
    data, test = images(40, 0), images(10, 1)
    with pytest.raises(ValueError, match=r"device='cuda': .*; use device='cpu'"):
        vbnn.compare(small_cnn, data, test=test, families=["point"], device="cuda")
    with pytest.raises(ValueError, match=r"device='gpu': not a device"):
        vbnn.compare(small_cnn, data, test=test, families=["point"], device="gpu")
    assert entry_trainings == []


def test_test_labels_of_classes_absent_from_training_are_warned() -> None:
    """The unseen classes and the test examples that hold them, counted; none: no warning."""
    (x, y), (x_test, y_test) = images(40, 0), images(10, 1)
    y, y_test = y.clamp(max=1), y_test.clamp(max=1)

    def checked(test, splits=None):
        return prepare(
            small_cnn, (x, y), test, None, ["point"], 1, None, splits, NetworkConfig(), None
        )

    assert checked((x_test, y_test)).task is Task.CLASSIFICATION  # every class seen: silent
    y_test[:3] = 2
    seen = r"test: y_test holds 1 class\(es\) absent from the training labels, \[2\], in 3 of 10"
    with pytest.warns(UnseenClassWarning, match=seen):
        checked((x_test, y_test))
    y[0] = 2  # in the test rows of the first split only
    rows = np.arange(40)
    folds = r"1 of 2 replicates .* replicate 0's test rows hold 1 class\(es\) .*\[2\], in 1 of 3"
    with pytest.warns(UnseenClassWarning, match=folds):
        checked(None, [(rows[3:], rows[:3]), (rows[:30], rows[30:])])


def test_cli_with_a_model_function_and_an_npz(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "my_networks.py").write_text(
        "from torch import nn\n\n\ndef build():\n"
        "    return nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(64, 3))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    (x, y), (x_test, y_test) = images(60, 0), images(20, 1)
    archive = tmp_path / "data.npz"
    np.savez(archive, x=x.numpy(), y=y.numpy(), x_test=x_test.numpy(), y_test=y_test.numpy(),
             x_ood=3 * x_test.numpy())  # fmt: skip
    out = tmp_path / "out"
    arguments = ["compare", "--model", "my_networks:build", "--data", str(archive), "--families",
                 "mf,point,mc-dropout", "--seeds", "2", "--epochs", "1", "--test-samples", "4",
                 "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(arguments) == 0
    printed = capsys.readouterr().out
    assert "task: classification (y holds integer classes)" in printed
    assert "AUROC (entropy)" in printed and "2 seeds" in printed
    assert (out / "compare.png").is_file() and (out / "results.sqlite").is_file()
    assert main(["compare", str(archive)]) == 2
    assert f"give the data file as --data {archive} (as vbnn fit does)" in capsys.readouterr().err
    assert main(["compare", "--model", "my_networks:nothing", "--data", str(archive)]) == 2
    assert "has no function 'nothing'" in capsys.readouterr().err


def test_cli_ivon_flags_reach_the_ivon_entries(tmp_path: Path, monkeypatch, capsys,
                                               entry_trainings) -> None:  # fmt: skip
    (tmp_path / "tiny_networks.py").write_text(
        "from torch import nn\n\n\ndef build():\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64, 3))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    (x, y), (x_test, y_test) = images(40, 0), images(10, 1)
    archive = tmp_path / "data.npz"
    np.savez(archive, x=x.numpy(), y=y.numpy(), x_test=x_test.numpy(), y_test=y_test.numpy())
    arguments = ["compare", "--model", "tiny_networks:build", "--data", str(archive), "--families",
                 "ivon", "--epochs", "1", "--test-samples", "2", "--out", str(tmp_path / "out"),
                 "--no-progress"]  # fmt: skip
    assert main([*arguments, "--ivon-learning-rate", "0.05", "--ivon-hess-init", "2",
                 "--ivon-clip-radius", "inf"]) == 0  # fmt: skip
    assert [options["optimizer"] for _, options in entry_trainings] == [
        vbnn.IVON(learning_rate=0.05, hess_init=2.0, clip_radius=float("inf"))
    ]
    assert main([*arguments, "--ivon-learning-rate", "-1"]) == 2
    assert "IVON: learning_rate must be > 0, got -1.0" in capsys.readouterr().err
