"""Bayesian low-rank adapters (``vbnn.LoRA``): the update B A on frozen pretrained weights.

Mathematics: B = 0 leaves the function unchanged in every mode; the adapter's KL is the closed
form over A (and B); a full-rank adapter with B = I on a dense layer is the dense family with
means W0 + mu_A. Mechanics: the pretrained weights stay bitwise after training (Adam and IVON);
the KL and ``vbnn.summary`` count the adapter alone; its state round-trips alone.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

import vbnn
from vbnn.networks.adapter import LowRankAdapter
from vbnn.networks.summary import summary_rows

MODES = ("mean", "local", "weights")


def mlp() -> nn.Module:
    torch.manual_seed(0)
    layers = (nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))
    return nn.Sequential(*layers)


def tiny_gpt2() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_embd=32,
        n_layer=2,
        n_head=2,
        vocab_size=50,
        n_positions=32,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return transformers.GPT2LMHeadModel(config)


def closed_form_kl(mean: torch.Tensor, std: torch.Tensor, prior_std: float) -> torch.Tensor:
    """KL(N(mean, std^2) || N(0, prior_std^2)) summed over the entries."""
    ratio = (std / prior_std) ** 2
    return 0.5 * (ratio + (mean / prior_std) ** 2 - 1.0 - torch.log(ratio)).sum()


@pytest.mark.parametrize("family", sorted(vbnn.FAMILIES))
def test_zero_up_factor_leaves_the_function_unchanged_in_every_mode(family: str) -> None:
    original = mlp().double()
    if family in ("fc", "fc-low-rank"):  # a covariance over the weights and the bias
        with pytest.raises(ValueError, match="bias=False is not supported"):
            vbnn.convert(original, family, adapter=vbnn.LoRA())
        return
    adapted = vbnn.convert(original, family, adapter=vbnn.LoRA(rank=3, targets=("0", "4")))
    assert [type(adapted[i]) for i in (0, 2, 4)] == [LowRankAdapter, nn.Linear, LowRankAdapter]
    x = torch.randn(8, 4, dtype=torch.float64)
    for forward_mode in MODES:
        with vbnn.mode(adapted, forward_mode):
            assert torch.equal(adapted(x), original(x)), forward_mode


def test_zero_up_factor_leaves_gpt2_unchanged_while_it_samples() -> None:
    original = tiny_gpt2().eval()
    adapted = vbnn.convert(original, "mf", adapter=vbnn.LoRA(rank=4, targets=["c_attn", "c_fc"]))
    adapters = [m for m in adapted.modules() if isinstance(m, LowRankAdapter)]
    assert len(adapters) == 4 and adapters[0].down.in_features == 32
    assert adapters[0].up.out_features == 96  # Conv1D (32, 96): q, k and v
    ids = torch.randint(0, 50, (3, 10), generator=torch.Generator().manual_seed(1))
    adapted.train()  # draws A; the logits stay the pretrained ones while B = 0
    assert torch.equal(adapted(ids).logits, original(ids).logits)


@pytest.mark.parametrize("variational", ["down", "both"])
def test_adapter_kl_is_the_closed_form_over_its_factors(variational: str) -> None:
    """KL(q || N(0, s^2)) = 1/2 sum (sigma^2/s^2 + mu^2/s^2 - 1 - log(sigma^2/s^2)) over A (and
    B): the pretrained weights add nothing."""
    adapter = vbnn.LoRA(rank=2, alpha=4.0, variational=variational)
    adapted = vbnn.convert(mlp(), "mf", adapter=adapter, init_std=0.3)
    layers = [m for m in adapted.modules() if isinstance(m, LowRankAdapter)]
    assert len(layers) == 3
    with torch.no_grad():  # B away from 0, so that its mean term counts
        for layer in layers:
            for part in (layer.down, layer.up):
                getattr(part, "weight_mean", getattr(part, "weight", None)).normal_()
    factors = [(m.down,) if variational == "down" else (m.down, m.up) for m in layers]
    expected = sum(closed_form_kl(f.weight_mean, f.weight_std(), 0.5) for fs in factors for f in fs)
    torch.testing.assert_close(vbnn.kl(adapted, vbnn.GaussianPrior(0.5)), expected)


def test_full_rank_adapter_with_identity_up_factor_is_the_dense_family() -> None:
    """W0 + (alpha / r) B A with r = O, alpha = r, B = I is W0 + A: the mf dense layer whose
    means are W0 + mu_A and stds those of A, in every mode and with the same draws; its KL is
    the dense layer's when W0 = 0."""
    torch.manual_seed(0)
    base = nn.Linear(5, 3, bias=False).double()
    adapter = vbnn.convert(base, "mf", adapter=vbnn.LoRA(rank=3, alpha=3.0), init_std=0.2)
    dense = vbnn.MeanField(5, 3, bias=False, dtype=torch.float64)
    with torch.no_grad():
        adapter.up.weight.copy_(torch.eye(3))
        adapter.down.weight_mean.normal_()
        adapter.down.weight_log_std.uniform_(-2.0, 0.0)
        dense.weight_mean.copy_(base.weight.t() + adapter.down.weight_mean)
        dense.weight_log_std.copy_(adapter.down.weight_log_std)
    x = torch.randn(7, 5, dtype=torch.float64)
    for forward_mode in MODES:
        torch.manual_seed(3)
        with vbnn.mode(adapter, forward_mode):
            sampled = adapter(x)
        torch.manual_seed(3)
        torch.testing.assert_close(sampled, dense(x, forward_mode))
    with torch.no_grad():
        base.weight.zero_()
        dense.weight_mean.copy_(adapter.down.weight_mean)
    torch.testing.assert_close(vbnn.kl(adapter), vbnn.kl(dense))


