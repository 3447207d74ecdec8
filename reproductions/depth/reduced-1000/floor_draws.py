"""How many independent draws the KL estimator needs before its floor is small: ``floor_draws.csv``.

For every trusted unit of ``kl_null.csv`` (and ``tree-depth-10/kl_null.csv``) the KL above the
chain floor (``kl_excess``) is taken as the gap to measure; ``draws_10pc`` is the fewest
independent draws N whose expected floor (``vbnn.references.gaussian_gap.expected_kl_floor``,
the closed-form mean of the null estimator) is at most 10 % of it, and ``floor_at_draws`` the
expected floor at the unit's own draw count (1200). Autocorrelated MCMC draws are worth fewer
independent ones, so chains need at least ``draws_10pc`` / (their ESS per draw) draws.

Run from the repository root: ``python reproductions/depth/reduced-1000/floor_draws.py``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from vbnn.references.gaussian_gap import draws_for_floor, expected_kl_floor

HERE = Path(__file__).parent
SHARE = 0.10


def main() -> None:
    rows = []
    for name, path in [("tree depth 8", HERE / "kl_null.csv"),
                       ("tree depth 10", HERE / "tree-depth-10" / "kl_null.csv")]:  # fmt: skip
        table = pd.read_csv(path)
        for unit in table[table["trusted"]].itertuples():
            rows.append({
                "run": name, "activation": unit.activation, "depth": unit.depth,
                "repeat": unit.repeat, "parameters": unit.parameters, "draws": unit.draws,
                "kl_excess": unit.kl_excess,
                "floor_at_draws": expected_kl_floor(unit.parameters, unit.draws),
                "kl_null_iid": unit.kl_null_iid,
                "draws_10pc": draws_for_floor(unit.parameters, SHARE * unit.kl_excess),
            })  # fmt: skip
    table = pd.DataFrame(rows)
    table.to_csv(HERE / "floor_draws.csv", index=False)
    summary = table.groupby(["run", "activation", "depth"]).agg(
        units=("repeat", "size"), parameters=("parameters", "first"),
        kl_excess=("kl_excess", "mean"), floor_at_1200=("floor_at_draws", "mean"),
        draws_10pc_min=("draws_10pc", "min"), draws_10pc_max=("draws_10pc", "max"),
    )  # fmt: skip
    print(summary.round(1).to_string())


if __name__ == "__main__":
    main()
