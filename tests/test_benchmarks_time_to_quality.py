"""The time-to-quality benchmark: its smallest run, its resumption, and its gradient variance."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import pytest
import torch
from torch import nn

import vbnn

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def benchmark(monkeypatch):
    """The benchmark's modules, imported as the script imports them (from benchmarks/)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import gradient_variance
    import time_to_quality

    return time_to_quality, gradient_variance


def test_smoke_run_stores_units_and_resumes(benchmark, tmp_path, monkeypatch, capsys):
    time_to_quality, _ = benchmark
    data = Path(os.environ.get("VBNN_DATA_DIR", SHARED_DATA))
    if not (data / "mnist" / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST not found under {data}")
    monkeypatch.setenv("VBNN_DATA_DIR", str(data))
    argv = ["--smoke", "--networks", "mlp", "--budgets", "0.2", "0.4", "--variance-steps", "1",
            "--threads", "1", "--out", str(tmp_path)]  # fmt: skip
    time_to_quality.main(argv)
    bayesian_torch = time_to_quality.bayesian_torch_version() is not None
    arms = (5 if bayesian_torch else 3) + 2  # and vbnn-ivon, vbnn-ivon-defaults
    arms += time_to_quality.ivon_opt_version() is not None
    if not bayesian_torch:
        assert "pip install --no-deps bayesian-torch==0.5.0" in capsys.readouterr().out
    records = [json.loads(path.read_text()) for path in tmp_path.glob("*.json")]
    assert len(records) == 2 * arms  # a training and a variance unit per arm, one seed
    for record in records:
        info, kind = record["info"], record["settings"]["kind"]
        assert info["environment"]["threads"] == 1
        if kind == "training":
            assert [mark["budget"] for mark in info["marks"]] == [0.2, 0.4]
            for mark in info["marks"]:
                assert mark["seconds"] >= mark["budget"] and mark["steps"] >= 1
                assert math.isfinite(mark["nll"]) and 0 <= mark["ece"] <= 1
        else:
            layers = info["layers"]
            # the MLP's three dense layers (ivon-opt's arm wraps the network as ``network``)
            assert {name.removeprefix("network.") for name in layers} == {"1", "3", "5", "total"}
            noise = layers["total"]["noise_variance"]
            # point weights draw no noise; ivon-opt draws its noise in its optimiser's step, which
            # the variance unit's forward passes do not take
            plain = record["settings"]["arm"] in ("plain", "ivon-opt")
            assert noise == 0 if plain else noise > 0
    table = (tmp_path / "table.md").read_text()
    assert "| mlp | vbnn-lrt | 0.4 | 1 |" in table
    assert (tmp_path / "nll_vs_time.png").stat().st_size > 0

    def refuse(*args, **kwargs):
        raise AssertionError("a stored unit was computed again")

    monkeypatch.setattr(time_to_quality, "build", refuse)
    time_to_quality.main(argv)  # every unit is stored: nothing is trained
    assert (tmp_path / "table.md").read_text() == table


def test_gradient_variance_matches_a_known_gradient_distribution(benchmark):
    """loss = sum_p w_p (c_p + z_p), z ~ N(0, 1): the gradient is c + z, so tr Cov = P and the
    relative variance P / ||c||^2; tolerances from the chi-square spread of the estimate."""
    _, gradient_variance = benchmark
    features, draws = 400, 50
    layer = nn.Linear(features, 1, bias=False)
    offset = torch.full((1, features), 0.5)

    def loss(batch: int) -> torch.Tensor:
        return (layer.weight * (offset + torch.randn(1, features))).sum()

    result = gradient_variance.gradient_variance(layer, loss, 10, draws, torch.Generator())
    row = result[""]
    assert row == result["total"] and row["parameters"] == features
    # sum of P independent unbiased variances, each with variance 2 / (R - 1)
    standard_error = math.sqrt(2 * features / (draws - 1))
    for name in ("noise_variance", "minibatch_variance"):
        assert abs(row[name] - features) < 5 * standard_error
    # ||mean||^2 = ||c||^2 + tr Cov / R in expectation
    assert row["squared_mean"] == pytest.approx(0.25 * features + features / draws, rel=0.1)
    assert row["minibatch_relative"] == pytest.approx(
        row["minibatch_variance"] / row["squared_mean"]
    )


def test_gradient_variance_refuses_one_draw(benchmark):
    _, gradient_variance = benchmark
    layer = nn.Linear(2, 1)
    with pytest.raises(ValueError, match="draws must be >= 2"):
        gradient_variance.gradient_variance(
            layer, lambda b: layer.weight.sum(), 1, 1, torch.Generator()
        )


def test_protocol_reads_its_clock(benchmark):
    time_to_quality, _ = benchmark
    assert time_to_quality.Protocol(clock="steps").clock is time_to_quality.Clock.STEPS
    with pytest.raises(ValueError, match="'hourglass' is not a valid Clock"):
        time_to_quality.Protocol(clock="hourglass")


def test_shards_split_the_units_and_default_stds_keep_their_keys(benchmark, monkeypatch):
    """Two shards compute every unit once between them; a vbnn arm at the layers' default std
    has the key it had before ``--init-stds`` existed (no ``init_std`` field)."""
    time_to_quality, _ = benchmark
    module = time_to_quality
    for text, expected in (("0/2", (0, 2)), ("1/2", (1, 2))):
        assert module.shard_argument(text) == expected
    for bad in ("2/2", "x", "1"):
        with pytest.raises(module.argparse.ArgumentTypeError, match="--shard"):
            module.shard_argument(bad)
    computed: list[tuple] = []

    def record(network_name, arm, seed, init_std=None):
        computed.append((network_name, arm, seed, init_std))
        raise _Stop

    class _Stop(Exception):
        pass

    monkeypatch.setattr(module, "images", lambda *args: (None,) * 4)
    monkeypatch.setattr(module, "build", record)
    monkeypatch.setattr(module.unit_store, "load_info", lambda out, key: None)
    arms = [module.Arm.PLAIN, module.Arm.VBNN_LRT]
    for shard in ((0, 2), (1, 2)):
        with pytest.raises(_Stop):
            module.run(Path("unused"), [module.Network.MLP], arms, [0, 1], module.Protocol(),
                       ("training",), shard, (None, 0.01))  # fmt: skip
    # the first unit of each shard: unit 0 and unit 1 of (plain 0, plain 1, lrt 0, ...)
    assert [c[1:3] for c in computed] == [(module.Arm.PLAIN, 0), (module.Arm.PLAIN, 1)]
    variants = module.variants([*arms, module.Arm.VBNN_CONV_WEIGHTS], (None, 0.01),
                               module.Network.MLP)  # fmt: skip
    assert variants == [(module.Arm.PLAIN, None), (module.Arm.VBNN_LRT, None),
                        (module.Arm.VBNN_LRT, 0.01)]  # fmt: skip
    protocol = module.Protocol()
    plain_key = module.settings("training", module.Network.MLP, module.Arm.VBNN_LRT, 0, protocol)
    assert "init_std" not in plain_key
    assert module.settings("training", module.Network.MLP, module.Arm.VBNN_LRT, 0, protocol,
                           0.01)["init_std"] == 0.01  # fmt: skip
    assert module.label(module.Arm.VBNN_LRT, 0.01) == "vbnn-lrt, std 0.01"


def test_steps_clock_trains_the_budget_over_the_step_time_and_repeats_exactly(benchmark):
    module, _ = benchmark
    protocol = module.Protocol(budgets=(0.05, 0.1), train_size=256, test_size=64, batch_size=64,
                               test_draws=2, clock="steps")  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    x, y = torch.rand(256, 1, 28, 28, generator=generator), torch.arange(256) % 10
    runs = []
    for _ in range(2):
        built = module.build(module.Network.MLP, module.Arm.VBNN_LRT, 0)
        trainer = module.Trainer(module.Arm.VBNN_LRT, built, (x, y), protocol, 0)
        runs.append(module.train_unit(trainer, (x[:64], y[:64]), protocol, 0, step_ms=20.0))
    assert [mark["steps"] for mark in runs[0]["marks"]] == [3, 5]  # ceil(50/20), ceil(100/20)
    assert runs[0] == runs[1]  # the same seed, the same numbers


def test_step_timing_interleaves_the_models(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import step_timing

    calls: list[str] = []

    class Recorder:
        def __init__(self, name: str) -> None:
            self.name = name

        def step(self) -> None:
            calls.append(self.name)

    result = step_timing.measure_step_times({"a": Recorder("a"), "b": Recorder("b")}, 1, 2, 2)
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] * 2  # warm-up, then rounds in turn
    assert [len(result["rounds"][name]) for name in "ab"] == [2, 2]
    assert set(result["ms_per_step"]) == {"a", "b"}
    with pytest.raises(ValueError, match="rounds must be >= 1, got 0"):
        step_timing.measure_step_times({}, 0, 1, 0)


def _gaussian_kl(mean: torch.Tensor, std: torch.Tensor, prior_std: float) -> torch.Tensor:
    """KL(N(mean, std^2) || N(0, prior_std^2)) elementwise, written out."""
    return torch.log(prior_std / std) + (std**2 + mean**2) / (2 * prior_std**2) - 0.5


def test_prior_choice_kls_are_the_written_out_sums(benchmark, monkeypatch):
    """The fan-in prior: each layer's weights and biases against N(0, 1 / fan_in) of its own
    fan-in (dense: inputs; convolution: channels x kernel taps); bayesian-torch's scaling: each
    layer's KL to N(0, 1) over its number of weights and biases."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import prior_choice

    torch.manual_seed(0)
    net = vbnn.convert(nn.Sequential(nn.Conv2d(2, 3, 3), nn.Flatten(), nn.Linear(3 * 4 * 4, 5)),
                       "mf", init_std=0.05)  # fmt: skip
    layers = vbnn.variational_layers(net)
    fan_ins = [2 * 3 * 3, 3 * 4 * 4]
    parts = [[(layer.weight_mean, layer.weight_std()), (layer.bias_mean, layer.bias_std())]
             for layer in layers]  # fmt: skip
    with torch.no_grad():
        fan_in = sum(_gaussian_kl(m, s, 1 / math.sqrt(f)).sum()
                     for pairs, f in zip(parts, fan_ins, strict=True)
                     for m, s in pairs)  # fmt: skip
        layer_mean = sum(sum(_gaussian_kl(m, s, 1.0).sum() for m, s in pairs)
                         / sum(m.numel() for m, _ in pairs) for pairs in parts)  # fmt: skip
        torch.testing.assert_close(prior_choice.kl_with("fan-in")(net), fan_in)
        torch.testing.assert_close(prior_choice.kl_with("layer-mean")(net), layer_mean)
        assert prior_choice.kl_with("standard") is vbnn.kl


def test_prior_choice_validation_images_are_not_trained_on(benchmark, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import prior_choice

    images = torch.arange(50.0).reshape(50, 1)  # row i holds i
    monkeypatch.setattr(prior_choice, "load_images", lambda *args: (images, torch.arange(50)))
    protocol = benchmark[0].Protocol(train_size=20, test_size=10, batch_size=4)
    _, train_y, held_x, held_y = prior_choice.validation_images(benchmark[0].Network.MLP, protocol)
    assert len(train_y) == 20 and len(held_y) == 10
    assert not set(train_y.tolist()) & set(held_y.tolist())
    assert torch.equal(held_x.squeeze(1), held_y.float())  # rows kept with their labels


def test_prior_choice_training_elbo_is_the_expected_nll_plus_the_kl_per_image(
    benchmark, monkeypatch
):
    """The measured negative ELBO per training image: the mean of cross-entropy over the weight
    draws (not the predictive's NLL) plus KL / N; measuring leaves training's RNG where it was."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import prior_choice

    ttq = benchmark[0]
    protocol = ttq.Protocol(train_size=64, test_size=32, batch_size=32, test_draws=3, threads=1)
    generator = torch.Generator().manual_seed(0)
    x, y = torch.rand(64, 1, 28, 28, generator=generator), torch.randint(0, 10, (64,))
    model, kl = ttq.build(ttq.Network.MLP, ttq.Arm.VBNN_LRT, 0, init_std=0.05)
    trainer = ttq.Trainer(ttq.Arm.VBNN_LRT, (model, kl), (x, y), protocol, 0)
    torch.manual_seed(5)
    metrics = prior_choice.with_training_elbo(trainer)(model, trainer.arm, x[:32], y[:32],
                                                        protocol, 11)  # fmt: skip
    after = torch.rand(1)
    torch.manual_seed(5)
    assert torch.equal(after, torch.rand(1))
    model.eval()
    with torch.no_grad(), torch.random.fork_rng(devices=[]), vbnn.mode(model, "weights"):
        torch.manual_seed(11)
        nll = sum(nn.functional.cross_entropy(model(x), y) for _ in range(3)) / 3
        expected_kl = vbnn.kl(model) / 64
    assert metrics["training_nll"] == pytest.approx(nll.item(), rel=1e-5)
    assert metrics["kl_per_image"] == pytest.approx(expected_kl.item(), rel=1e-6)
    assert metrics["negative_elbo"] == pytest.approx(nll.item() + expected_kl.item(), rel=1e-5)


def test_sequence_arms_draw_per_sequence_or_per_minibatch(benchmark):
    """On the row networks, ``vbnn-sequence-draw`` gives every sequence its own weights (equal
    inputs, different outputs) and ``vbnn-batch-draw`` one draw for the minibatch (equal inputs,
    equal outputs, the dense layers on one shared draw too); the image networks keep the six
    arms their timing units were keyed by."""

    ttq = benchmark[0]
    x = torch.rand(1, 1, 28, 28).expand(4, 1, 28, 28)
    for network_name in ttq.SEQUENCE_NETWORKS:
        assert [arm for arm, _ in ttq.variants(list(ttq.Arm), [None], network_name)] == list(
            ttq.SEQUENCE_ARMS
        )
        for arm, shared in ((ttq.Arm.VBNN_SEQUENCE_DRAW, False), (ttq.Arm.VBNN_BATCH_DRAW, True)):
            model, _ = ttq.build(network_name, arm, 0, init_std=0.1)
            with torch.no_grad(), vbnn.mode(model, "weights"):
                out = model(x)
            assert torch.allclose(out, out[:1].expand_as(out), atol=1e-6) is shared, arm
    assert ttq.network_arms(ttq.Network.MLP) == (
        ttq.Arm.PLAIN, ttq.Arm.VBNN_LRT, ttq.Arm.VBNN_WEIGHTS, ttq.Arm.VBNN_CONV_WEIGHTS,
        ttq.Arm.BT_REPARAMETERIZATION, ttq.Arm.BT_FLIPOUT,
    )  # fmt: skip
    # the arm at vbnn.IVON()'s defaults is timed beside plain alone, and the defaults key it
    ivon = ttq.Arm.VBNN_IVON_DEFAULTS
    assert ttq.timing_arms(ttq.Network.MLP, ivon) == (ttq.Arm.PLAIN, ivon)
    assert ivon not in ttq.NATURAL_GRADIENT_ARMS and ivon in ttq.measured_arms(ttq.Network.MLP)
    optimizer = ttq.optimizer(ivon, ttq.build(ttq.Network.MLP, ivon, 0)[0], ttq.Protocol())
    group = optimizer.param_groups[0]
    assert (group["lr"], group["clip_radius"]) == (
        vbnn.IVON().learning_rate,
        vbnn.IVON().clip_radius,
    )
    key = ttq.settings("training", ttq.Network.MLP, ivon, 0, ttq.Protocol())
    assert key["ivon"] == dataclasses.asdict(vbnn.IVON())
    paper = ttq.optimizer(ttq.Arm.VBNN_IVON, ttq.build(ttq.Network.MLP, ivon, 0)[0], ttq.Protocol())
    assert paper.param_groups[0]["clip_radius"] == math.inf  # Shen et al.'s, whatever the default
