"""IVON on attention networks: a tiny BERT classifier and a tiny GPT-2 language model, built from
their configurations (random weights, no download), scored on validation data only.

Tasks (fixed data seed 0; 1,000 training sequences of 16 tokens, the last 200 of a further 400
the untouched test set, the first 200 the validation set that chooses):

* ``bert``: ``BertForSequenceClassification`` (hidden 32, 2 layers, 2 heads, intermediate 64,
  vocabulary 50); label = the sequence holds token 7 or 11 (about half do).
* ``gpt2``: ``GPT2LMHeadModel`` (the same sizes) reading a sequence of the synthetic language
  t_{i+1} = (5 t_i + 3) mod 50, each token replaced by a uniform one with probability 0.1; it
  predicts the last token from the 15 before it (validation perplexity exp(NLL)).

Arms (``ARMS``): ``point`` (the plain network, Adam at vbnn.train's default step),
``mf-adam`` (``vbnn.convert(net, "mf")``, the ELBO by Adam), and IVON at named settings. The
model is wrapped in a module whose ``forward(x)`` returns the logits; GPT-2's ``Conv1D``
projections are swapped for the equal ``nn.Linear`` first (convert replaces ``nn.Linear``). After
every epoch the validation NLL, accuracy and ECE of the mean of 16 weight draws' probabilities
are recorded; the test set is scored once, at the end, for the report, never to choose.

    OMP_NUM_THREADS=1 python benchmarks/ivon_attention.py \\
        --out benchmarks/results/ivon_attention.jsonl
    python benchmarks/ivon_attention.py --out benchmarks/results/ivon_attention.jsonl --report

One JSON line per (task, arm, seed) run is appended to ``--out`` (a re-run skips those stored).
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from ivon_step_size import stored
from torch import nn

import vbnn
from vbnn.stores.markdown import markdown_table

VOCAB, LENGTH, TRAIN, HELD = 50, 16, 1000, 400
EPOCHS, DRAWS, BINS = 30, 16, 10
TASKS = ("bert", "gpt2")

# The arms of the default run: the issue's, the defaults and the rule
MAIN = ("point", "mf-adam", "ivon", "ivon-attention", "ivon-a0.1-h0.1", "ivon-a0.2-h0.5")
# Each arm's IVON settings (None: Adam); the rest diagnose (on seed 0, some on seeds 0-2)
ARMS: dict[str, Callable[[], vbnn.IVON] | None] = {
    "point": None,
    "mf-adam": None,
    "ivon": vbnn.IVON,
    "ivon-a0.1-h0.1": partial(vbnn.IVON, learning_rate=0.1, hess_init=0.1),
    "ivon-a0.2-h0.5": partial(vbnn.IVON, learning_rate=0.2, hess_init=0.5),
    "ivon-h10": partial(vbnn.IVON, hess_init=10.0),
    "ivon-h100": partial(vbnn.IVON, hess_init=100.0),
    "ivon-ess1e9": partial(vbnn.IVON, ess=1e9),
    "ivon-b0.999": partial(vbnn.IVON, beta2=0.999),
    "ivon-b0.99": partial(vbnn.IVON, beta2=0.99),
    "ivon-a2": partial(vbnn.IVON, learning_rate=2.0),
    "ivon-a5": partial(vbnn.IVON, learning_rate=5.0),
    "ivon-a1": partial(vbnn.IVON, learning_rate=1.0),
    "ivon-attention": vbnn.IVON.for_attention,  # learning rate 5, clip radius 0.0007
    "ivon-a3-r0.001": partial(vbnn.IVON, learning_rate=3.0, clip_radius=0.001),
    "ivon-a10-r0.001": partial(vbnn.IVON, learning_rate=10.0, clip_radius=0.001),
    "ivon-a3-r0.001-ess1e9": partial(vbnn.IVON, learning_rate=3.0, clip_radius=0.001, ess=1e9),
    "ivon-h10-r0.0005": partial(vbnn.IVON, hess_init=10.0, clip_radius=0.0005),
    "ivon-a1.5-r0.0002-h10": partial(
        vbnn.IVON, learning_rate=1.5, clip_radius=0.0002, hess_init=10.0
    ),
    "ivon-a3-r0.0001-h10": partial(
        vbnn.IVON, learning_rate=3.0, clip_radius=0.0001, hess_init=10.0
    ),
}


def sequences(task: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The task's TRAIN + HELD sequences (N, LENGTH) and targets (N,), drawn from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    count = TRAIN + HELD
    if task == "bert":
        x = torch.randint(VOCAB, (count, LENGTH), generator=generator)
        return x, ((x == 7) | (x == 11)).any(1).long()
    tokens = torch.empty(count, LENGTH, dtype=torch.long)
    tokens[:, 0] = torch.randint(VOCAB, (count,), generator=generator)
    for i in range(1, LENGTH):
        noise = torch.rand(count, generator=generator) < 0.1
        uniform = torch.randint(VOCAB, (count,), generator=generator)
        tokens[:, i] = torch.where(noise, uniform, (5 * tokens[:, i - 1] + 3) % VOCAB)
    return tokens[:, :-1], tokens[:, -1]


class Logits(nn.Module):
    """``forward(x)``: the logits of a Hugging Face model on token ids x (N, T): (N, classes),
    the last position's for a language model."""

    def __init__(self, model: nn.Module, last: bool) -> None:
        super().__init__()
        self.model, self.last = model, last

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.model(input_ids=x).logits
        return logits[:, -1] if self.last else logits


