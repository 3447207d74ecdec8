"""The depth reproduction: model pieces, and a tiny end-to-end run writing every output."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from vbnn.core.contracts import Activation, ForwardMode, ParameterRole
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.mean_field import MeanField, softplus_inverse
from vbnn.networks.mlp import MLP
from vbnn.training.optimizer import parameters_with_role
from vbnn_lab import depth
from vbnn_lab.depth.models import PretrainConfig, depth_widths, parameter_count

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
REPRODUCTION = Path(__file__).resolve().parents[2] / "reproductions" / "depth"  # committed runs


def depth_command(*flags: str) -> None:
    """``vbnn reproduce depth`` with ``flags``, raising (``vbnn.cli.main`` prints the error)."""
    parser = argparse.ArgumentParser()
    depth.add_arguments(parser)
    depth.run(parser.parse_args(list(flags)))


@pytest.mark.parametrize(("layers", "width"), [(1, 249), (2, 29), (3, 20), (5, 14)])
def test_widths_are_the_largest_under_the_budget(layers: int, width: int) -> None:
    sizes = depth_widths(layers)
    assert sizes == [2, *[width] * layers, 1]
    assert parameter_count(sizes) <= 1000 < parameter_count([2, *[width + 1] * layers, 1])


def test_softplus_layer_starts_at_the_requested_std_and_samples_its_marginals() -> None:
    assert math.log1p(math.exp(softplus_inverse(1e-6))) == pytest.approx(1e-6, rel=1e-9)
    layer = MeanField(
        3, 2, ModelGenerators([0]), init_std=0.7, parameterization="softplus", init="he"
    )
    weight_std, bias_std = layer.posterior_std()
    torch.testing.assert_close(bias_std, torch.full((1, 2), 0.7))
    torch.testing.assert_close(weight_std, torch.full((1, 3, 2), 0.7))
    # LRT output: mean x mu + b, variance sum_i x_i^2 s^2 + s^2 = (5.25 + 1) 0.49
    x = torch.tensor([[[1.0, -2.0, 0.5]]]).expand(1, 40_000, 3).contiguous()
    out = layer(x, ForwardMode.LOCAL, ModelGenerators([1]))
    expected_mean = layer(x[:, :1], ForwardMode.MEAN)[0, 0]
    standard_error = math.sqrt(6.25 * 0.49 / 40_000)
    assert (out.mean(1)[0] - expected_mean).abs().max() < 5 * standard_error
    torch.testing.assert_close(out.var(1)[0], torch.full((2,), 6.25 * 0.49), rtol=0.05, atol=0)


def test_pre_training_of_the_means_selects_the_weight_and_bias_means() -> None:
    """The MEAN role of the depth experiment's mean-field network: every ``*_mean`` parameter
    (Farquhar et al. 2020 pre-train the means), no std."""
    network = MLP("mf", depth_widths(2), Activation.RELU, parameterization="softplus", init="he")
    by_name = [p for name, p in network.named_parameters() if name.endswith("_mean")]
    selected = parameters_with_role(network, ParameterRole.MEAN)
    assert [id(p) for p in selected] == [id(p) for p in by_name]
    assert len(selected) == 2 * 3


def test_a_chain_store_keeps_the_pre_training_its_chains_start_from(tmp_path) -> None:
    """The first pre-training of a unit with a chain store is kept in its ``starts`` folder and
    read back after, bit for bit, also where this machine would train other weights (as another
    torch or CPU rounds the epochs): the chains' starts, and so their store keys, follow the
    stored weights; ``--chains-from`` brings them along where none is here and keeps this
    machine's where they differ; the run's chain ends keep them for the same unit with more
    draws."""
    pytest.importorskip("blackjax")
    from vbnn.references.chain_checkpoints import STARTS, merge_chain_stores
    from vbnn.stores import unit_store
    from vbnn_lab.depth.units import UnitSettings, pretrain

    def weights(pretrained) -> np.ndarray:
        network = torch.nn.utils.parameters_to_vector(pretrained.network.parameters()).detach()
        np.testing.assert_array_equal(pretrained.weights, network.numpy())  # the chains' start
        return pretrained.weights

    settings = UnitSettings(
        Activation.LEAKY_RELU, 2, 0, negative_slope=0.2, points=100,
        pretrain=PretrainConfig(epochs=1, mean_epochs=1),
    )  # fmt: skip
    there, here = tmp_path / "there" / "unit", tmp_path / "here" / "unit"
    trained = pretrain(settings, there)
    # keyed by what the pre-training depends on: the same for other chains (longer ones)
    key = {k: v for k, v in settings.to_dict().items() if k not in ("chains", "sampler")}
    stored, info = unit_store.load(there / STARTS, key)
    np.testing.assert_array_equal(stored["weights"], weights(trained))
    assert info["train_seconds"] == trained.train_seconds and weights(trained).dtype == np.float32
    # another machine's weights: read back as stored, not trained again
    elsewhere = stored["weights"] + np.float32(1e-6)
    unit_store.save(there / STARTS, key, {"weights": elsewhere}, info)
    longer = dataclasses.replace(
        settings, chains=dataclasses.replace(settings.chains, samples=7000)
    )
    read = pretrain(longer, there)
    np.testing.assert_array_equal(weights(read), elsewhere)
    assert read.train_seconds == trained.train_seconds
    np.testing.assert_array_equal(weights(pretrain(settings)), stored["weights"])  # no store
    # the merge: brought here where none is; kept here (and said) where they differ
    assert merge_chain_stores(there.parent, here.parent) == [
        f"unit/{STARTS}: brought here (its chains go on from that machine's starts)"
    ]
    np.testing.assert_array_equal(weights(pretrain(settings, here)), elsewhere)
    assert merge_chain_stores(there.parent, here.parent) == [f"unit/{STARTS}: the same here"]
    unit_store.save(here / STARTS, key, {"weights": stored["weights"]}, info)
    (said,) = merge_chain_stores(there.parent, here.parent)
    assert said.endswith("differ here; this machine's kept, so the chains started there stay inert")
    np.testing.assert_array_equal(weights(pretrain(settings, here)), stored["weights"])
    # the run's chain ends keep them too: the longer unit, begun in a new chain store (on
    # another machine, with the ends copied there), starts from them and keeps them there
    ends, longer_store = tmp_path / "ends", tmp_path / "there" / "longer"
    pretrain(settings, there, ends)
    np.testing.assert_array_equal(unit_store.load(ends / STARTS, key)[0]["weights"], elsewhere)
    np.testing.assert_array_equal(weights(pretrain(longer, longer_store, ends)), elsewhere)
    np.testing.assert_array_equal(
        unit_store.load(longer_store / STARTS, key)[0]["weights"], elsewhere
    )


def test_a_unit_from_stored_samples_reports_the_test_accuracy_of_its_stored_start(
    tmp_path,
) -> None:
    """Units recomputed from stored samples take the MFVI test accuracy from the pre-training
    the chains started from (kept with the run's chain ends), not from one trained again here:
    all-zero stored weights give equal logits, so argmax class 0 and an accuracy equal to the
    test set's share of class 0, which the trained network (accuracy > 0.7) does not give."""
    pytest.importorskip("blackjax")
    pytest.importorskip("ot")
    from vbnn.references.chain_checkpoints import STARTS
    from vbnn.stores import unit_store
    from vbnn_lab.depth.units import UnitSettings, compute_unit, pretrain, two_moons

    settings = UnitSettings(
        Activation.RELU, 1, 0, points=200, budget=40, wasserstein_subsample=50,
        pretrain=PretrainConfig(epochs=20, mean_epochs=20),
    )  # fmt: skip
    dimension = pretrain(settings).weights.size
    draws = np.random.default_rng(0).normal(size=(4, 25, dimension)).astype(np.float32)
    cached = (draws, {"r_hat_max": 1.0})
    trained = compute_unit(settings, cached).record["mean_field_test_accuracy"]
    assert trained > 0.7
    ends = tmp_path / "chain-ends"
    key = {k: v for k, v in settings.to_dict().items() if k not in ("chains", "sampler")}
    unit_store.save(ends / STARTS, key, {"weights": np.zeros(dimension, np.float32)},
                    {"train_seconds": 1.5})  # fmt: skip
    outcome = compute_unit(settings, cached, chain_ends=ends)
    _, test_y = two_moons(1000, settings.noise, 500_000, torch.float32)
    share = (test_y == 0).double().mean().item()
    assert outcome.record["mean_field_test_accuracy"] == pytest.approx(share)
    assert outcome.record["train_seconds"] == 1.5


def test_stored_only_with_no_finished_unit_says_where_it_looked(tmp_path) -> None:
    pytest.importorskip("numpyro")
    parser = argparse.ArgumentParser()
    depth.add_arguments(parser)
    flags = ["--quick", "--out", str(tmp_path), "--depths", "1,2", "--stored-only"]
    with pytest.raises(
        FileNotFoundError, match=r"none of the 6 units named is finished in .*units"
    ):
        depth.run(parser.parse_args(flags))


def test_status_names_a_record_it_cannot_read(tmp_path) -> None:
    (tmp_path / "units").mkdir()
    with pytest.raises(FileNotFoundError, match="no unit records"):
        depth_command("--status", str(tmp_path))
    single = {"info": {"depth": 2, "settings": {"nuts": {"samples": 1000}}}}  # one Pyro chain
    (tmp_path / "units" / "abc.json").write_text(json.dumps(single))
    with pytest.raises(ValueError, match=r"abc\.json: not a unit record of a multi-chain run"):
        depth_command("--status", str(tmp_path))


def test_status_of_a_committed_run_gives_its_rows_of_the_committed_table(tmp_path, capsys):
    """``--status`` on the committed records of one run writes, beside the run, that run's rows
    of the committed ``status.csv`` (made from every run), to the printed digit."""
    import shutil

    committed = REPRODUCTION / "mams-1000"
    shutil.copytree(committed / "units", tmp_path / committed.name / "units")
    depth_command("--status", str(tmp_path / committed.name))
    rows = (REPRODUCTION / "status.csv").read_text().splitlines()
    written = (tmp_path / "status.csv").read_text().splitlines()
    assert written == [rows[0], *(row for row in rows if row.startswith("mams-1000,"))]
    assert len(written) == 11 and (tmp_path / "status.png").stat().st_size > 0
    assert capsys.readouterr().out.count("\n| mams-1000 |") == 10


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--best"], "--best: goes with --status"),
        (["--mixing-reasons", "run", "--per-chain", "5"], "--per-chain: goes with --curvature"),
        (["--status", "run", "--new"], "--new: goes with --mixing-reasons or --gap-by-draws"),
        (["--compare-runs", "a", "b", "c"], "--compare-runs: one or two run folders, got 3"),
        (["--curvature", "run", "--per-chain", "1"], "--per-chain 1: at least 2"),
        (["--gap-by-draws", "run", "--out", "x"], "--out: with an analysis option, for --status"),
        (
            ["--status", "run", "--depths", "2"],
            "--depths: with an analysis option, for --curvature",
        ),
    ],
)
def test_an_analysis_option_out_of_place_is_named(flags, message) -> None:
    with pytest.raises(ValueError, match=message):
        depth_command(*flags)


