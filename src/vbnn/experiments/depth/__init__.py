"""``vbnn reproduce depth``: depth vs the mean-field gap (004 Figs. 1-2, blog figures).

Papers: 004_6556d25c53efeeec.txt (Figure 1: product-matrix covariance of 4x4 mean-field layers at
depths 1, 5, 20; Figure 2: KL(q_diag || q_full) vs depth on two moons) and 001_193bc50ee0b0b31a.txt
(Wasserstein figure with ReLU, LeakyReLU and linear activations; Fashion-MNIST product matrix).

Outputs under ``--out``: ``product_covariance.png`` and ``product_support.csv``; ``units/*.json``
and ``samples/*.npz`` (one per activation, depth and repeat, cached); ``depth_units.csv``,
``depth_gap.csv`` (mean +- SEM over repeats), ``depth_gap.png``; ``fashion_product_covariance.png``
and ``fashion_product.json``; ``summary.json`` with every setting.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vbnn.core.contracts import Activation
from vbnn.data.splits import parse_splits
from vbnn.experiments.depth.models import PretrainConfig
from vbnn.experiments.depth.report import (
    aggregate,
    plot_depth_gap,
    run_fashion,
    run_product_figure,
    run_units,
    write_summary,
)
from vbnn.experiments.depth.units import UnitSettings
from vbnn.references.nuts import NUTSConfig
from vbnn.sweeps.executors import add_executor_arguments, settings_from

DESCRIPTION = "004 + blog: product-matrix covariance, NUTS posteriors, diagonal gap vs depth"


def run_note(units: list, shared: dict, quick: bool) -> str:
    """One line saying what this run is, with its actual sizes next to the paper's."""
    nuts = shared["nuts"]
    depths = sorted({unit.depth for unit in units})
    repeats = max(unit.repeat for unit in units) + 1
    sizes = (
        f"{shared['points']} two-moons points (paper 10000), "
        f"{shared['pretrain'].mean_epochs}+{shared['pretrain'].epochs} pre-training epochs "
        f"(paper 10), NUTS {nuts.warmup} warm-up + {nuts.samples} samples (paper 100 + 1000), "
        f"tree depth <= {nuts.max_tree_depth}, depths {depths}, {repeats} repeat(s)"
    )
    if quick:
        return (
            f"QUICK MODE: {sizes}; Fashion-MNIST on 10000 images for 1 epoch, 2000 weight "
            "samples. Numbers are a smoke test of the pipeline, not the paper's experiment."
        )
    return f"Run: {sizes}."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="about 5 minutes; says so")
    parser.add_argument("--out", default="results/depth", help="output directory")
    parser.add_argument("--data-dir", default=None, help="data directory (Fashion-MNIST)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="repeats per configuration (default 1; SEM needs >= 2)",
    )
    parser.add_argument("--depths", default=None, help="e.g. 1-5 or 1,3,5")
    parser.add_argument("--activations", default=None, help="comma list: relu,leaky_relu,identity")
    parser.add_argument("--points", type=int, default=None, help="two-moons training points")
    parser.add_argument("--warmup", type=int, default=None, help="NUTS burn-in iterations")
    parser.add_argument("--samples", type=int, default=None, help="NUTS kept samples")
    parser.add_argument("--max-tree-depth", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None, help="mean and ELBO epochs, each")
    parser.add_argument("--jitter", type=float, default=1e-4, help="added to the covariance")
    parser.add_argument("--workers", type=int, default=1, help="units run in parallel processes")
    add_executor_arguments(parser)
    parser.add_argument("--no-fashion", action="store_true", help="skip the Fashion-MNIST part")
    parser.add_argument("--fashion-images", type=int, default=None, help="training images used")
    parser.add_argument("--fashion-samples", type=int, default=None, help="weight samples drawn")
    parser.add_argument(
        "--heatmap-samples", type=int, default=10_000, help="Monte Carlo draws for Figure 1"
    )


def _parse_depths(text: str) -> tuple[int, ...]:
    try:
        depths = parse_splits(text)
    except argparse.ArgumentTypeError:
        raise ValueError(f"--depths {text!r}: expected e.g. '1-5' or '1,3,5'") from None
    if not depths or min(depths) < 1:
        raise ValueError(f"--depths {text!r}: depths must be >= 1")
    return tuple(depths)


def build_settings(args: argparse.Namespace) -> tuple[list, dict]:
    """The list of units and the shared settings, from the flags (quick mode fills defaults)."""
    quick = args.quick
    depths = _parse_depths(args.depths or ("1-4" if quick else "1-5"))
    names = (args.activations or "relu,leaky_relu,identity").split(",")
    try:
        activations = [Activation(name.strip()) for name in names]
    except ValueError:
        raise ValueError(
            f"--activations {args.activations!r}: choose from relu,leaky_relu,identity"
        ) from None
    epochs = args.epochs if args.epochs is not None else (3 if quick else 10)
    nuts = NUTSConfig(
        warmup=args.warmup if args.warmup is not None else (50 if quick else 100),
        samples=args.samples if args.samples is not None else (100 if quick else 1000),
        max_tree_depth=args.max_tree_depth or (6 if quick else 7),
    )
    # one repeat by default: the full protocol costs ~2.4 h a repeat with 2 workers
    # (reproductions/depth/README.md)
    repeats = args.repeats or 1
    shared = {
        "points": args.points or (1000 if quick else 10_000),
        "jitter": args.jitter,
        "seed": args.seed,
        "pretrain": PretrainConfig(epochs=epochs, mean_epochs=epochs),
        "nuts": nuts,
    }
    units = [
        UnitSettings(activation=activation, depth=depth, repeat=repeat, **shared)
        for activation in activations
        for depth in depths
        for repeat in range(repeats)
    ]
    return units, shared


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    units, shared = build_settings(args)
    note = run_note(units, shared, args.quick)
    print(note)
    product = run_product_figure(out, args.heatmap_samples, args.seed)
    records = run_units(units, out, args.workers, not args.quick, settings_from(args))
    table = aggregate(records)
    table.to_csv(out / "depth_gap.csv", index=False)
    plot_depth_gap(table, out / "depth_gap.png", args.quick)
    fashion = None if args.no_fashion else run_fashion(out, args)
    write_summary(out, args, note, shared, product, table, fashion)
    shown = {
        "activation": "activation",
        "depth": "depth",
        "width": "width",
        "kl_diag_full_mean": "KL(diag||full)",
        "kl_diag_full_sem": "sem",
        "wasserstein2_mean": "W2",
        "wasserstein2_sem": "sem ",
        "kl_full_diag_mean": "KL(full||diag)",
        "nuts_ess_median_mean": "ESS med",
        "nuts_rhat_max_mean": "R-hat max",
        "nuts_divergences_mean": "diverg.",
        "nuts_seconds_mean": "NUTS s",
        "mean_field_test_accuracy_mean": "MF test acc",
    }
    compact = table[list(shown)].rename(columns=shown)
    print(compact.to_string(index=False, float_format=lambda value: f"{value:.4g}"))
    print(f"written to {out}")