def linear_projections(model: nn.Module) -> nn.Module:
    """``model`` with every transformers ``Conv1D`` (y = x W + b, W (in, out)) swapped for the
    equal ``nn.Linear`` (weight W^T)."""
    from transformers.pytorch_utils import Conv1D

    for name, module in list(model.named_modules()):
        if isinstance(module, Conv1D):
            fan_in, fan_out = module.weight.shape
            linear = nn.Linear(fan_in, fan_out)
            linear.weight.data.copy_(module.weight.data.t())
            linear.bias.data.copy_(module.bias.data)
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, linear)
    return model


def build(task: str, seed: int) -> nn.Module:
    """The task's network from its configuration, weights drawn from ``seed``."""
    import transformers

    torch.manual_seed(seed)
    sizes = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "vocab_size": VOCAB,
    }
    if task == "bert":
        config = transformers.BertConfig(**sizes, max_position_embeddings=LENGTH, num_labels=2)
        return Logits(transformers.BertForSequenceClassification(config), last=False)
    config = transformers.GPT2Config(
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_inner=64,
        n_positions=LENGTH,
        vocab_size=VOCAB,
        bos_token_id=0,
        eos_token_id=0,
        tie_word_embeddings=False,
    )
    return Logits(linear_projections(transformers.GPT2LMHeadModel(config)), last=True)


def predictive(network: nn.Module, x: torch.Tensor, bayesian: bool) -> torch.Tensor:
    """The mean of DRAWS weight draws' probabilities (the plain network's own), (N, classes)."""
    network.eval()
    with torch.no_grad():
        if not bayesian:
            return network(x).softmax(-1)
        with vbnn.mode(network, "weights"):
            return torch.stack([network(x).softmax(-1) for _ in range(DRAWS)]).mean(0)


def metrics(probabilities: torch.Tensor, y: torch.Tensor) -> dict:
    """NLL, accuracy and ECE (BINS equal-width bins of the top probability)."""
    nll = -probabilities[torch.arange(len(y)), y].clamp_min(1e-12).log().mean().item()
    confidence, guess = probabilities.max(-1)
    correct = (guess == y).double()
    bins = (confidence * BINS).long().clamp_max(BINS - 1)
    ece = sum(
        (correct[bins == b].mean() - confidence[bins == b].double().mean()).abs().item()
        * (bins == b).double().mean().item()
        for b in range(BINS)
        if (bins == b).any()
    )
    return {"nll": nll, "accuracy": correct.mean().item(), "ece": ece}


def optimizer_of(arm: str) -> tuple[str | vbnn.IVON, bool]:
    """vbnn.train's ``optimizer`` for ``arm`` and whether the arm is Bayesian."""
    settings = ARMS[arm]
    if settings is None:
        return "adam", arm != "point"
    return settings(), True