def test_chains_only_samples_here_and_the_record_is_made_later_from_them(tmp_path, capsys) -> None:
    """``--chains-only`` leaves the unit's chains in its chain store and nothing else, saying on
    stderr how each chain went; the same command without it makes the record from those chains
    without sampling again."""
    pytest.importorskip("blackjax")
    from vbnn.cli import main

    parser = argparse.ArgumentParser()
    depth.add_arguments(parser)
    flags = [
        "--quick", "--out", str(tmp_path), "--depths", "1", "--activations", "relu",
        "--chains", "2", "--points", "200", "--warmup", "20", "--samples", "12", "--epochs", "1",
        "--heatmap-samples", "500", "--no-fashion", "--no-product-figure", "--sampler", "mams",
    ]  # fmt: skip
    assert main(["reproduce", "depth", *flags, "--chains-only"]) == 0
    (store,) = (tmp_path / "chains").iterdir()
    stored = [json.loads(path.read_text()) for path in sorted(store.glob("*.json"))]
    said = capsys.readouterr().err
    assert len(stored) == 2 and f"chains are in {store}" in said
    for chain in (0, 1):  # MAMS tunes in three stages
        assert f"vbnn: mams chain {chain}: 3 tuning stage(s) done (" in said
        assert f"vbnn: mams chain {chain}: finished and stored (" in said
    assert not (tmp_path / "units").exists() and not (tmp_path / "depth_units.csv").exists()
    assert not list((store / "in-flight").iterdir())
    depth.run(parser.parse_args(flags))
    unit = pd.read_csv(tmp_path / "depth_units.csv").iloc[0]
    seconds = {info["info"]["seconds"] for info in stored}
    assert set(json.loads(unit["sampler_chain_seconds"])) == seconds  # read back, not run again
    assert json.loads(unit["sampler_chain_devices"].replace("'", '"')) == ["cpu", "cpu"]
    assert not store.exists()  # the stored unit holds the chains now
    assert not list(tmp_path.glob("product_*"))  # --no-product-figure: units only
    # the same unit with more draws goes on from where its chains ended
    capsys.readouterr()
    longer = [*flags]
    longer[longer.index("--samples") + 1] = "20"
    assert main(["reproduce", "depth", *longer]) == 0
    said = capsys.readouterr().err
    for chain in (0, 1):
        assert f"mams chain {chain}: goes on from where its chain of 12 draws ended" in said
    assert "1 tuning stage(s) done" not in said  # no chain tuned again
    stored = [np.load(path)["samples"] for path in (tmp_path / "samples").glob("*.npz")]
    first, second = sorted(stored, key=lambda draws: draws.shape[1])
    assert first.shape[:2] == (2, 12) and second.shape[:2] == (2, 20)
    np.testing.assert_array_equal(second[:, :12], first)
    # the analysis options tell the two units apart by their draws a chain
    assert main(["reproduce", "depth", "--mixing-reasons", str(tmp_path)]) == 0
    assert sorted(pd.read_csv(tmp_path / "mixing.csv")["chain_draws"]) == [12, 20]
    per_chain = pd.read_csv(tmp_path / "mixing_chains.csv")  # each chain left out in turn
    assert sorted(zip(per_chain["chain_draws"], per_chain["chain"], strict=True)) == [
        (12, 0), (12, 1), (20, 0), (20, 1)
    ]  # fmt: skip
    assert np.isfinite(per_chain[["rhat_max_without", "steps_mean"]]).all(axis=None)
    # --new measures only the units without rows: the longer one here, the same row again
    table = pd.read_csv(tmp_path / "mixing.csv")
    table[table["chain_draws"] == 12].to_csv(tmp_path / "mixing.csv", index=False)
    capsys.readouterr()
    assert main(["reproduce", "depth", "--mixing-reasons", str(tmp_path), "--new"]) == 0
    assert capsys.readouterr().out.count("measured already, skipped") == 1
    again = pd.read_csv(tmp_path / "mixing.csv")
    order = ["chain_draws"]
    pd.testing.assert_frame_equal(
        again.sort_values(order, ignore_index=True), table.sort_values(order, ignore_index=True)
    )
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "mixing_chains.csv"), per_chain)
    with pytest.raises(ValueError, match="NUTS keeps no chain store"):
        depth.run(parser.parse_args([*flags[:-1], "nuts", "--chains-only"]))


