"""The table and figure of ``time_to_quality.py``, made from its stored units only.

A unit is ``{"kind": "training" | "variance", "network", "arm", "seed", "info"}``. Training
units are summarised per (network, arm, budget) by the median over seeds and the range
[min, max]; variance units per (network, arm, layer) by the median over seeds. pandas and
matplotlib load inside the functions that draw on them.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from vbnn.stores.atomic import write_atomic

METRICS = ("nll", "accuracy", "ece")


def _spread(values: list[float], digits: int) -> str:
    """'median [min, max]' of ``values`` (the median alone for one value)."""
    middle = f"{statistics.median(values):.{digits}f}"
    if len(values) == 1:
        return middle
    return f"{middle} [{min(values):.{digits}f}, {max(values):.{digits}f}]"


def _groups(units: list[dict[str, Any]], kind: str) -> dict[tuple[str, str], list[dict]]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for unit in units:
        if unit["kind"] == kind:
            groups.setdefault((unit["network"], unit["arm"]), []).append(unit["info"])
    return groups


def training_table(units: list[dict[str, Any]], budgets: tuple[float, ...]) -> str:
    """Markdown: per (network, arm, budget) the median [min, max] over seeds of test NLL,
    accuracy, ECE, steps taken and milliseconds a step."""
    lines = ["| network | arm | budget, s | seeds | test NLL | accuracy | ECE | steps | ms/step |",
             "|---|---|---:|---:|---|---|---|---|---|"]  # fmt: skip
    for (network, arm), infos in _groups(units, "training").items():
        for budget in budgets:
            marks = [m for info in infos for m in info["marks"] if m["budget"] == budget]
            if not marks:
                continue
            cells = [_spread([m[name] for m in marks], 3) for name in METRICS]
            steps = _spread([float(m["steps"]) for m in marks], 0)
            step_ms = _spread([m["ms_per_step"] for m in marks], 2)
            lines.append(f"| {network} | {arm} | {budget:g} | {len(marks)} | "
                         f"{' | '.join(cells)} | {steps} | {step_ms} |")  # fmt: skip
    return "\n".join(lines)


def variance_table(units: list[dict[str, Any]]) -> str:
    """Markdown: per (network, arm, layer) the median over seeds of the gradient's relative
    variance from the noise alone (same minibatch) and from minibatch and noise together."""
    lines = ["| network | arm | layer | weights | relative variance, noise | "
             "relative variance, minibatch + noise |", "|---|---|---|---:|---:|---:|"]  # fmt: skip
    for (network, arm), infos in _groups(units, "variance").items():
        for layer in infos[0]["layers"]:
            rows = [info["layers"][layer] for info in infos]
            noise = statistics.median(row["noise_relative"] for row in rows)
            both = statistics.median(row["minibatch_relative"] for row in rows)
            lines.append(f"| {network} | {arm} | {layer} | {rows[0]['parameters']} | "
                         f"{noise:.3g} | {both:.3g} |")  # fmt: skip
    return "\n".join(lines)


def figure(units: list[dict[str, Any]], path: Path) -> None:
    """Test NLL against training seconds, one panel per network, one line per arm (median
    over seeds, the band min-max)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    groups = _groups(units, "training")
    networks = sorted({network for network, _ in groups})
    if not networks:
        return
    fig, axes = pyplot.subplots(1, len(networks), figsize=(4.5 * len(networks), 3.6),
                                squeeze=False)  # fmt: skip
    # one colour an arm in every panel (an arm missing from a network shifts no other's)
    arms = list(dict.fromkeys(arm for _, arm in groups))
    palette = pyplot.get_cmap("tab10" if len(arms) <= 10 else "tab20")
    colours = {arm: palette(index) for index, arm in enumerate(arms)}
    for axis, network in zip(axes[0], networks, strict=True):
        for (name, arm), infos in groups.items():
            if name != network:
                continue
            budgets = sorted({m["budget"] for info in infos for m in info["marks"]})
            values = [[m["nll"] for info in infos for m in info["marks"] if m["budget"] == b]
                      for b in budgets]  # fmt: skip
            axis.plot(budgets, [statistics.median(v) for v in values], "o-", label=arm,
                      color=colours[arm])  # fmt: skip
            axis.fill_between(budgets, [min(v) for v in values], [max(v) for v in values],
                              color=colours[arm], alpha=0.2)  # fmt: skip
        axis.set(title=network, xlabel="training seconds", ylabel="test NLL", xscale="log")
        axis.legend(fontsize="small")
    fig.tight_layout()
    write_atomic(path, lambda target: fig.savefig(target, format="png", dpi=120))
    pyplot.close(fig)


def write_report(out: Path, units: list[dict[str, Any]], budgets: tuple[float, ...]) -> str:
    """Write ``table.md`` and ``nll_vs_time.png`` into ``out``; returns the table's text."""
    environments = {
        tuple(sorted((k, str(v)) for k, v in unit["info"]["environment"].items() if k != "date"))
        for unit in units
    }
    machine = "; ".join(", ".join(f"{k} {v}" for k, v in env) for env in sorted(environments))
    text = (
        f"Machine: {machine}\n\nMedian [min, max] over seeds.\n\n"
        f"{training_table(units, budgets)}\n\nGradient variance w.r.t. the weight means "
        f"(tr Cov / ||mean||^2; median over seeds):\n\n{variance_table(units)}\n"
    )
    write_atomic(Path(out) / "table.md", text)
    figure(units, Path(out) / "nll_vs_time.png")
    return text
