"""Table 1 and Figure 1 of Trippe & Turner 2017: our test log-likelihoods beside the paper's.

Each cell is "mean +- SEM" over splits, beside the published value, and marked
    agree  if |ours - published| <= 2 sqrt(SEM_ours^2 + SEM_published^2),
    better if ours is higher by more than that (higher test log-likelihood is better),
    worse  if lower by more than that.
The published SEMs are given to two decimals (power's HMC and SGLD as 0.00), so the combined
standard error is taken as printed; a published 0.00 makes the test rest on our SEM alone.
The paper's HMC and SGLD columns are reproduced alongside.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vbnn.data.paths import published_path
from vbnn.plots import pyplot, save_figure
from vbnn.regression.report import mean_and_standard_error
from vbnn.regression.runs import RunResult
from vbnn.stores.atomic import write_atomic
from vbnn.stores.markdown import markdown_table

DATASETS = ("boston", "concrete", "energy", "power", "wine", "yacht")
METHODS = ("ES", "MAP", "MF", "GD", "FC", "SGLD")
PUBLISHED_ONLY = ("HMC", "SGLD")
KEY = "overpruning_table1"


def default_published_path() -> Path:
    """``shared/reference/published.json`` (see ``vbnn.data.paths.published_path``)."""
    return published_path()


def load_published(path: str | Path | None = None) -> dict[str, dict[str, tuple[float, float]]]:
    """The paper's Table 1 as {dataset: {method: (mean, SEM)}}.

    Raises:
        FileNotFoundError: the file is missing (its path named).
        ValueError: it has no ``overpruning_table1`` entry.
    """
    path = Path(path) if path is not None else default_published_path()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: published values not found (pass published_path)")
    content = json.loads(path.read_text())
    if KEY not in content or "datasets" not in content[KEY]:
        raise ValueError(f"{path}: no '{KEY}.datasets' entry")
    return {
        dataset: {k: (float(v[0]), float(v[1])) for k, v in values.items() if isinstance(v, list)}
        for dataset, values in content[KEY]["datasets"].items()
    }


def summary_from_results(results: Iterable[RunResult]) -> pd.DataFrame:
    """Columns dataset, method, mean, sem, splits from RunResults (test log-likelihood)."""
    rows = []
    for result in results:
        values = [s.test_log_likelihood for s in result.splits]
        mean, sem = mean_and_standard_error(values)
        method = result.config.method
        rows.append({"dataset": result.dataset, "method": str(method).upper(), "mean": mean,
                     "sem": sem, "splits": len(values)})  # fmt: skip
    return pd.DataFrame(rows)


def summary_from_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Columns dataset, method, mean, sem, splits from rows of the results database's ``runs``.

    ``runs`` is ``ResultsDatabase.runs_frame()``, filtered by the caller to the runs of the
    table (e.g. one seed, the tuned configurations). Per-split tuning gives one configuration
    per split, so rows are grouped by (dataset, method) only.

    Raises:
        ValueError: a (dataset, method) holds the same split twice (two configurations or seeds
            mixed: filter first).
    """
    duplicated = runs.duplicated(["dataset", "method", "split"], keep=False)
    if duplicated.any():
        clash = runs[duplicated][["dataset", "method", "split"]].drop_duplicates()
        raise ValueError(
            "summary_from_runs: splits stored more than once (filter to one configuration and "
            f"seed per split): {clash.head(5).to_dict('records')}"
        )
    rows = []
    for (dataset, method), part in runs.groupby(["dataset", "method"], sort=False):
        mean, sem = mean_and_standard_error(part["test_log_likelihood"].tolist())
        rows.append({"dataset": dataset, "method": str(method).upper(), "mean": mean, "sem": sem,
                     "splits": len(part)})  # fmt: skip
    return pd.DataFrame(rows)


def mark(ours: float, ours_sem: float, published: float, published_sem: float) -> str:
    """'agree', 'better' or 'worse' at 2 combined standard errors (higher is better)."""
    values = (ours, ours_sem, published, published_sem)
    if not all(math.isfinite(v) for v in values) or ours_sem < 0 or published_sem < 0:
        raise ValueError(f"mark: need finite values and SEMs >= 0, got {values}")
    difference = ours - published
    if abs(difference) <= 2.0 * math.hypot(ours_sem, published_sem):
        return "agree"
    return "better" if difference > 0 else "worse"


def comparison(
    ours: pd.DataFrame, published: Mapping[str, Mapping[str, tuple[float, float]]]
) -> pd.DataFrame:
    """One row per (dataset, method) of ours, with the published value and the mark."""
    missing = {"dataset", "method", "mean", "sem"} - set(ours.columns)
    if missing:
        raise ValueError(f"comparison: our results lack columns {sorted(missing)}")
    rows = []
    for row in ours.itertuples(index=False):
        method = str(row.method).upper()
        reference = published.get(row.dataset, {}).get(method)
        entry: dict[str, Any] = {
            "dataset": row.dataset,
            "method": method,
            "ours_mean": float(row.mean),
            "ours_sem": float(row.sem),
            "splits": getattr(row, "splits", None),
            "published_mean": math.nan,
            "published_sem": math.nan,
            "difference": math.nan,
            "combined_se": math.nan,
            "mark": "",
        }
        if reference is not None:
            entry.update(
                published_mean=reference[0],
                published_sem=reference[1],
                difference=float(row.mean) - reference[0],
                combined_se=math.hypot(float(row.sem), reference[1]),
                mark=mark(float(row.mean), float(row.sem), *reference),
            )
        rows.append(entry)
    return pd.DataFrame(rows)