# the tiny NUTS run the end-to-end tests share: LeakyReLU (slope 0.3) at depths 1 and 3, one
# repeat, 2 chains x 12 draws; Fashion-MNIST on 1000 images where the data are here
TINY_RUN = [
    "--quick", "--depths", "1,3", "--activations", "leaky_relu", "--slopes", "0.3",
    "--chains", "2", "--points", "200", "--warmup", "5", "--samples", "12", "--epochs", "1",
    "--max-tree-depth", "3", "--heatmap-samples", "500", "--sampler", "nuts",
]  # fmt: skip
TINY_UNITS = 2


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> tuple[Path, list[str], bool]:
    """(the run folder, its flags for a rerun (no Fashion-MNIST), whether it ran the
    Fashion-MNIST part: where the data are) of the tiny NUTS run, made once for the tests of
    this module that read it."""
    pytest.importorskip("numpyro")
    out = tmp_path_factory.mktemp("tiny-depth-run")
    flags = [*TINY_RUN, "--out", str(out)]
    data = Path(os.environ.get("VBNN_DATA_DIR", SHARED_DATA))
    fashion = (data / "fashion-mnist" / "t10k-labels-idx1-ubyte.gz").is_file()
    if fashion:
        depth_command(*flags, "--data-dir", str(data), "--fashion-images", "1000",
                      "--fashion-samples", "300")  # fmt: skip
    else:
        depth_command(*flags, "--no-fashion")
    return out, [*flags, "--no-fashion"], fashion


