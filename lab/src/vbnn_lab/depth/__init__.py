"""``vbnn reproduce depth``: depth vs the mean-field gap (Farquhar et al. 2020 Figs. 1-2, blog
figures).

Papers: Farquhar et al. 2020 (Figure 1: product-matrix covariance of 4x4 mean-field layers at
depths 1, 5, 20; Figure 2: KL(q_diag || q_full) vs depth on two moons) and Farquhar et al. 2020 blog
(Wasserstein figure with ReLU, LeakyReLU and linear activations; Fashion-MNIST product matrix).

Outputs under ``--out``: ``product_covariance.png`` and ``product_support.csv`` (not with
``--no-product-figure``); ``units/*.json`` and ``samples/*.npz`` (one per activation, depth and
repeat, cached); ``depth_units.csv``, ``depth_gap.csv`` (mean +- SEM over repeats),
``depth_gap.png``; ``fashion_product_covariance.png`` and ``fashion_product.json``;
``summary.json`` with every setting.

Analysis of finished runs instead of a run (``analysis``): ``--status RUN [RUN ...]``,
``--mixing-reasons RUN``, ``--gap-by-draws RUN``, ``--compare-runs FIRST [SECOND]``,
``--curvature RUN``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from vbnn.core.contracts import Activation
from vbnn.data.splits import parse_splits
from vbnn.stores.atomic import write_atomic
from vbnn.sweeps.executors import add_executor_arguments, settings_from
from vbnn_lab.depth.analysis import add_analysis_arguments, chosen_mode, run_analysis
from vbnn_lab.depth.models import PretrainConfig

DESCRIPTION = (
    "Farquhar et al. 2020 + blog: product-matrix covariance, NUTS posteriors, diagonal gap vs depth"
)


def run_note(units: list, shared: dict, quick: bool) -> str:
    """One line saying what this run is, with its actual sizes next to the paper's."""
    chains = shared["chains"]
    depths = sorted({unit.depth for unit in units})
    first, last = min(unit.repeat for unit in units), max(unit.repeat for unit in units)
    repeats = (
        f"{last + 1} repeat(s)" if first == 0
        else f"repeat {first} (0-based)" if first == last
        else f"repeats {first}-{last} (0-based)"
    )  # fmt: skip
    mass = "dense" if chains.dense_mass else "diagonal"
    sampler = {
        "nuts": f"NumPyro NUTS (tree depth <= {chains.max_tree_depth}, {mass} mass matrix)",
        "mams": f"BlackJAX MAMS (target acceptance {chains.target_accept}"
        + (f", step / {chains.step_scale:g}" if chains.step_scale != 1 else "")
        + (", trajectory length shared by the chains)" if chains.shared_length else ")"),
        "mclmc": "BlackJAX unadjusted MCLMC (biased)",
    }[shared["sampler"].value]
    sizes = (
        f"{shared['points']} two-moons points (paper 10000), "
        f"{shared['pretrain'].mean_epochs}+{shared['pretrain'].epochs} pre-training epochs "
        f"(paper 10), {sampler} {chains.chains} chains x ({chains.warmup} warm-up + "
        f"{chains.samples} samples) (paper NUTS, 1 x (100 + 1000)), depths {depths}, "
        f"{repeats}"
    )
    if quick:
        return (
            f"QUICK MODE: {sizes}; Fashion-MNIST on 10000 images for 1 epoch, 2000 weight "
            "samples. Numbers are a smoke test of the pipeline, not the paper's experiment."
        )
    return f"Run: {sizes}."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="about 5 minutes; says so")
    parser.add_argument(
        "--out",
        default=None,
        help="output directory (default results/depth); with --status, where status.csv and "
        "status.png go (default: the folder holding the first run)",
    )
    parser.add_argument("--data-dir", default=None, help="data directory (Fashion-MNIST)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="repeats per configuration (default 1; SEM needs >= 2)",
    )
    parser.add_argument(
        "--first-repeat",
        type=int,
        default=0,
        help="run repeats from this one (0-based) up to --repeats only, e.g. --first-repeat 1 "
        "--repeats 2: repeat 1 alone, to take one repeat on with more --samples or to share "
        "repeats between machines (--stored-only with the full range writes the tables)",
    )
    parser.add_argument("--depths", default=None, help="e.g. 1-5 or 1,3,5")
    parser.add_argument("--activations", default=None, help="comma list: relu,leaky_relu,identity")
    parser.add_argument(
        "--slopes",
        default=None,
        help="LeakyReLU slopes, comma list, one unit set each (default 0.01,0.2; quick 0.2)",
    )
    parser.add_argument(
        "--sampler",
        choices=["nuts", "mams", "mclmc"],
        default="mams",
        help="reference chains: BlackJAX adjusted MCLMC (MAMS, the fastest unbiased one on the "
        "depth units: benchmarks/README.md), NumPyro NUTS, or unadjusted MCLMC (biased)",
    )
    parser.add_argument("--chains", type=int, default=4, help="chains per unit")
    parser.add_argument("--dense-mass", action="store_true", help="dense mass matrix")
    parser.add_argument("--max-rhat", type=float, default=1.05, help="trusted-unit criterion")
    parser.add_argument("--min-ess", type=float, default=100.0, help="bulk and tail ESS, ditto")
    parser.add_argument(
        "--max-divergences", type=int, default=0, help="divergent transitions of a unit, ditto"
    )
    parser.add_argument(
        "--max-energy-error",
        type=float,
        default=5e-3,
        help="unadjusted MCLMC: every chain's energy error variance per parameter, ditto "
        "(its bias grows with it; tuned for 5e-4)",
    )
    parser.add_argument("--points", type=int, default=None, help="two-moons training points")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up (tuning) per chain")
    parser.add_argument("--samples", type=int, default=None, help="kept samples per chain")
    parser.add_argument(
        "--target-accept", type=float, default=None, help="NUTS 0.8, MAMS 0.9 by default"
    )
    parser.add_argument(
        "--step-scale",
        type=float,
        default=1.0,
        help="MAMS: divide the tuned step size by this, trajectory length kept (>= 1; costs "
        "that many times the gradients a transition; fewer divergent transitions)",
    )
    parser.add_argument(
        "--shared-length",
        action="store_true",
        help="MAMS: the chains share one trajectory length, the median of those their tuning "
        "chose, and each retunes its step size at it (a chain whose tuning chose a short one "
        "mixes slower than the others)",
    )
    parser.add_argument(
        "--max-tree-depth",
        type=int,
        default=None,
        help="NUTS's largest tree depth; for MAMS the cap 2^depth - 1 on a trajectory's mean "
        "integration steps (tuning included), for MCLMC on the steps between kept draws "
        "(default 10, quick 6)",
    )
    parser.add_argument("--epochs", type=int, default=None, help="mean and ELBO epochs, each")
    parser.add_argument("--jitter", type=float, default=1e-4, help="added to the covariance")
    add_executor_arguments(parser)
    parser.add_argument(
        "--stored-only",
        action="store_true",
        help="tables and figure from the named units already finished under --out; runs "
        "nothing else (no unit, Figure 1 or Fashion-MNIST) and lists the missing units",
    )
    parser.add_argument(
        "--chains-only",
        action="store_true",
        help="MAMS/MCLMC: run the named units' chains into --out's chain store and stop (no "
        "record, table or figure); the same command without it finishes them, e.g. on another "
        "machine with the chain store copied over",
    )
    parser.add_argument(
        "--chains-from",
        type=Path,
        default=None,
        help="a copy of a run's chains/ folder from another machine (after --chains-only there): "
        "merged into --out's first, keeping whichever machine got further with each chain",
    )
    parser.add_argument("--no-fashion", action="store_true", help="skip the Fashion-MNIST part")
    parser.add_argument(
        "--no-product-figure",
        action="store_true",
        help="skip Figure 1 (product_covariance.png, product_support.csv), e.g. in a folder "
        "that holds units only",
    )
    parser.add_argument("--fashion-images", type=int, default=None, help="training images used")
    parser.add_argument("--fashion-samples", type=int, default=None, help="weight samples drawn")
    parser.add_argument(
        "--heatmap-samples", type=int, default=10_000, help="Monte Carlo draws for Figure 1"
    )
    add_analysis_arguments(parser)


