"""``compare``'s adapter entries (``methods.lora``): ``lora``, ``lora-ensemble``, ``mf-lora``,
``ivon-lora`` on a pretrained network.

Mathematics: B = 0 at the start, so a prepared network computes the pretrained function exactly;
the ensemble's members share the pretrained weights and differ in their adapters. Mechanics: every
entry runs to finite metrics and leaves the source network's weights bitwise; the adapter's
settings key the adapter entries' runs alone; a bad target or a table is refused before training.
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
import torch
from torch import nn

import vbnn
from vbnn.comparison import entries
from vbnn.comparison.entries import EntryRun, NetworkSource, train_entry
from vbnn.methods.laplace import fit_laplace
from vbnn.methods.registry import METHODS
from vbnn.networks.adapter import AdapterFactors, LowRankAdapter
from vbnn.stores.results_db import config_hash

ADAPTERS = ("lora", "lora-ensemble", "mf-lora", "ivon-lora", "laplace-lora")
FAST = {"epochs": 2, "batch_size": 32, "test_samples": 4, "ensemble_size": 2}
needs_laplace = pytest.mark.skipif(
    importlib.util.find_spec("laplace") is None, reason="laplace-lora needs laplace-torch"
)
HEAD = vbnn.LoRA(rank=2, targets=("0", "2"), trainable=("4",))


def pretrained() -> nn.Module:
    """An MLP standing for a pretrained network: two hidden layers to adapt and a head."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3)
    )


def classes(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(rows, 4, generator=torch.Generator().manual_seed(seed))
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 1).long()


def run(name: str, **changes) -> EntryRun:
    values = {"method": name, "epochs": 2, "batch_size": 32, "learning_rate": 1e-2,
              "samples": 4, "ensemble_size": 1, "seed": 0} | changes  # fmt: skip
    return EntryRun(**values)


def test_every_adapter_entry_runs_and_leaves_the_pretrained_weights(tmp_path: Path) -> None:
    network = pretrained()
    before = copy.deepcopy(network.state_dict())
    result = vbnn.compare(network, classes(80, 0), test=classes(40, 1), families=list(ADAPTERS),
                          adapter=HEAD, database=tmp_path / "c.sqlite", **FAST)  # fmt: skip
    assert set(result.folds["family"]) == set(ADAPTERS)
    metrics = result.folds[["log_likelihood", "accuracy", "ece"]]
    assert metrics.notna().all().all() and torch.isfinite(torch.tensor(metrics.values)).all()
    for key, value in network.state_dict().items():
        assert torch.equal(value, before[key]), key


@pytest.mark.parametrize("name", ADAPTERS)
def test_a_prepared_network_computes_the_pretrained_function(name: str) -> None:
    """B = 0: f(x) + (alpha / r) x A^T 0^T = f(x), exactly, whatever A (means, at eval)."""
    network, (x, _) = pretrained().double(), classes(10, 2)
    prepared = METHODS[name].prepare(copy.deepcopy(network), run(name, adapter=HEAD))
    prepared.eval()
    x = x.double()
    with torch.no_grad():
        assert torch.equal(prepared(x), network.eval()(x))
    adapters = [m for m in prepared.modules() if isinstance(m, LowRankAdapter)]
    assert len(adapters) == 2 and all(m.down.means()[0].abs().sum() > 0 for m in adapters)


def test_ivon_lora_makes_both_factors_variational_and_mf_lora_keeps_the_settings() -> None:
    assert METHODS["ivon-lora"].adapter(run("ivon-lora")).variational is AdapterFactors.BOTH
    assert METHODS["mf-lora"].adapter(run("mf-lora")).variational is AdapterFactors.DOWN
    assert METHODS["mf-lora"].adapter(run("mf-lora", adapter=HEAD)) == HEAD