@pytest.mark.slow
def test_tiny_end_to_end_run_writes_every_output(tiny_run) -> None:
    out, _, fashion = tiny_run
    expected = [
        "product_covariance.png", "product_support.csv", "depth_units.csv", "depth_gap.csv",
        "depth_gap.png", "summary.json",
    ]  # fmt: skip
    if fashion:
        expected += ["fashion_product_covariance.png", "fashion_product.json"]
    for name in expected:
        assert (out / name).stat().st_size > 0, name
    assert len(list((out / "units").glob("*.json"))) == TINY_UNITS
    assert len(list((out / "samples").glob("*.npz"))) == TINY_UNITS
    assert "QUICK MODE" in (out / "summary.json").read_text()
    jax, numpyro = pytest.importorskip("jax"), pytest.importorskip("numpyro")
    units = pd.read_csv(out / "depth_units.csv")
    assert (units["software"] == f"jax {jax.__version__}, numpyro {numpyro.__version__}, "
            f"torch {torch.__version__}").all()  # fmt: skip
    # every unit carries the estimator's floor and its limit
    measures = ["kl_floor_chains", "kl_above_floor_limit", "kl_above_floor_limit_drift"]
    assert np.isfinite(units[measures]).all(axis=None) and (units["draws"] == 24).all()
    # the stored chains say which transitions diverged
    for path in (out / "samples").glob("*.npz"):
        with np.load(path) as arrays:
            assert arrays["diverging"].shape == (2, 12) and arrays["diverging"].dtype == bool