def _parse_depths(text: str) -> tuple[int, ...]:
    try:
        depths = parse_splits(text)
    except argparse.ArgumentTypeError:
        raise ValueError(f"--depths {text!r}: expected e.g. '1-5' or '1,3,5'") from None
    if not depths or min(depths) < 1:
        raise ValueError(f"--depths {text!r}: depths must be >= 1")
    return tuple(depths)


def _require_jax() -> None:
    """The sampler is NumPyro's (the ``vbnn[jax]`` extra); the CLI imports this module without it
    (vbnn_lab/__init__.py: heavy and optional imports stay inside the functions)."""
    if importlib.util.find_spec("numpyro") is None:
        raise ModuleNotFoundError(
            "vbnn reproduce depth samples with NumPyro: pip install 'vbnn[jax]'"
        )


def build_settings(args: argparse.Namespace) -> tuple[list, dict]:
    """The list of units and the shared settings, from the flags (quick mode fills defaults)."""
    _require_jax()
    from vbnn.references.jax_nuts import ChainsConfig
    from vbnn.references.samplers import Sampler, require_sampler
    from vbnn_lab.depth.units import UnitSettings

    sampler = Sampler(args.sampler)
    require_sampler(sampler)

    quick = args.quick
    depths = _parse_depths(args.depths or ("1-3" if quick else "1-5"))
    names = (args.activations or "relu,leaky_relu,identity").split(",")
    try:
        activations = [Activation(name.strip()) for name in names]
    except ValueError:
        raise ValueError(
            f"--activations {args.activations!r}: choose from relu,leaky_relu,identity"
        ) from None
    epochs = args.epochs if args.epochs is not None else (3 if quick else 10)
    chains = ChainsConfig(
        chains=args.chains,
        warmup=args.warmup if args.warmup is not None else (100 if quick else 1000),
        samples=args.samples if args.samples is not None else (100 if quick else 1000),
        max_tree_depth=args.max_tree_depth or (6 if quick else 10),
        dense_mass=args.dense_mass,
        target_accept=args.target_accept or (0.9 if sampler is Sampler.MAMS else 0.8),
        step_scale=args.step_scale,
        shared_length=args.shared_length,
    )
    if chains.step_scale != 1 and sampler is not Sampler.MAMS:
        raise ValueError(f"--step-scale {args.step_scale}: for --sampler mams only")
    if chains.shared_length and sampler is not Sampler.MAMS:
        raise ValueError("--shared-length: for --sampler mams only")
    # 5 repeats by default, a unit a time: see reproductions/depth/README.md for the budget
    repeats = args.repeats or (1 if quick else 5)
    if not 0 <= args.first_repeat < repeats:
        raise ValueError(
            f"--first-repeat {args.first_repeat}: must be at least 0 and below --repeats "
            f"({repeats})"
        )
    shared = {
        "points": args.points or (1000 if quick else 10_000),
        "jitter": args.jitter,
        "seed": args.seed,
        "pretrain": PretrainConfig(epochs=epochs, mean_epochs=epochs),
        "chains": chains,
        "sampler": sampler,
    }
    text = args.slopes or ("0.2" if quick else "0.01,0.2")
    try:
        slopes = [float(slope) for slope in text.split(",")]
    except ValueError:
        raise ValueError(f"--slopes {text!r}: expected numbers, e.g. 0.01,0.2") from None
    variants = [
        (activation, slope)
        for activation in activations
        for slope in (slopes if activation is Activation.LEAKY_RELU else [0.01])
    ]
    # repeat-major: every (activation, depth) gets its first repeat before any gets a second
    units = [
        UnitSettings(activation=activation, negative_slope=slope, depth=depth, repeat=repeat,
                     **shared)
        for repeat in range(args.first_repeat, repeats)
        for depth in depths
        for activation, slope in variants
    ]  # fmt: skip
    return units, shared