@needs_laplace
def test_laplace_lora_is_a_laplace_over_the_adapter_alone() -> None:
    """The Gaussian's dimension is the adapter's (A, B and the trainable head), not the frozen
    network's; its diagonal GGN precision is positive and exceeds the prior precision."""
    name = "laplace-lora"
    network = METHODS[name].prepare(pretrained(), run(name, adapter=HEAD)).eval()
    adapter = sum(p.numel() for p in network.parameters() if p.requires_grad)
    assert adapter == (2 * 4 + 16 * 2) + (2 * 16 + 16 * 2) + (3 * 16 + 3)  # A, B; A, B; head
    approximation = fit_laplace(network, classes(60, 0), False, 1.0, 30, "all", "diag")
    assert approximation.n_params == adapter
    precision = approximation.posterior_precision
    assert precision.shape == (adapter,) and (precision >= approximation.prior_precision).all()


def test_the_ensemble_members_share_the_pretrained_weights(monkeypatch) -> None:
    """A deep ensemble of adapters: every member trains on the same frozen network (a module's
    weights are not redrawn, as ``ensemble``'s are), from its own adapter draw; a second call
    repeats every draw."""
    seen: list[tuple[dict, list[torch.Tensor]]] = []
    real = entries.train

    def recorded(network, data, **options):
        frozen = {k: v.clone() for k, v in network.state_dict().items() if ".base." in k}
        downs = [m.down.means()[0].clone() for m in network.modules()
                 if isinstance(m, LowRankAdapter)]  # fmt: skip
        seen.append((frozen, downs))
        return real(network, data, **options)

    monkeypatch.setattr(entries, "train", recorded)
    source, data, test = NetworkSource(pretrained()), classes(80, 0), classes(20, 1)
    ensemble = run("lora-ensemble", ensemble_size=3, adapter=HEAD)
    first = train_entry(source, ensemble, 0, data, test[0], None, False)
    (frozen, downs), others = seen[0], seen[1:3]
    assert len(frozen) == 4 and len(seen) == 3
    for other_frozen, other_downs in others:
        assert all(torch.equal(frozen[k], other_frozen[k]) for k in frozen)
        assert not any(torch.equal(a, b) for a, b in zip(downs, other_downs, strict=True))
    second = train_entry(source, ensemble, 0, data, test[0], None, False)
    assert torch.equal(first.test, second.test)


def test_adapter_settings_key_the_adapter_runs_alone(tmp_path: Path, entry_trainings) -> None:
    arguments = {"test": classes(40, 1), "families": ["lora", "mf-lora", "point"],
                 "database": tmp_path / "c.sqlite", **FAST}  # fmt: skip
    first = vbnn.compare(pretrained, classes(80, 0), adapter=HEAD, **arguments)
    assert len(entry_trainings) == 3
    again = vbnn.compare(pretrained, classes(80, 0), adapter=HEAD, **arguments)
    assert len(entry_trainings) == 3 and again.folds.equals(first.folds)
    vbnn.compare(pretrained, classes(80, 0), adapter=vbnn.LoRA(rank=4), **arguments)
    assert len(entry_trainings) == 5  # the two adapter entries; point's run is read back
    hashes = {config_hash(run(n, adapter=HEAD)) for n in ("lora", "mf-lora")}
    assert len(hashes | {config_hash(run("lora", adapter=vbnn.LoRA(rank=4)))}) == 3
    assert config_hash(run("point", adapter=None)) == config_hash(run("point"))


def test_bad_adapter_requests_are_refused_before_training(entry_trainings) -> None:
    data = classes(40, 0)
    with pytest.raises(ValueError, match=r"families\[0\]='mf-lora'.*'attention'.*match no"):
        vbnn.compare(pretrained, data, families=["mf-lora"],
                     adapter=vbnn.LoRA(targets=("attention",)), **FAST)  # fmt: skip
    with pytest.raises(ValueError, match="invalid adapter="):
        vbnn.compare(pretrained, data, families=["lora"], adapter="rank 8", **FAST)
    with pytest.raises(ValueError, match="'lora' adapts a pretrained network"):
        vbnn.compare(data[0].numpy(), data[1].numpy(), families=["lora"], task="classification")
    assert entry_trainings == []
