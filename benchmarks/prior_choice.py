"""The defaults of a converted network, chosen on validation data: its prior (N(0, 1) on every
weight against a fan-in-scaled N(0, 1 / fan_in) per layer) and its estimator (the arms of the
time-to-quality benchmark, ``time_to_quality.py``), on the same protocol and step counts, scored
on held-out *training* images (never the test images).

    VBNN_DATA_DIR=../shared/data python benchmarks/prior_choice.py \
        --out benchmarks/results/prior_choice --timing benchmarks/results/time_to_quality

Validation images: the ``test_size`` training images that follow the benchmark's ``train_size``
in its seeded permutation, so disjoint from the images trained on. Each arm trains the number of
steps its stored step time gives each budget (the ``steps`` clock of the benchmark, whose
``timing`` units ``--timing`` names), so a choice is judged at the same compute as in the
benchmark. ``--priors layer-mean`` is a diagnostic, not a prior: vbnn's layers trained on
bayesian-torch's objective (each layer's KL divided by its number of weights), with
``--init-std`` for its initial std too; the bayesian-torch arms train on their own objective.
Every finished unit is stored at once; a re-run skips stored units and prints the table (median
[min, max] over seeds of the validation NLL, accuracy and ECE at each budget).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import time_to_quality as ttq
import torch
from torch.nn import functional

import vbnn
from vbnn.data.mnist import load_images
from vbnn.priors.gaussian import GaussianPrior
from vbnn.stores import unit_store

PRIORS = ("standard", "fan-in", "layer-mean")


def validation_images(network_name: ttq.Network, protocol: ttq.Protocol) -> tuple:
    """(train x, train y, validation x, validation y), both from the training split."""
    x, y = load_images(ttq.DATASETS[network_name], "train")
    rows = torch.randperm(len(y), generator=torch.Generator().manual_seed(protocol.data_seed))
    train, held = rows[: protocol.train_size], rows[protocol.train_size :][: protocol.test_size]
    return x[train].contiguous(), y[train], x[held].contiguous(), y[held]


def kl_with(prior: str):
    """The KL of a model under ``prior``: every layer's family default (N(0, 1)); each layer
    against N(0, 1 / fan_in) of its own fan-in (its biases too); or, as a diagnostic and no
    prior, ``layer-mean``: each layer's KL to N(0, 1) divided by its number of weights and biases,
    bayesian-torch's ``get_kl_loss`` on vbnn's layers (is the gap to it the objective?)."""
    if prior == "standard":
        return vbnn.kl
    if prior == "layer-mean":

        def layer_mean_kl(model: torch.nn.Module) -> torch.Tensor:
            return sum(layer.kl(layer.default_prior) / (layer.weight_mean[0].numel()
                                                         + layer.bias_mean[0].numel())
                       for layer in vbnn.variational_layers(model)).squeeze(0)  # fmt: skip

        return layer_mean_kl

    def fan_in_kl(model: torch.nn.Module) -> torch.Tensor:
        return sum(layer.kl(GaussianPrior(1.0 / math.sqrt(layer.operator.fan_in())))
                   for layer in vbnn.variational_layers(model)).squeeze(0)  # fmt: skip

    return fan_in_kl


def with_training_elbo(trainer: ttq.Trainer) -> Callable:
    """``ttq.evaluate`` plus, on the training images, the negative ELBO per image (its expected
    NLL, averaged over ``test_draws`` weight draws, plus the run's KL / N) and the median
    posterior std of the weights: where the optimisation stands on the objective."""

    @torch.no_grad()
    def measure(model, arm, x, y, protocol, seed) -> dict[str, float]:
        metrics = ttq.evaluate(model, arm, x, y, protocol, seed)
        model.eval()
        with torch.random.fork_rng(devices=[]), vbnn.mode(model, "weights"):
            torch.manual_seed(seed)
            nll = sum(functional.cross_entropy(model(chunk), labels, reduction="sum")
                      for _ in range(protocol.test_draws)
                      for chunk, labels in zip(trainer.x.split(500), trainer.y.split(500),
                                               strict=True))  # fmt: skip
        model.train()
        nll = nll.item() / (protocol.test_draws * len(trainer.y))
        kl = trainer.kl(model).item() / len(trainer.y)
        stds = torch.cat([layer.posterior_std()[0].flatten() for layer in
                          vbnn.variational_layers(model)])  # fmt: skip
        return {**metrics, "training_nll": nll, "kl_per_image": kl,
                "negative_elbo": nll + kl, "median_std": stds.median().item()}  # fmt: skip

    return measure


def units(args: argparse.Namespace) -> list[tuple[ttq.Network, ttq.Arm, str, int]]:
    """(network, arm, prior, seed) of every unit asked for; bayesian-torch's arms train on
    their own objective (prior "bayesian-torch")."""
    return [(network_name, arm, prior, seed)
            for network_name in args.networks
            for arm, _ in ttq.variants(args.arms, [None], network_name)
            for prior in (["bayesian-torch"] if arm in ttq.BAYESIAN_TORCH_KINDS else args.priors)
            for seed in args.seeds]  # fmt: skip


def train(args: argparse.Namespace, protocol: ttq.Protocol, network_name: ttq.Network,
          arm: ttq.Arm, prior: str, seed: int) -> None:  # fmt: skip
    """Train and store one unit unless it is stored."""
    # the step times were measured under the benchmark's protocol, whatever the budgets here
    budgets = ttq.Protocol().budgets
    timing = ttq.step_times(args.timing, network_name, replace(protocol, budgets=budgets))
    if timing is None:
        raise SystemExit(f"{args.timing}: no timing unit of {network_name.value}")
    key = {"benchmark": "prior_choice", "network": network_name.value, "arm": arm.value,
           "prior": prior, "seed": seed, "ms_per_step": timing["ms_per_step"][arm.value],
           "protocol": ttq.dataclasses.asdict(protocol)}  # fmt: skip
    if args.init_std is not None:
        key["init_std"] = args.init_std
    if args.training_elbo:
        key["training_elbo"] = True
    if unit_store.load_info(args.out, key) is not None:
        return
    data = validation_images(network_name, protocol)
    model, kl = ttq.build(network_name, arm, seed, args.init_std)
    own = arm in ttq.BAYESIAN_TORCH_KINDS
    trainer = ttq.Trainer(arm, (model, kl if own else kl_with(prior)), data[:2], protocol, seed)
    measure = with_training_elbo(trainer) if args.training_elbo else ttq.evaluate
    began = time.perf_counter()
    info = ttq.train_unit(trainer, data[2:], protocol, seed, key["ms_per_step"], measure)
    info["environment"] = ttq.environment(protocol)
    unit_store.save(args.out, key, None, info)
    print(f"{network_name.value} {arm.value} {prior} seed {seed}: "
          f"{time.perf_counter() - began:.0f} s", flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timing", type=Path, required=True,
                        help="the time-to-quality store holding the step times")  # fmt: skip
    parser.add_argument("--networks", nargs="+", type=ttq.Network, default=list(ttq.Network))
    parser.add_argument("--arms", nargs="+", type=ttq.Arm,
                        default=[ttq.Arm.VBNN_LRT, ttq.Arm.VBNN_WEIGHTS,
                                 ttq.Arm.VBNN_CONV_WEIGHTS])  # fmt: skip
    parser.add_argument("--priors", nargs="+", choices=PRIORS, default=list(PRIORS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--init-std",
        type=float,
        default=None,
        help="the vbnn arms' initial posterior std (default: the layers')",
    )
    parser.add_argument(
        "--training-elbo",
        action="store_true",
        help="also the negative ELBO on the training images at each budget",
    )
    parser.add_argument("--budgets", nargs="+", type=float, default=None,
                        help="seconds (default: the benchmark's)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--shard", type=ttq.shard_argument, default=(0, 1))
    parser.add_argument(
        "--report", action="store_true", help="only write and print the stored table"
    )
    args = parser.parse_args(argv)
    budgets = ttq.Protocol().budgets if args.budgets is None else tuple(args.budgets)
    protocol = ttq.Protocol(budgets=budgets, threads=args.threads, clock=ttq.Clock.STEPS)
    torch.set_num_threads(protocol.threads)
    if not args.report:
        for number, (network_name, arm, prior, seed) in enumerate(units(args)):
            if number % args.shard[1] == args.shard[0]:
                train(args, protocol, network_name, arm, prior, seed)
    text = report(args.out)
    (args.out / "table.md").write_text(text)
    print(text, end="")


def report(out: Path) -> str:
    """Every stored unit of ``out`` as a markdown table: median [min, max] over seeds per
    (network, arm, prior, budget); with the training ELBO where it was measured."""
    groups: dict[tuple, list[dict]] = {}
    for path in sorted(out.glob("*.json")):
        record = json.loads(path.read_text())
        key = record["settings"]
        prior = (
            key["prior"] if "init_std" not in key else f"{key['prior']}, std {key['init_std']:g}"
        )
        prior += ", training ELBO" if key.get("training_elbo") else ""
        if tuple(key["protocol"]["budgets"]) != ttq.Protocol().budgets:
            prior += f", to {max(key['protocol']['budgets']):g} s"
        for mark in record["info"]["marks"]:
            group = (key["network"], key["arm"], prior, mark["budget"])
            groups.setdefault(group, []).append(mark)
    metrics = {"nll": ".3f", "accuracy": ".3f", "ece": ".3f", "negative_elbo": ".4g",
               "median_std": ".2e"}  # fmt: skip
    lines = ["| network | arm | prior | budget, s | seeds | validation NLL | accuracy | ECE "
             "| training negative ELBO / image | median weight std |",
             "|---|---|---|---:|---:|---|---|---|---|---|"]  # fmt: skip
    order = {name: index for index, name in enumerate(network.value for network in ttq.Network)}
    for group in sorted(groups, key=lambda g: (order[g[0]], g[1], g[2], g[3])):
        marks, cells = groups[group], []
        for metric, form in metrics.items():
            values = [mark[metric] for mark in marks if metric in mark]
            if not values:  # a metric of the training-ELBO units only
                cells.append("")
                continue
            middle, low, high = statistics.median(values), min(values), max(values)
            cells.append(f"{middle:{form}} [{low:{form}}, {high:{form}}]")
        network_name, arm, prior, budget = group
        lines.append(f"| {network_name} | {arm} | {prior} | {budget:g} | {len(marks)} | "
                     + " | ".join(cells) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