def _wide(table: pd.DataFrame, published: Mapping[str, Mapping[str, tuple[float, float]]]):
    datasets = [d for d in DATASETS if d in set(table["dataset"])] + sorted(
        set(table["dataset"]) - set(DATASETS)
    )
    methods = [m for m in METHODS if m in set(table["method"])]
    rows = []
    for dataset in datasets:
        row: dict[str, str] = {"dataset": dataset}
        for name in PUBLISHED_ONLY:
            value = published.get(dataset, {}).get(name)
            row[f"{name} (paper)"] = "" if value is None else f"{value[0]:.2f} +- {value[1]:.2f}"
        for method in methods:
            cell = table[(table["dataset"] == dataset) & (table["method"] == method)]
            if cell.empty:
                row[method] = "-"
                continue
            c = cell.iloc[0]
            text = f"{c.ours_mean:.2f} +- {c.ours_sem:.2f}"
            if c.mark:
                text += f" (paper {c.published_mean:.2f} +- {c.published_sem:.2f}) **{c.mark}**"
            row[method] = text
        rows.append(row)
    return pd.DataFrame(rows)


def plot_figure1(table: pd.DataFrame, path: str | Path) -> Path:
    """Figure 1: per data set, bars of our mean test LL +- 1 SEM, the paper's value beside."""
    datasets = [d for d in DATASETS if d in set(table["dataset"])]
    datasets += sorted(set(table["dataset"]) - set(DATASETS))
    methods = [m for m in METHODS if m in set(table["method"])]
    columns = min(3, len(datasets))
    rows = -(-len(datasets) // columns)
    figure, axes = pyplot().subplots(
        rows, columns, figsize=(4.4 * columns, 3.3 * rows), squeeze=False
    )
    for axis, dataset in zip(axes.flat, datasets, strict=False):
        part = table[table["dataset"] == dataset].set_index("method")
        where = np.arange(len(methods))
        ours = [part.ours_mean.get(m, np.nan) for m in methods]
        ours_sem = [part.ours_sem.get(m, np.nan) for m in methods]
        paper = [part.published_mean.get(m, np.nan) for m in methods]
        paper_sem = [part.published_sem.get(m, np.nan) for m in methods]
        # bars rise from a floor below the lowest value, so the lowest bar still shows
        values = np.concatenate([np.asarray(ours) - np.nan_to_num(ours_sem),
                                 np.asarray(paper) - np.nan_to_num(paper_sem)])  # fmt: skip
        low, high = np.nanmin(values), np.nanmax(values)
        bottom = low - max(0.15 * (high - low), 0.05)
        heights = np.asarray(ours) - bottom
        axis.bar(where - 0.18, heights, 0.36, bottom=bottom, yerr=ours_sem, color="C0",
                 capsize=2, label="ours")  # fmt: skip
        axis.bar(where + 0.18, np.asarray(paper) - bottom, 0.36, bottom=bottom, yerr=paper_sem,
                 color="0.7", capsize=2, label="paper")  # fmt: skip
        axis.set_xticks(where, methods, fontsize=8)
        axis.set_title(dataset, fontsize=10)
        axis.set_ylabel("test log-likelihood", fontsize=8)
    for axis in list(axes.flat)[len(datasets) :]:
        axis.axis("off")
    axes.flat[0].legend(fontsize=8)
    figure.suptitle("Figure 1: mean test log-likelihood +- 1 SEM (higher is better)", fontsize=10)
    figure.tight_layout()
    return save_figure(figure, path, dpi=110)


def write_table1(
    ours: pd.DataFrame,
    out: str | Path,
    published_path: str | Path | None = None,
    notes: Iterable[str] = (),
) -> list[Path]:
    """Write ``table1.csv`` (long form), ``table1.md`` (wide form) and ``figure1.png``.

    Args:
        ours: columns dataset, method, mean, sem (and optionally splits): test log-likelihood.
        out: output folder.
        published_path: the published.json file (default: :func:`default_published_path`).
        notes: lines written under the markdown table (settings, what quick mode cut).
    """
    published = load_published(published_path)
    table = comparison(ours, published)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "table1.csv", table.to_csv(index=False))
    marks = table["mark"].value_counts()
    lines = [
        "# Table 1: held-out mean log-likelihood (nats), ours beside the paper's",
        "",
        "Cells: ours mean +- SEM over splits (paper mean +- SEM) **mark**; agree / better / worse "
        "at 2 combined standard errors, higher is better. HMC and SGLD (paper) are the "
        "published columns.",
        "",
        markdown_table(_wide(table, published)),
        "",
        "Marks: " + ", ".join(f"{k} {int(marks.get(k, 0))}" for k in ("agree", "better", "worse")),
        *[f"\n{note}" for note in notes],
        "",
    ]
    write_atomic(out / "table1.md", "\n".join(lines))
    figure = plot_figure1(table, out / "figure1.png")
    return [out / "table1.md", out / "table1.csv", figure]