@pytest.mark.slow
def test_a_second_run_reads_the_stored_units_back(tiny_run, capsys) -> None:
    out, flags, _ = tiny_run
    # a second run re-plots from the cache without sampling again
    units_before = {p.name: p.stat().st_mtime_ns for p in (out / "units").glob("*.json")}
    depth_command(*flags)
    units_after = {p.name: p.stat().st_mtime_ns for p in (out / "units").glob("*.json")}
    assert units_before == units_after
    # --stored-only reports the finished units among those named and names the rest
    figure_before = (out / "product_covariance.png").stat().st_mtime_ns
    capsys.readouterr()
    named = [*flags, "--stored-only"]
    named[named.index("--depths") + 1] = "1-3"
    depth_command(*named)
    said = capsys.readouterr().err
    assert said.count("--stored-only: not finished, left out") == 1
    assert "not finished, left out: leaky_relu(0.3) depth 2 repeat 0" in said
    assert pd.read_csv(out / "depth_units.csv")["depth"].tolist() == [1, 3]
    assert len(list((out / "units").glob("*.json"))) == TINY_UNITS
    assert (out / "product_covariance.png").stat().st_mtime_ns == figure_before
    # a record stored before it carried the estimator's floor and its limit gets them back from
    # its chains, the same numbers
    measures = ["kl_floor_chains", "kl_above_floor_limit", "kl_above_floor_limit_drift"]
    record_path = sorted((out / "units").glob("*.json"))[0]
    stored = json.loads(record_path.read_text())
    values = [stored["info"].pop(name) for name in measures]
    record_path.write_text(json.dumps(stored))
    depth_command(*flags)
    info = json.loads(record_path.read_text())["info"]
    assert [info[name] for name in measures] == values


