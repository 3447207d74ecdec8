"""BayesianRegressor's defaults chosen on validation rows of UCI splits, and its in-between check.

Every (data set, split, setting) fits one ``BayesianRegressor`` (seed = split) on 80 % of the
split's *training* rows (a permutation seeded by the split) and scores the other 20 %, never the
split's test rows; one JSON line per fit is appended to ``--results`` (a re-run skips the fits
already there). ``--summary`` prints, per data set and setting, the validation LL as mean +- SEM
over splits and the paired difference to ``--baseline``.

``--gap`` is the check a new user makes: 300 points of sin(2x) + 0.1 noise on [-3, -1] and
[1, 3], and the predictive std (total and epistemic) in the gap (-0.9, 0.9) against that on the
data, with the learned noise std (true: 0.1), per setting.

    OMP_NUM_THREADS=1 VBNN_DATA_DIR=DIR python benchmarks/estimator_defaults.py \\
        --datasets boston,yacht,energy,concrete --splits 0,1,2 --results defaults.jsonl
    python benchmarks/estimator_defaults.py --summary --results defaults.jsonl
    OMP_NUM_THREADS=1 python benchmarks/estimator_defaults.py --gap --seeds 0,1,2
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
    "tanh-1e-3": {"activation": "tanh", "posterior_std": 1e-3, "hidden": (50,)},
    "relu-1e-3": {"activation": "relu", "posterior_std": 1e-3, "hidden": (50,)},
    "relu-1e-2": {"activation": "relu", "posterior_std": 1e-2, "hidden": (50,)},
    "relu-1e-2-2x50": {"activation": "relu", "posterior_std": 1e-2, "hidden": (50, 50)},
    "relu-1e-3-2x50": {"activation": "relu", "posterior_std": 1e-3, "hidden": (50, 50)},
    "relu-1e-2-2x50-5k": {
        "activation": "relu",
        "posterior_std": 1e-2,
        "hidden": (50, 50),
        "iterations": 5000,
    },
}
VALIDATION_SHARE = 0.2


def validation_rows(train: np.ndarray, split: int) -> tuple[np.ndarray, np.ndarray]:
    """The split's training rows cut into (fit rows, validation rows), seeded by the split."""
    order = np.random.default_rng(split).permutation(len(train))
    held = round(VALIDATION_SHARE * len(train))
    return train[order[held:]], train[order[:held]]


def read_rows(results: Path) -> list[dict]:
    """The whole JSON lines of ``results`` (none if it does not exist); a line torn by a killed
    fit is skipped with its line number, and a re-run fits it again."""
    rows = []
    lines = results.read_text().splitlines() if results.exists() else []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            print(f"{results}:{number}: skipped (not a whole JSON line)")
    return rows


def run(datasets: list[str], splits: list[int], settings: list[str], results: Path) -> None:
    done = {(row["dataset"], row["split"], row["setting"]) for row in read_rows(results)}
    for name in datasets:
        data = load_uci(name)
        for split in splits:
            fit_rows, held = validation_rows(data.split(split)[0], split)
            for label in settings:
                if (name, split, label) in done:
                    continue
                start = time.perf_counter()
                model = BayesianRegressor(seed=split, **SETTINGS[label])
                model.fit(data.inputs[fit_rows], data.target[fit_rows])
                mean = model.predict(data.inputs[held])
                row = {
                    "dataset": name, "split": split, "setting": label,
                    "validation_ll": model.score(data.inputs[held], data.target[held]),
                    "rmse": float(np.sqrt(np.mean((mean - data.target[held]) ** 2))),
                    "seconds": round(time.perf_counter() - start, 1),
                }  # fmt: skip
                with results.open("a") as handle:  # one whole line a fit; a torn one is skipped
                    handle.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)


def gap(settings: list[str], seed: int) -> None:
    """The in-between check (module docstring): one fit per setting, one line each."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.uniform(-3, -1, 150), rng.uniform(1, 3, 150)])
    y = np.sin(2 * x) + 0.1 * rng.standard_normal(300)
    regions = {"gap": (-0.9, 0.9), "left": (-3, -1), "right": (1, 3)}
    print(f"seed {seed}")
    print("| setting | std gap | std left | std right | epistemic gap | epistemic data | noise |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label in settings:
        model = BayesianRegressor(seed=seed, **SETTINGS[label]).fit(x.reshape(-1, 1), y)
        total, epistemic = {}, {}
        for region, (low, high) in regions.items():
            _, epi, alea = model.predict_components(np.linspace(low, high, 50).reshape(-1, 1))
            total[region] = float(np.sqrt(epi**2 + alea**2).mean())
            epistemic[region] = float(epi.mean())
        on_data = (epistemic["left"] + epistemic["right"]) / 2
        print(f"| {label} | {total['gap']:.3f} | {total['left']:.3f} | {total['right']:.3f} | "
              f"{epistemic['gap']:.3f} | {on_data:.3f} | {alea[0]:.3f} |", flush=True)  # fmt: skip


def _mean_sem(values: np.ndarray) -> str:
    sem = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
    return f"{values.mean():.3f} +- {sem:.3f}"


def summary(results: Path, baseline: str) -> None:
    rows = read_rows(results)
    table: dict[tuple[str, str], dict[int, float]] = {}
    for row in rows:
        table.setdefault((row["dataset"], row["setting"]), {})[row["split"]] = row["validation_ll"]
    print("| data set | setting | splits | validation LL | paired difference to " + baseline + " |")
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
    parser.add_argument("--gap", action="store_true", help="the in-between check and stop")
    parser.add_argument("--baseline", default="relu-1e-2")
    parser.add_argument("--seeds", default="0", help="the in-between check's seeds")
    args = parser.parse_args()
    if args.gap:
        for seed in (int(s) for s in args.seeds.split(",")):
            gap(args.settings.split(","), seed)
        return
    if not args.summary:
        run(args.datasets.split(","), [int(s) for s in args.splits.split(",")],
            args.settings.split(","), args.results)  # fmt: skip
    summary(args.results, args.baseline)


if __name__ == "__main__":
    main()