@pytest.mark.parametrize("optimizer", ["adam", "ivon"])
def test_training_moves_the_adapter_and_leaves_the_pretrained_weights_bitwise(
    optimizer: str,
) -> None:
    original = mlp()
    adapter = vbnn.LoRA(rank=2, targets=("0", "2"), trainable=("4",))
    adapted = vbnn.convert(original, "mf", adapter=adapter)
    before = copy.deepcopy(adapted.state_dict())
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    y = torch.sin(x.sum(1, keepdim=True))
    vbnn.train(
        adapted,
        (x, y),
        epochs=2,
        batch_size=16,
        learning_rate=1e-2,
        progress=False,
        optimizer=optimizer,
    )
    after = adapted.state_dict()
    moved = {key for key in before if not torch.equal(before[key], after[key])}
    adapter_keys = set(vbnn.adapter_state_dict(adapted))
    assert moved <= adapter_keys
    assert {"0.up.weight", "0.down.weight_mean", "2.down.weight_log_std", "4.weight"} <= moved
    for key, value in original.state_dict().items():  # the pretrained layers, by their paths
        if not key.startswith("4."):  # the trainable head
            assert torch.equal(after[key.replace(".", ".base.", 1)], value), key


def test_gpt2_fine_tuning_moves_both_factors_and_leaves_every_pretrained_weight() -> None:
    """Three Adam steps on the ELBO per token of a GPT-2 with A and B variational (the
    IVON-LoRA form): B leaves 0, the pretrained tensors (tied embedding and head too) stay."""
    original = tiny_gpt2()
    lora = vbnn.LoRA(rank=2, targets="c_attn", variational="both")
    adapted = vbnn.convert(original, "mf", adapter=lora, init_std=0.05)
    trained = [p for p in adapted.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trained, lr=1e-2)
    ids = torch.randint(0, 50, (4, 12), generator=torch.Generator().manual_seed(2))
    for _ in range(3):
        loss = adapted(input_ids=ids, labels=ids).loss + vbnn.kl(adapted) / 1000
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    up = adapted.transformer.h[0].attn.c_attn.up
    assert up.weight_mean.abs().max() > 0
    state = adapted.state_dict()
    for key, value in original.state_dict().items():
        adapted_key = key.replace("c_attn.", "c_attn.base.")
        assert torch.equal(state[adapted_key], value), key