@pytest.mark.slow
def test_the_analysis_of_a_run_keeps_the_rows_of_units_not_here(tiny_run) -> None:
    """``--mixing-reasons`` and ``--gap-by-draws`` read the stored chains: one row a unit (six
    cuts of its draws a unit), and the rows of a unit whose chains are not here (another
    machine's) survive a rerun."""
    out, _, _ = tiny_run
    written_by = {
        "--mixing-reasons": ("mixing.csv", TINY_UNITS),
        "--gap-by-draws": ("gap_by_subset.csv", 6 * TINY_UNITS),
    }
    for option, (written, rows) in written_by.items():
        depth_command(option, str(out))
        table = pd.read_csv(out / written)
        assert len(table) == rows and sorted(table["depth"].unique()) == [1, 3], option
        pd.concat([table, table.assign(depth=9)]).to_csv(out / written, index=False)
        depth_command(option, str(out))
        again = pd.read_csv(out / written)
        assert len(again) == 2 * rows and (again["depth"] == 9).sum() == rows, option
    divergent = pd.read_csv(out / "depth_units.csv")["sampler_divergences"].sum()
    if divergent > 0:  # where they started, one row per feature
        assert len(pd.read_csv(out / "divergences.csv")) >= 5


@pytest.mark.slow
def test_status_reads_the_records_alone_and_agrees_with_the_runs_verdicts(tiny_run, capsys):
    out, _, _ = tiny_run
    capsys.readouterr()
    depth_command("--status", str(out), "--out", str(out / "status"), "--best")
    printed = capsys.readouterr().out
    assert printed.count("\n| ") == TINY_UNITS  # after the header, one unit a depth
    assert "| repeats (mixed / trusted) |" in printed  # one repeat a depth here
    assert all(line.endswith((" | 1 (1 / 1) |", " | 1 (1 / 0) |", " | 1 (0 / 0) |"))
               for line in printed.strip().splitlines()[2:])  # fmt: skip
    assert (out / "status" / "status.png").stat().st_size > 0
    status = pd.read_csv(out / "status" / "status.csv").sort_values(["activation", "depth"])
    verdicts = pd.read_csv(out / "depth_units.csv").sort_values(["activation", "depth"])
    assert status["trusted"].tolist() == verdicts["trusted"].tolist()
    assert (status["mixed"] >= status["trusted"]).all() and (status["chain_draws"] == 12).all()


@pytest.mark.slow
def test_a_run_compared_with_itself_agrees_exactly(tiny_run) -> None:
    """Every unit finds its posterior in the same run, and the same draws agree exactly."""
    out, _, _ = tiny_run
    depth_command("--compare-runs", str(out), str(out))
    agreement = pd.read_csv(out / "agreement.csv")
    assert len(agreement) == TINY_UNITS
    assert (agreement[["parameter_mean_z_max", "logit_variance_z_max"]] == 0).all(axis=None)
    assert (agreement["sampler"] == "nuts").all() and agreement["chain_draws"].nunique() == 1


