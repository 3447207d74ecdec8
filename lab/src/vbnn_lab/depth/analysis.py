"""The analysis options of ``vbnn reproduce depth``: tables read from finished run folders.

Each option does one job on the run folders it names, and nothing else of the run:

- ``--status RUN [RUN ...]``: every stored unit's chain verdict and KL limit
  (``status.run_status``; reads the committed records only), ``status.csv`` and ``status.png``
  in ``--out`` (default: the folder holding the first run), ``--best`` for one unit a
  configuration;
- ``--mixing-reasons RUN``: why the chains do or do not mix (``mixing_reasons``);
- ``--gap-by-draws RUN``: the KL above its floor on fewer or other draws (``gap_by_draws``);
- ``--compare-runs FIRST [SECOND]``: whether two runs sample the same posterior, or one run's
  most divergent chain against its others (``agreement``);
- ``--curvature RUN``: the posterior's curvature along the chains (``curvature``),
  ``--per-chain`` draws a chain, ``--depths`` to measure some units only, ``--plot-only``.

The last four read the chains in ``RUN/samples`` and write their tables in ``RUN``; ``--new``
measures only the units that have no rows yet in the tables they write.
"""

from __future__ import annotations

import argparse
from pathlib import Path

# option -> the attribute argparse gives it
MODES = {
    "--status": "status",
    "--mixing-reasons": "mixing_reasons",
    "--gap-by-draws": "gap_by_draws",
    "--compare-runs": "compare_runs",
    "--curvature": "curvature",
}
NEW_MODES = ("--mixing-reasons", "--gap-by-draws", "--compare-runs")


def add_analysis_arguments(parser: argparse.ArgumentParser) -> None:
    """The analysis options (one at a time) and the options that tune them."""
    group = parser.add_argument_group(
        "analysis of finished runs (one of these, instead of a run)"
    ).add_mutually_exclusive_group()
    group.add_argument(
        "--status", type=Path, nargs="+", metavar="RUN", default=None,
        help="status.csv and status.png in --out (default: beside the first RUN) and a "
        "Markdown table: every stored unit's R-hat, ESS, verdicts and KL limit",
    )  # fmt: skip
    group.add_argument(
        "--mixing-reasons", type=Path, metavar="RUN", default=None,
        help="mixing.csv, mixing_layers.csv, mixing_chains.csv, divergences.csv in RUN: why "
        "its chains (RUN/samples) do or do not mix",
    )  # fmt: skip
    group.add_argument(
        "--gap-by-draws", type=Path, metavar="RUN", default=None,
        help="gap_by_draws.csv, gap_by_subset.csv, non_gaussian.csv in RUN: the KL above its "
        "floor on the first n draws of each chain and on other cuts of the draws",
    )  # fmt: skip
    group.add_argument(
        "--compare-runs", type=Path, nargs="+", metavar="RUN", default=None,
        help="FIRST SECOND: agreement.csv in SECOND, the moments of the units sharing a "
        "posterior compared; FIRST alone: agreement_within.csv, each unit's most divergent "
        "chain against its others",
    )  # fmt: skip
    group.add_argument(
        "--curvature", type=Path, metavar="RUN", default=None,
        help="curvature.csv, curvature_points.csv, curvature.png in RUN: the largest "
        "preconditioned curvature along the chains (MAMS and MCLMC units); --depths measures "
        "those units only",
    )  # fmt: skip
    parser.add_argument(
        "--best", action="store_true",
        help="--status: print one unit per points, activation and depth (mixed with the most "
        "draws a chain, else the lowest R-hat) instead of every unit; the CSV keeps every unit",
    )  # fmt: skip
    parser.add_argument(
        "--new", action="store_true",
        help="--mixing-reasons, --gap-by-draws, --compare-runs: measure only the units that "
        "have no rows yet in the tables written",
    )  # fmt: skip
    parser.add_argument(
        "--per-chain", type=int, default=None, help="--curvature: evenly spaced draws a chain "
        "(default 100)",
    )  # fmt: skip
    parser.add_argument(
        "--plot-only", action="store_true",
        help="--curvature: redraw curvature.png from curvature_points.csv",
    )  # fmt: skip


def chosen_mode(args: argparse.Namespace) -> str | None:
    """The analysis option given (``--status``, ...), or None for a run; raises where an
    option that tunes one is given without it."""
    modes = [option for option, name in MODES.items() if getattr(args, name) is not None]
    mode = modes[0] if modes else None
    needs = {
        "--best": (args.best, ("--status",)),
        "--new": (args.new, NEW_MODES),
        "--per-chain": (args.per_chain is not None, ("--curvature",)),
        "--plot-only": (args.plot_only, ("--curvature",)),
    }
    for option, (given, modes_of) in needs.items():
        if given and mode not in modes_of:
            raise ValueError(f"{option}: goes with {' or '.join(modes_of)}")
    # run flags that one analysis reads too
    shared = {"--out": (args.out, "--status"), "--depths": (args.depths, "--curvature")}
    for option, (value, mode_of) in shared.items():
        if mode is not None and value is not None and mode != mode_of:
            raise ValueError(f"{option}: with an analysis option, for {mode_of} only")
    if mode == "--compare-runs" and len(args.compare_runs) > 2:
        raise ValueError(f"--compare-runs: one or two run folders, got {len(args.compare_runs)}")
    if args.per_chain is not None and args.per_chain < 2:
        raise ValueError(f"--per-chain {args.per_chain}: at least 2")
    return mode


def run_analysis(mode: str, args: argparse.Namespace, depths: set[int] | None) -> None:
    """Runs the analysis ``mode`` (``chosen_mode``) with the parsed flags; ``depths`` are
    ``--depths`` parsed (None without it)."""
    if mode == "--status":
        from vbnn_lab.depth.status import run_status

        runs = args.status
        run_status(runs, Path(args.out) if args.out else runs[0].parent, args.best)
    elif mode == "--mixing-reasons":
        from vbnn_lab.depth.mixing_reasons import run_mixing_reasons

        run_mixing_reasons(args.mixing_reasons, args.new)
    elif mode == "--gap-by-draws":
        from vbnn_lab.depth.gap_by_draws import run_gap_by_draws

        run_gap_by_draws(args.gap_by_draws, args.new)
    elif mode == "--compare-runs":
        from vbnn_lab.depth.agreement import compare_runs

        compare_runs(*args.compare_runs, new=args.new)
    else:
        from vbnn_lab.depth.curvature import run_curvature

        per_chain = 100 if args.per_chain is None else args.per_chain
        run_curvature(args.curvature, per_chain, depths, args.plot_only)
