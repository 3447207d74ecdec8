"""Adversarial robustness of variance networks (Neklyudov et al. 2019 section 6.3, Neklyudov et al.
2018 section 6.3) on MNIST and Fashion-MNIST with LeNet-5 (the papers' CIFAR-10 VGG-like experiment
needs the CIFAR archive: ``vbnn.data.cifar`` and ``vbnn.networks.vgg`` provide both for users who
can download it).

Targeted iterative fast gradient sign attacks with a fixed step (``attack``) against five
predictors (``models``): a deterministic network, dropout (10 masks), a deep ensemble of 5, the
variance network (10 weight samples) and a deep ensemble of 5 variance networks (10 samples each).
Writes per data set and predictor the successful-attack rate and mean predictive entropy per
iteration (``attacks.csv``), a figure like Neklyudov et al. 2019 Fig. 7 (``attacks.png``),
``summary.md`` and ``run.json``; the trained stacks are kept in ``OUT/runs`` (``stores.unit_store``)
and reused. The papers print no numbers for this experiment (curves only), so there is nothing to
set beside them.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd
import torch

from vbnn.data.mnist import load_images
from vbnn.stores.atomic import write_atomic
from vbnn.stores.markdown import markdown_table
from vbnn_lab.adversarial.attack import AttackConfig, random_targets, targeted_attack
from vbnn_lab.adversarial.models import (
    StackRun,
    Training,
    TrainingBudget,
    as_predictor_model,
    predictor_specs,
    train_stack,
)
from vbnn_lab.adversarial.report import plot_attacks, summary_table

__all__ = ["BUDGETS", "DESCRIPTION", "Budget", "add_arguments", "run"]

DESCRIPTION = (
    "Adversarial attacks (Neklyudov et al. 2018, 2019 sec. 6.3): iterative FGSM, variance networks"
)
DEFAULT_OUT = "results/adversarial"
DATASETS = ("mnist", "fashion-mnist")


@dataclass(frozen=True)
class Budget:
    """Training of the three runs, attacked test images, attack settings and K."""

    name: str
    training: TrainingBudget
    images: int
    attack: AttackConfig
    samples: int = 10
    images_for_accuracy: int = 2000  # test images of the accuracy check (K = 10)


QUICK = Budget(
    "quick", TrainingBudget(train_size=2000, epochs=2), 100, AttackConfig(step=0.02, iterations=10),
    images_for_accuracy=500,
)  # fmt: skip
FULL = Budget(
    "full", TrainingBudget(train_size=60000, epochs=3), 500, AttackConfig(step=0.01, iterations=30)
)
BUDGETS = {"quick": QUICK, "full": FULL}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="~1-2 min: small training set")
    parser.add_argument("--dataset", choices=[*DATASETS, "both"], default="both")
    parser.add_argument("--train-size", type=int, default=None, help="override the budget's")
    parser.add_argument("--epochs", type=int, default=None, help="override the budget's")
    parser.add_argument("--images", type=int, default=None, help="attacked test images")
    parser.add_argument("--iterations", type=int, default=None, help="attack iterations")
    parser.add_argument("--step", type=float, default=None, help="epsilon per iteration")
    parser.add_argument("--samples", type=int, default=None, help="K of the stochastic ones")
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")


def resolve_budget(args: argparse.Namespace) -> Budget:
    budget = BUDGETS["quick" if args.quick else "full"]
    training = budget.training
    if args.train_size is not None:
        training = replace(training, train_size=args.train_size)
    if args.epochs is not None:
        training = replace(training, epochs=args.epochs)
    attack = replace(budget.attack, seed=args.seed)
    if args.iterations is not None:
        attack = replace(attack, iterations=args.iterations)
    if args.step is not None:
        attack = replace(attack, step=args.step)
    images = budget.images if args.images is None else args.images
    samples = budget.samples if args.samples is None else args.samples
    if images < 1 or samples < 1:
        raise ValueError(f"--images {images} and --samples {samples} must be >= 1")
    chosen = replace(budget, training=training, attack=attack, images=images, samples=samples)
    changed = replace(chosen, attack=replace(attack, seed=0)) != budget
    return replace(chosen, name=f"{budget.name}, overridden") if changed else chosen


def attack_dataset(
    dataset: str, budget: Budget, args: argparse.Namespace, out: Path
) -> tuple[pd.DataFrame, dict]:
    """Train the three runs on ``dataset``, attack the five predictors; (rows, training info)."""
    train_x, train_y = load_images(dataset, "train", args.data_dir)
    test_x, test_y = load_images(dataset, "test", args.data_dir)
    tested = budget.images_for_accuracy
    data = (train_x, train_y, test_x[:tested], test_y[:tested])
    stacks, info = {}, {}
    for training in Training:
        stacks[training], info[training.value] = train_stack(
            StackRun(training, dataset, args.seed), data, budget.training, out / "runs",
            progress=not args.no_progress,
        )  # fmt: skip
    images, labels = test_x[: budget.images], test_y[: budget.images]
    targets = random_targets(labels, 10, args.seed)
    rows = []
    for predictor, spec in predictor_specs(budget.samples).items():
        started = time.perf_counter()
        model = as_predictor_model(stacks, spec)
        trace = targeted_attack(model, images, targets, budget.attack, spec.prediction)
        seconds = time.perf_counter() - started
        info[f"attack_seconds_{predictor.value}"] = seconds
        for iteration, (rate, value) in enumerate(
            zip(trace.success_rate, trace.mean_entropy, strict=True)
        ):
            rows.append({"dataset": dataset, "predictor": predictor.value,
                         "iteration": iteration, "success_rate": rate,
                         "mean_entropy": value})  # fmt: skip
        print(f"{dataset} {predictor.value}: success {100 * trace.success_rate[-1]:.1f} % after "
              f"{budget.attack.iterations} iterations ({seconds:.0f} s)")  # fmt: skip
    return pd.DataFrame(rows), info


def run(args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    budget = resolve_budget(args)
    out = Path(args.out)
    datasets = DATASETS if args.dataset == "both" else (args.dataset,)
    started = time.perf_counter()
    frames, infos = [], {}
    for dataset in datasets:
        frame, infos[dataset] = attack_dataset(dataset, budget, args, out)
        frames.append(frame)
    frame = pd.concat(frames, ignore_index=True)
    seconds = time.perf_counter() - started
    write_atomic(out / "attacks.csv", frame.to_csv(index=False))
    last = budget.attack.iterations
    marks = tuple(sorted({0, last // 5, last // 2, last}))
    table = summary_table(frame, marks)
    title = (f"targeted iterative FGSM, step {budget.attack.step}, {budget.images} test images; "
             f"LeNet-5 trained {budget.training.epochs} epochs on "
             f"{budget.training.train_size} images")  # fmt: skip
    plot_attacks(frame, out / "attacks.png", title)
    note = (f"budget {budget.name}: {title}; K = {budget.samples}; wall {seconds:.0f} s "
            f"(threads={torch.get_num_threads()})")  # fmt: skip
    accuracy_rows = [
        {"dataset": d, "run": run_name, **{k: round(v, 2) for k, v in
                                           i["test_accuracy_member0"].items()},
         "log alpha dense1": i["log_alpha_dense1"], "train s": round(i["train_seconds"])}
        for d, runs in infos.items() for run_name, i in runs.items() if isinstance(i, dict)
    ]  # fmt: skip
    accuracy = pd.DataFrame(accuracy_rows)
    summary = (f"{note}\n\nTest accuracy (%) of member 0 of each run on "
               f"{budget.images_for_accuracy} test images "
               f"(K = 10):\n\n{markdown_table(accuracy, float_format='{:.2f}')}\n\n"
               f"Attacks:\n\n{markdown_table(table)}\n")  # fmt: skip
    write_atomic(out / "summary.md", summary)
    record = {"budget": asdict(budget), "seconds": seconds, "seed": args.seed,
              "datasets": list(datasets), "runs": infos}  # fmt: skip
    write_atomic(out / "run.json", json.dumps(record, indent=1, default=str))
    print(summary)