def test_each_slope_is_a_unit_of_its_own() -> None:
    """LeakyReLU units, one a slope (their labels and store keys differ); other activations
    once."""
    pytest.importorskip("numpyro")
    pytest.importorskip("blackjax")  # the default sampler, MAMS
    parser = argparse.ArgumentParser()
    depth.add_arguments(parser)
    flags = ["--depths", "1", "--activations", "leaky_relu,relu", "--slopes", "0.01,0.3",
             "--repeats", "1"]  # fmt: skip
    units, _ = depth.build_settings(parser.parse_args(flags))
    assert [unit.label() for unit in units] == ["leaky_relu(0.01)", "leaky_relu(0.3)", "relu"]
    assert len({json.dumps(unit.to_dict(), sort_keys=True) for unit in units}) == 3


def test_best_units_counts_each_data_set_once_and_prefers_the_longest_mixed_chains():
    from vbnn_lab.depth.status import best_units

    rows = [  # (run, seed, repeat, mixed, trusted, R-hat, draws): one configuration, 3 data sets
        ("short", 0, 0, False, False, 1.20, 1500),
        ("long", 0, 0, True, False, 1.04, 4000),  # the same data set sampled longer: counts once
        ("short", 0, 1, True, True, 1.01, 1500),
        ("other-seed", 1, 0, False, False, 1.06, 7000),
    ]
    table = pd.DataFrame(
        [dict(run=run, seed=seed, repeat=repeat, mixed=mixed, trusted=trusted,
              sampler_rhat_max=rhat, sampler_divergences=0.0, chain_draws=draws, points=10,
              activation="relu", depth=1)
         for run, seed, repeat, mixed, trusted, rhat, draws in rows]
    )  # fmt: skip
    # depth 2: two mixed units with equal draws, the trusted one first, the unmixed longer last
    equal = table.assign(depth=2, chain_draws=1500, mixed=[True, False, True, False],
                         trusted=[False, False, True, False])  # fmt: skip
    # depth 3: none mixed, so the lowest R-hat whatever its draws
    unmixed = table.assign(depth=3, mixed=False, trusted=False)
    best = best_units(pd.concat([table, equal, unmixed], ignore_index=True))
    assert best["repeats"].tolist() == ["3 (2 / 1)", "3 (2 / 1)", "3 (0 / 0)"]
    assert best[["run", "repeat"]].values.tolist() == [["long", 0], ["short", 1], ["short", 1]]


def test_first_repeat_names_the_same_units_as_the_full_range():
    pytest.importorskip("numpyro")
    pytest.importorskip("blackjax")  # the default sampler, MAMS
    parser = argparse.ArgumentParser()
    depth.add_arguments(parser)
    flags = ["--depths", "1,2", "--activations", "relu"]
    full, shared = depth.build_settings(parser.parse_args([*flags, "--repeats", "3"]))
    later, _ = depth.build_settings(parser.parse_args([*flags, "--repeats", "3", "--first-repeat",
                                                       "1"]))  # fmt: skip
    assert [(unit.repeat, unit.depth) for unit in later] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert [unit.to_dict() for unit in later] == [unit.to_dict() for unit in full[2:]]
    assert "repeats 1-2 (0-based)" in depth.run_note(later, shared, quick=False)
    assert "3 repeat(s)" in depth.run_note(full, shared, quick=False)
    for first in ("3", "-1"):
        with pytest.raises(ValueError, match=rf"--first-repeat {first}: .* below --repeats \(3\)"):
            depth.build_settings(parser.parse_args([*flags, "--repeats", "3", "--first-repeat",
                                                    first]))  # fmt: skip
