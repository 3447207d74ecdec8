"""A transformer and an LSTM classifier, plain and mean-field, on a synthetic token task.

    OMP_NUM_THREADS=1 python benchmarks/sequence_models.py \
        --out benchmarks/results/sequence_models.json
    python benchmarks/sequence_models.py --quick        # seconds: the script runs end to end

Task: sequences of 12 tokens from a vocabulary of 6; the label says whether the sequence holds
the pattern 1 2 3 (contiguous); half the sequences have it planted. Networks:

* ``transformer``: token embedding (16) + learned positions, two ``nn.TransformerEncoderLayer``
  (2 heads, feed-forward 32, no dropout, batch first), mean over positions, linear head;
* ``lstm``: token embedding (16), one ``nn.LSTM`` (32 hidden), linear head on the last output.

Each is trained from the same initial weights as the plain torch module (cross-entropy, point
weights) and as ``vbnn.convert(network, "mf")`` (the embedding and positions kept deterministic;
Adam on -ELBO / N, the family's default prior; one weight draw per sequence in training). Test
metrics: accuracy and NLL of the predictive (mf: the mean of 20 softmaxes in "weights" mode, one
draw per sequence each), and the predictive entropy on the test sequences with their tokens
permuted (the pattern destroyed: a shift the classifier should be less sure about). Step time:
the median of ``--timed`` training steps (forward, loss, backward, Adam) after 5 warm-up steps,
for plain, ``vbnn.convert(network, "point")`` and mf, and its ratio to plain, one run.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional

import vbnn

VOCABULARY, LENGTH, PATTERN = 6, 12, (1, 2, 3)


def make_data(count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens (count, LENGTH) and labels (count,): 1 where PATTERN occurs contiguously."""
    tokens = torch.randint(0, VOCABULARY, (count, LENGTH), generator=generator)
    planted = torch.rand(count, generator=generator) < 0.5
    starts = torch.randint(0, LENGTH - len(PATTERN) + 1, (count,), generator=generator)
    for row in torch.nonzero(planted).flatten().tolist():
        start = int(starts[row])
        tokens[row, start : start + len(PATTERN)] = torch.tensor(PATTERN)
    windows = tokens.unfold(1, len(PATTERN), 1)  # (count, positions, 3)
    labels = (windows == torch.tensor(PATTERN)).all(-1).any(-1).long()
    return tokens, labels


class TransformerClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCABULARY, 16)
        self.positions = nn.Parameter(0.1 * torch.randn(LENGTH, 16))
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens) + self.positions).mean(1))


class LSTMClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCABULARY, 16)
        self.rnn = nn.LSTM(16, 32, batch_first=True)
        self.head = nn.Linear(32, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.embed(tokens))[0][:, -1])


NETWORKS = {"transformer": TransformerClassifier, "lstm": LSTMClassifier}
KEEP = {"transformer": ["", "embed"], "lstm": ["embed"]}  # "": the positions


def loss_function(model: nn.Module, variational: bool, size: int):
    likelihood = vbnn.CategoricalLikelihood()

    def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if not variational:
            return functional.cross_entropy(model(x), y)
        terms = vbnn.elbo(model, likelihood, None, x, y, dataset_size=size)
        return -terms["objective"].sum() / size

    return loss


def train(model, variational, data, epochs, seed) -> None:
    x, y = data
    loss = loss_function(model, variational, len(y))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        for rows in torch.randperm(len(y), generator=generator).split(64):
            optimizer.zero_grad()
            loss(x[rows], y[rows]).backward()
            optimizer.step()


@torch.no_grad()
def predictive(model, variational, x, samples=20) -> torch.Tensor:
    model.eval()
    if not variational:
        return model(x).softmax(-1)
    with vbnn.mode(model, "weights"):
        return torch.stack([model(x).softmax(-1) for _ in range(samples)]).mean(0)


def metrics(model, variational, test, shuffled) -> dict[str, float]:
    x, y = test
    probabilities = predictive(model, variational, x)
    nll = -probabilities[torch.arange(len(y)), y].clamp_min(1e-12).log().mean()
    shifted = predictive(model, variational, shuffled)
    entropy = -(shifted * shifted.clamp_min(1e-12).log()).sum(-1).mean()
    return {"accuracy": float((probabilities.argmax(-1) == y).float().mean()),
            "nll": float(nll), "shuffled_entropy": float(entropy)}  # fmt: skip


def step_milliseconds(model, variational, data, timed) -> float:
    x, y = data
    loss = loss_function(model, variational, len(y))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    times = []
    for step in range(5 + timed):
        rows = slice((step * 64) % (len(y) - 64), (step * 64) % (len(y) - 64) + 64)
        start = time.perf_counter()
        optimizer.zero_grad()
        loss(x[rows], y[rows]).backward()
        optimizer.step()
        if step >= 5:
            times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny data and epochs")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--test", type=int, default=1000)
    parser.add_argument("--timed", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.epochs, args.train, args.test, args.timed = 1, 256, 128, 3
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(args.seed)
    train_data, test = make_data(args.train, generator), make_data(args.test, generator)
    order = torch.stack([torch.randperm(LENGTH, generator=generator) for _ in test[1]])
    shuffled = test[0].gather(1, order)
    results = []
    for name, network in NETWORKS.items():
        torch.manual_seed(args.seed)
        plain = network()
        models = {"plain": (plain, False),
                  "point": (vbnn.convert(plain, "point", keep=KEEP[name]), False),
                  "mf": (vbnn.convert(plain, "mf", keep=KEEP[name], draw="sequence"),
                         True)}  # fmt: skip
        base = None
        for variant, (model, variational) in models.items():
            timing = copy.deepcopy(model)
            milliseconds = step_milliseconds(timing, variational, train_data, args.timed)
            base = base or milliseconds
            row = {"network": name, "variant": variant, "step_ms": round(milliseconds, 2),
                   "ratio_to_plain": round(milliseconds / base, 2)}  # fmt: skip
            if variant != "point":  # point trains as plain does; timed only
                started = time.perf_counter()
                train(model, variational, train_data, args.epochs, args.seed)
                row["train_s"] = round(time.perf_counter() - started, 1)
                row.update({k: round(v, 4) for k, v in metrics(model, variational, test,
                                                                shuffled).items()})  # fmt: skip
            print(json.dumps(row), flush=True)
            results.append(row)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"arguments": vars(args) | {"out": str(args.out)},
                                        "rows": results}, indent=1) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