def run(task: str, arm: str, seed: int) -> dict:
    """One training run of ``arm`` on ``task`` from ``seed``: validation metrics per epoch and
    the test metrics of the last epoch."""
    x, y = sequences(task)
    fit, validation, test = slice(0, TRAIN), slice(TRAIN, TRAIN + 200), slice(TRAIN + 200, None)
    optimizer, bayesian = optimizer_of(arm)
    network = build(task, seed)
    if bayesian:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # embeddings stay point estimates (Adam)
            network = vbnn.convert(network, "mf")
    curve: list[dict] = []

    def record(epoch: int, trained: nn.Module, _: dict) -> None:
        curve.append(metrics(predictive(trained, x[validation], bayesian), y[validation]))

    start = time.perf_counter()
    vbnn.train(
        network,
        (x[fit], y[fit]),
        epochs=EPOCHS,
        seed=seed,
        progress=False,
        objective="elbo" if bayesian else "likelihood",
        optimizer=optimizer,
        callbacks=[record],
    )
    seconds = time.perf_counter() - start
    final = metrics(predictive(network, x[test], bayesian), y[test])
    return {
        "task": task,
        "arm": arm,
        "seed": seed,
        "seconds": seconds,
        "curve": curve,
        **{f"test_{key}": value for key, value in final.items()},
    }


def behind(curve: list[dict], reference: list[dict] | None) -> int:
    """The epochs at which ``curve``'s validation accuracy is more than 0.02 below
    ``reference``'s (mf-adam's of the same task and seed; -1 without one)."""
    if reference is None:
        return -1
    return sum(p["accuracy"] < q["accuracy"] - 0.02 for p, q in zip(curve, reference, strict=True))


def report(rows: list[dict]) -> str:
    """Per task and arm, the mean over seeds of the last epoch's validation metrics, the epochs
    behind mf-adam's validation accuracy by more than 0.02, and the test metrics."""
    references = {(r["task"], r["seed"]): r["curve"] for r in rows if r["arm"] == "mf-adam"}
    records = []
    for row in rows:
        last = row["curve"][-1]
        records.append(
            {
                "task": row["task"],
                "arm": row["arm"],
                "seed": row["seed"],
                "val_acc": last["accuracy"],
                "val_nll": last["nll"],
                "val_ppl": math.exp(last["nll"]),
                "val_ece": last["ece"],
                "epochs_behind": behind(row["curve"], references.get((row["task"], row["seed"]))),
                "test_acc": row["test_accuracy"],
                "test_nll": row["test_nll"],
                "test_ece": row["test_ece"],
                "seconds": row["seconds"],
            }
        )
    frame = pd.DataFrame(records)
    groups = frame.drop(columns="seed").groupby(["task", "arm"], sort=False)
    table = groups.mean().assign(seeds=groups.size())
    return markdown_table(table.round(3), index=True)


def gradient_scales() -> str:
    """The median |dl/dw| of every weight matrix at initialisation (seed 0), l the mean NLL of
    128 examples: the two tasks' networks beside ``compare_networks.py``'s CNN and MLP."""
    from compare_networks import CASES, subset

    from vbnn.data.mnist import load_images

    batches = {task: (build(task, 0), *(t[:128] for t in sequences(task))) for task in TASKS}
    for case in ("cnn-5", "mlp"):
        torch.manual_seed(0)
        batches[case] = (CASES[case].build(), *subset(*load_images(CASES[case].data), 128, 0))
    lines = []
    for name, (network, x, y) in batches.items():
        network.train()
        nn.functional.cross_entropy(network(x), y).backward()
        for path, parameter in network.named_parameters():
            if parameter.dim() >= 2 and parameter.grad is not None:
                scale = parameter.grad.abs().median().item()
                lines.append(f"{name} {path}: median |g| {scale:.1e}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("ivon_attention.jsonl"))
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(MAIN))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--gradients", action="store_true", help="print gradient_scales()")
    arguments = parser.parse_args()
    if arguments.gradients:
        print(gradient_scales())
        return
    if arguments.report:
        print(report(stored(arguments.out)))
        return
    torch.set_num_threads(1)
    done = {(row["task"], row["arm"], row["seed"]) for row in stored(arguments.out)}
    for seed in range(arguments.seeds):
        for task in arguments.tasks:
            for arm in arguments.arms:
                if (task, arm, seed) in done:
                    continue
                row = run(task, arm, seed)
                with arguments.out.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
                accuracies = " ".join(f"{p['accuracy']:.2f}" for p in row["curve"][::3])
                print(task, arm, seed, f"{row['seconds']:.0f}s", accuracies, flush=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
