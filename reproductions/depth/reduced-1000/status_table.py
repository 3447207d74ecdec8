"""Print the status table of this folder's README from the finished units in ``units/``.

Run from the repository root: ``python reproductions/depth/reduced-1000/status_table.py``; give a
folder (``.../tree-depth-10/units``) for another set of unit records.
Means over the finished repeats of each (activation, depth), ± their SEM where there are two or
more; "trusted" counts the repeats whose chains pass the default ``ConvergenceCriterion``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vbnn.references.chain_diagnostics import ConvergenceCriterion
from vbnn_lab.depth.report import aggregate

NAMES = {"relu": "ReLU", "leaky_relu(0.01)": "LeakyReLU 0.01", "leaky_relu(0.2)": "LeakyReLU 0.2",
         "identity": "linear"}  # fmt: skip


def mean_sem(mean: float, sem: float, digits: int) -> str:
    return f"{mean:.{digits}f}" if sem != sem else f"{mean:.{digits}f} ± {sem:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("units", nargs="?", type=Path, default=Path(__file__).parent / "units",
                        help="folder of unit records (default: this folder's units/)")  # fmt: skip
    folder = parser.parse_args().units
    units = sorted(folder.glob("*.json"))
    if not units:
        raise SystemExit(f"status_table.py: no unit records (*.json) in {folder}")
    table = aggregate([json.loads(u.read_text())["info"] for u in units], ConvergenceCriterion())
    table = table.assign(order=table["activation"].map(list(NAMES).index))
    print(f"{len(units)} units\n")
    print("| activation | depth | units | trusted | R-hat max | bulk ESS min | divergences "
          "| KL(q_diag \\|\\| q_full) | W2(HMC, q_diag) - W2(HMC, q_full) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for row in table.sort_values(["order", "depth"]).itertuples():
        print(f"| {NAMES[row.activation]} | {row.depth} | {row.repeats} | {row.trusted_repeats} "
              f"| {row.sampler_rhat_max_mean:.3f} | {row.sampler_bulk_ess_min_mean:.0f} "
              f"| {row.sampler_divergences_mean:.0f} "
              f"| {mean_sem(row.kl_diag_full_mean, row.kl_diag_full_sem, 1)} "
              f"| {mean_sem(row.sample_w2_gap_mean, row.sample_w2_gap_sem, 2)} |")  # fmt: skip


if __name__ == "__main__":
    main()
