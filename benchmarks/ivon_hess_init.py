"""IVON's initial Hessian h0 chosen on validation images: the CNN of ``examples/compare_cnn.py``.

``vbnn compare``'s CNN case (3,000 Fashion-MNIST training images, seeded as in the example),
trained by ``vbnn.IVON`` (alpha 0.1, the default when it ran; ``ivon_step_size.py`` then chose
0.3) on the first 2,700 and scored on the other 300, never on test images:
validation NLL and accuracy of the predictive probabilities averaged over 16 weight draws, and
the median posterior std after training, per (h0, epochs, seed). With beta2 = 0.99999 the
Hessian estimate barely moves in a few hundred steps, so every std stays near
sigma_0 = 1 / sqrt(N (h0 + delta)): h0 sets the posterior's width for the whole of a short run.

    VBNN_DATA_DIR=../shared/data OMP_NUM_THREADS=1 python benchmarks/ivon_hess_init.py \\
        --out benchmarks/results/ivon_hess_init.jsonl

One JSON line per run is appended to ``--out`` (a re-run skips the runs already there).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import torch

import vbnn
from vbnn.data.mnist import load_images
from vbnn.layers.shell import VariationalLayer

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "compare_cnn.py"
FIT, VALIDATION = 2700, 300
DRAWS = 16


def example():
    """``examples/compare_cnn.py`` as a module (its ``small_cnn`` and ``subset``)."""
    spec = importlib.util.spec_from_file_location("compare_cnn", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def draws(network: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The predictive probabilities of ``DRAWS`` weight draws, (DRAWS, rows, classes)."""
    network.eval()
    with torch.no_grad(), vbnn.mode(network, "weights"):
        return torch.stack([network(x).softmax(-1) for _ in range(DRAWS)])


def score(network: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Validation NLL and accuracy of the mean of ``DRAWS`` weight draws' probabilities."""
    probabilities = draws(network, x).mean(0)
    nll = -probabilities[torch.arange(len(y)), y].clamp_min(1e-12).log().mean().item()
    return nll, (probabilities.argmax(-1) == y).float().mean().item()


def median_std(network: torch.nn.Module) -> float:
    """The median posterior std over every Gaussian weight and bias of ``network``."""
    layers = [m for m in network.modules() if isinstance(m, VariationalLayer)]
    stds = torch.cat([t.std().detach().flatten() for layer in layers
                      for t in layer.gaussian_weights()])  # fmt: skip
    return float(np.median(stds.numpy()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("ivon_hess_init.jsonl"))
    parser.add_argument("--hess-inits", type=float, nargs="+", default=[0.1, 0.3, 1.0, 3.0])
    parser.add_argument("--epochs", type=int, nargs="+", default=[5, 20])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    module = example()
    x, y = module.subset(*load_images("fashion-mnist", "train"), FIT + VALIDATION, 0)
    done = set()
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # a torn last line of a killed run
                continue
            done.add((row["hess_init"], row["epochs"], row["seed"]))
    for epochs in args.epochs:
        for hess_init in args.hess_inits:
            for seed in args.seeds:
                if (hess_init, epochs, seed) in done:
                    continue
                torch.manual_seed(seed)
                network = vbnn.convert(module.small_cnn(), "mf")
                vbnn.train(network, (x[:FIT], y[:FIT]), epochs=epochs, seed=seed,
                           optimizer=vbnn.IVON(learning_rate=0.1, hess_init=hess_init,
                                               clip_radius=math.inf),
                           progress=False)  # fmt: skip
                nll, accuracy = score(network, x[FIT:], y[FIT:])
                row = {"hess_init": hess_init, "epochs": epochs, "seed": seed,
                       "validation_nll": nll, "accuracy": accuracy,
                       "median_std": median_std(network)}  # fmt: skip
                with args.out.open("a") as handle:  # one whole line a run
                    handle.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
