"""BayesianRegressor's defaults (ReLU, 0.01) against tanh with 1e-3 on UCI splits: test LL.

Every (data set, split, setting) fits one ``BayesianRegressor`` (seed = split) on the split's
training rows and scores its test rows; one JSON line per fit is appended to ``--results``.
``--summary`` reads that file and prints, per data set and setting, the mean +- SEM over splits
and the paired difference to ``--baseline`` (mean +- SEM of the per-split differences).

    OMP_NUM_THREADS=1 VBNN_DATA_DIR=DIR python benchmarks/estimator_defaults.py \\
        --datasets boston,yacht,energy,concrete --splits 0,1,2 --results defaults.jsonl
    python benchmarks/estimator_defaults.py --summary --results defaults.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from vbnn.data import load_uci
from vbnn.regression.estimator import BayesianRegressor

SETTINGS = {
    "tanh-1e-3": {"activation": "tanh", "posterior_std": 1e-3},  # the baseline
    "relu-1e-3": {"activation": "relu", "posterior_std": 1e-3},
    "relu-1e-2": {"activation": "relu", "posterior_std": 1e-2},  # the defaults now
}


def run(datasets: list[str], splits: list[int], settings: list[str], results: Path) -> None:
    for name in datasets:
        data = load_uci(name)
        for split in splits:
            train, test = data.split(split)
            for label in settings:
                start = time.perf_counter()
                model = BayesianRegressor(seed=split, **SETTINGS[label])
                model.fit(data.inputs[train], data.target[train])
                mean = model.predict(data.inputs[test])
                row = {
                    "dataset": name, "split": split, "setting": label,
                    "test_ll": model.score(data.inputs[test], data.target[test]),
                    "rmse": float(np.sqrt(np.mean((mean - data.target[test]) ** 2))),
                    "seconds": round(time.perf_counter() - start, 1),
                }  # fmt: skip
                with results.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)


def _mean_sem(values: np.ndarray) -> str:
    sem = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
    return f"{values.mean():.3f} +- {sem:.3f}"


def summary(results: Path, baseline: str) -> None:
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    table: dict[tuple[str, str], dict[int, float]] = {}
    for row in rows:
        table.setdefault((row["dataset"], row["setting"]), {})[row["split"]] = row["test_ll"]
    print("| data set | setting | splits | test LL | paired difference to " + baseline + " |")
    print("|---|---|---:|---:|---:|")
    pooled: dict[str, list[float]] = {}
    for (dataset, setting), lls in sorted(table.items()):
        base = table.get((dataset, baseline), {})
        shared = sorted(set(lls) & set(base))
        differences = np.array([lls[s] - base[s] for s in shared])
        pooled.setdefault(setting, []).extend(differences.tolist())
        paired = _mean_sem(differences) if setting != baseline and len(shared) else "-"
        values = np.array(list(lls.values()))
        print(f"| {dataset} | {setting} | {len(lls)} | {_mean_sem(values)} | {paired} |")
    for setting, differences in sorted(pooled.items()):
        if setting != baseline:
            values = np.array(differences)
            print(f"all pairs, {setting} - {baseline}: {_mean_sem(values)} nats "
                  f"({len(values)} pairs, {int((values > 0).sum())} better)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="boston,yacht,energy,concrete")
    parser.add_argument("--splits", default="0,1,2")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--results", type=Path, default=Path("estimator_defaults.jsonl"))
    parser.add_argument("--summary", action="store_true", help="summarise --results and stop")
    parser.add_argument("--baseline", default="tanh-1e-3")
    args = parser.parse_args()
    if not args.summary:
        run(args.datasets.split(","), [int(s) for s in args.splits.split(",")],
            args.settings.split(","), args.results)  # fmt: skip
    summary(args.results, args.baseline)


if __name__ == "__main__":
    main()