def stored_units(units: list, out: Path) -> list:
    """The units among ``units`` that are finished under ``out`` (``--stored-only``); names the
    missing ones on stderr, and raises if none is finished."""
    from vbnn_lab.depth.units import stored_record

    finished = [stored_record(unit, out) is not None for unit in units]
    stored = [unit for unit, done in zip(units, finished, strict=True) if done]
    for unit in (unit for unit, done in zip(units, finished, strict=True) if not done):
        print(
            f"--stored-only: not finished, left out: {unit.label()} depth {unit.depth} "
            f"repeat {unit.repeat}",
            file=sys.stderr,
        )
    if not stored:
        raise FileNotFoundError(
            f"--stored-only: none of the {len(units)} units named is finished in {out / 'units'}"
        )
    return stored


def run_chains_only(units: list, out: Path) -> None:
    """``--chains-only``: the chains of every named unit not yet finished, into its chain store."""
    from vbnn.references.samplers import Sampler
    from vbnn_lab.depth.units import (
        chain_ends,
        chain_store,
        pretrain,
        sample_unit,
        stored_record,
    )

    if units and units[0].sampler is Sampler.NUTS:
        raise ValueError("--chains-only: NUTS keeps no chain store; use --sampler mams or mclmc")
    for unit in units:
        name = f"{unit.label()} depth {unit.depth} repeat {unit.repeat}"
        if stored_record(unit, out) is not None:
            print(f"--chains-only: {name} is finished already", file=sys.stderr)
            continue
        store = chain_store(unit, out)
        ends = chain_ends(out)
        sample_unit(unit, pretrain(unit, store, ends), store, ends)
        print(f"--chains-only: {name}: its chains are in {store}", file=sys.stderr)