def test_kl_and_summary_count_the_adapter_alone() -> None:
    original = tiny_gpt2()
    rank = 4
    adapted = vbnn.convert(original, "mf", adapter=vbnn.LoRA(rank=rank, targets="c_attn"))
    variational, total = summary_rows(adapted)[-2:]
    per_layer = (32 * rank) * 2 + rank * 96  # A's means and stds, B
    assert variational.parameters == 2 * per_layer
    assert total.parameters == sum(p.numel() for p in original.parameters()) + 2 * per_layer
    assert sum(p.numel() for p in adapted.parameters() if p.requires_grad) == 2 * per_layer
    table = vbnn.summary(adapted)
    assert "transformer.h.0.attn.c_attn.down  MeanField  mf" in table
    assert table.count("frozen") == len([r for r in table.splitlines() if "deterministic" in r])
    downs = [m.down for m in adapted.modules() if isinstance(m, LowRankAdapter)]
    expected = sum(closed_form_kl(d.weight_mean, d.weight_std(), 1.0) for d in downs)
    torch.testing.assert_close(vbnn.kl(adapted), expected)


def test_adapter_state_round_trips_alone(tmp_path) -> None:
    original = mlp()
    adapter = vbnn.LoRA(rank=2, targets=("2", "4"))
    trained = vbnn.convert(original, "mf", adapter=adapter)
    with torch.no_grad():
        for parameter in trained.parameters():
            if parameter.requires_grad:
                parameter.normal_()
    state = vbnn.adapter_state_dict(trained)
    assert sorted(state) == [
        f"{i}.{part}"
        for i in (2, 4)
        for part in ("down.weight_log_std", "down.weight_mean", "up.weight")
    ]
    assert sum(t.numel() for t in state.values()) == 2 * (16 * 2) * 2 + 2 * 16 + 2 * 1
    torch.save(state, tmp_path / "adapter.pt")
    fresh = vbnn.convert(original, "mf", adapter=adapter)
    vbnn.load_adapter(fresh, torch.load(tmp_path / "adapter.pt"))
    x = torch.randn(5, 4)
    assert torch.equal(fresh.eval()(x), trained.eval()(x))
    with pytest.raises(ValueError, match=r"missing \['4.up.weight'\], unexpected \[\]"):
        vbnn.load_adapter(fresh, {k: v for k, v in state.items() if k != "4.up.weight"})
    wider = vbnn.convert(original, "mf", adapter=vbnn.LoRA(rank=3, targets=("2", "4")))
    with pytest.raises(ValueError, match=r"2.down.weight_mean is \(1, 16, 2\) in the state"):
        vbnn.load_adapter(wider, state)


def test_bad_requests_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match=r"targets \['query'\] match no nn.Linear or Conv1D"):
        vbnn.convert(mlp(), "mf", adapter=vbnn.LoRA(targets=["query", "0"]))
    with pytest.raises(ValueError, match="rank must be an int >= 1"):
        vbnn.LoRA(rank=0)
    with pytest.raises(ValueError, match=r"keep=\['0'\] with an adapter"):
        vbnn.convert(mlp(), "mf", keep=["0"], adapter=vbnn.LoRA())
    with pytest.raises(ValueError, match="family 'zero-mean' has no weight mean"):
        vbnn.convert(mlp(), "zero-mean", adapter=vbnn.LoRA(variational="both"))
    with pytest.raises(ValueError, match="adapter_state_dict: Sequential holds no adapter"):
        vbnn.adapter_state_dict(mlp())
    assert math.isclose(vbnn.LoRA(rank=8, alpha=16.0).scale, 2.0)