def run(args: argparse.Namespace) -> None:
    mode = chosen_mode(args)
    if mode is not None:  # an analysis of finished runs (``analysis``), not a run
        depths = None if args.depths is None else set(_parse_depths(args.depths))
        run_analysis(mode, args, depths)
        return
    _require_jax()
    from vbnn.references.chain_diagnostics import ConvergenceCriterion
    from vbnn_lab.depth.report import (
        aggregate,
        plot_depth_gap,
        run_fashion,
        run_product_figure,
        run_units,
        write_summary,
    )

    out = Path(args.out or "results/depth")
    out.mkdir(parents=True, exist_ok=True)
    units, shared = build_settings(args)
    if args.chains_from is not None:
        from vbnn.references.chain_checkpoints import merge_chain_stores

        for line in merge_chain_stores(args.chains_from, out / "chains"):
            print(f"--chains-from: {line}", file=sys.stderr)
    if args.chains_only:
        if args.stored_only:
            raise ValueError("--chains-only and --stored-only: choose one")
        run_chains_only(units, out)
        return
    if args.stored_only:
        units = stored_units(units, out)
    note = run_note(units, shared, args.quick)
    print(note)
    skip_product = args.stored_only or args.no_product_figure
    product = None if skip_product else run_product_figure(out, args.heatmap_samples, args.seed)
    criterion = ConvergenceCriterion(
        args.max_rhat, args.min_ess, args.min_ess, args.max_divergences, args.max_energy_error
    )
    records = run_units(units, out, settings_from(args), criterion)
    table = aggregate(records, criterion)
    write_atomic(out / "depth_gap.csv", table.to_csv(index=False))
    plot_depth_gap(table, out / "depth_gap.png", args.quick)
    fashion = None if args.no_fashion or args.stored_only else run_fashion(out, args)
    results = {
        "product_support": product,
        "gap_table": table.to_dict(orient="records"),
        "fashion": fashion,
    }
    write_summary(out, args, note, shared, results)
    shown = {
        "activation": "activation",
        "depth": "depth",
        "width": "width",
        "kl_diag_full_mean": "KL(diag||full)",
        "kl_diag_full_sem": "sem",
        "wasserstein2_mean": "W2",
        "wasserstein2_sem": "sem ",
        "kl_full_diag_mean": "KL(full||diag)",
        "kl_above_floor_limit_mean": "above floor, limit",
        "sampler_bulk_ess_min_mean": "ESS min",
        "sampler_rhat_max_mean": "R-hat max",
        "trusted": "trusted",
        "sampler_divergences_mean": "diverg.",
        "sampler_seconds_mean": "chains s",
        "mean_field_test_accuracy_mean": "MF test acc",
    }
    compact = table[list(shown)].rename(columns=shown)
    print(compact.to_string(index=False, float_format=lambda value: f"{value:.4g}"))
    print(f"written to {out}")
