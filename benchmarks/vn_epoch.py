"""Seconds per MNIST epoch of the two long variance-network runs, against their floating-point
floor.

Networks (LeNet-5-Caffe, batch 100, the papers' text protocol): Table 2's variance network (LRT in
all four layers, ``vd-layer``) and Table 1's layer-wise network (LRT in dense1 only, softplus).

Floor. Forward and backward of a layer cost, per example, with F the multiply-adds of its forward
product (conv: O H' W' C k k; dense: I O):

* deterministic layer: F forward, F for the weight gradient, F for the input gradient;
* LRT layer (appendix E of Neklyudov et al. 2019): twice that, as the mean A * mu and the variance
A^2 * sigma^2
  are two products, each with its two gradients;
* conv1 has no input gradient (its input is the data).

The floor of an epoch is 2 x (multiply-adds) x 60000 at the rate that plain ``conv2d`` / matmul
calls of the same shapes reach, forward and backward, in this process (the better of the
contiguous and channels-last layouts); everything else a step does (noise draws, the
element-wise LRT algebra, pooling, activations, the KL, Adam) is overhead above it.

Before / after: ``--baseline REV`` times the same steps with the package as it was at git
revision REV (extracted to a temporary folder, run in a subprocess with the same thread count),
alternating with the working tree, and keeps the best of ``--rounds`` for each.

    OMP_NUM_THREADS=2 python benchmarks/vn_epoch.py --baseline 4ba31d0 \\
        --out benchmarks/results/vn_epoch.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

import torch
from torch.nn import functional

ROOT = Path(__file__).resolve().parents[1]
BATCH = 100
EPOCH = 60000
# (name, kind, in, out, input height/width, kernel)
LAYERS = [("conv1", "conv", 1, 20, 28, 5), ("conv2", "conv", 20, 50, 12, 5),
          ("dense1", "dense", 800, 500, 0, 0), ("dense2", "dense", 500, 10, 0, 0)]  # fmt: skip
NETWORKS = {
    "variance (4 x LRT)": ("table2-variance", ("vd-layer",) * 4, "relu"),
    "dense1 only (Table 1)": (
        "table1-layer",
        ("point", "point", "vd-layer", "point"),
        "softplus",
    ),
}


def multiply_adds(kind, inputs, outputs, size, kernel) -> int:
    if kind == "dense":
        return inputs * outputs
    side = size - kernel + 1
    return outputs * side * side * inputs * kernel * kernel


def network_flops(families) -> int:
    """Floating-point operations of one example, forward and backward (module docstring)."""
    total = 0
    for index, ((_, kind, i, o, size, k), family) in enumerate(zip(LAYERS, families, strict=True)):
        products = 2 if family != "point" else 1  # LRT: mean and variance
        passes = 2 if index == 0 else 3  # forward, weight gradient (, input gradient)
        total += 2 * multiply_adds(kind, i, o, size, k) * products * passes
    return total


def best_time(function, repeats: int = 15) -> float:
    for _ in range(3):
        function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def plain_layer_seconds(index: int) -> float:
    """Best time of one plain forward + backward of layer ``index`` at batch 100."""
    _, kind, i, o, size, k = LAYERS[index]
    weight = torch.randn(o, i, k, k) if kind == "conv" else torch.randn(i, o)
    weight.requires_grad_(True)
    best = float("inf")
    layouts = (torch.contiguous_format, torch.channels_last) if kind == "conv" else (None,)
    for layout in layouts:
        shape = (BATCH, i, size, size) if kind == "conv" else (BATCH, i)
        x = torch.randn(shape)
        x = x.contiguous(memory_format=layout) if layout else x
        x.requires_grad_(index > 0)
        forward = (
            (lambda x=x: functional.conv2d(x, weight))
            if kind == "conv"
            else (lambda x=x: x @ weight)
        )
        grad = torch.randn_like(forward())

        def step(forward=forward, grad=grad) -> None:
            forward().backward(grad)

        best = min(best, best_time(step))
    return best


def floor(families) -> dict:
    seconds = 0.0
    for index, family in enumerate(families):
        seconds += plain_layer_seconds(index) * (2 if family != "point" else 1)
    flops = network_flops(families) * BATCH
    return {"gflop_per_step": flops / 1e9, "plain_seconds_per_step": seconds,
            "achievable_gflops": flops / seconds / 1e9,
            "floor_seconds_per_epoch": seconds * EPOCH / BATCH}  # fmt: skip


def measure(steps: int) -> dict[str, float]:
    """Seconds per training step of each network with the package on sys.path (after warm-up)."""
    from vbnn.classification.training import ClassifierConfig, train_classifier
    from vbnn.core.randomness import ModelGenerators
    from vbnn.networks.lenet import LeNet5, LeNetConfig
    from vbnn.priors.log_uniform import LogUniformPrior

    generator = torch.Generator().manual_seed(0)
    images = torch.rand(steps * BATCH, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (steps * BATCH,), generator=generator)
    out = {}
    for label, (_, families, activation) in NETWORKS.items():
        config = LeNetConfig(families=families, activation=activation)
        model = LeNet5(config, ModelGenerators([0]))
        prior, settings = LogUniformPrior(), ClassifierConfig(epochs=1, batch_size=BATCH)
        train_classifier(model, prior, images[: 5 * BATCH], labels[: 5 * BATCH], settings,
                         progress=False)  # fmt: skip
        seconds = train_classifier(model, prior, images, labels, settings, progress=False)[0]
        out[label] = seconds / steps
    return out


def measure_revision(revision: str, steps: int) -> dict[str, float]:
    """``measure`` with the package's source as of git ``revision``, in a subprocess."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "src"],
                             check=True, capture_output=True).stdout  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        env = {**os.environ, "PYTHONPATH": str(Path(folder) / "src")}
        command = [sys.executable, __file__, "--measure-only", "--steps", str(steps)]
        text = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(text.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=None, help="git revision of the 'before' code")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=None)
    parser.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_only:
        print(json.dumps(measure(args.steps)))
        return
    load_before = os.getloadavg()
    before: dict[str, float] = {}
    after: dict[str, float] = {}
    for _ in range(args.rounds):
        if args.baseline:
            for key, value in measure_revision(args.baseline, args.steps).items():
                before[key] = min(value, before.get(key, float("inf")))
        for key, value in measure(args.steps).items():
            after[key] = min(value, after.get(key, float("inf")))
    result = {"threads": torch.get_num_threads(), "torch": torch.__version__,
              "baseline": args.baseline, "steps": args.steps, "rounds": args.rounds,
              "load_average_start": load_before, "load_average_end": os.getloadavg(),
              "networks": {}}  # fmt: skip
    steps_per_epoch = EPOCH // BATCH
    for label, (name, families, _) in NETWORKS.items():
        row = {"network": name, **floor(families)}
        row["after_seconds_per_epoch"] = after[label] * steps_per_epoch
        row["after_over_floor"] = row["after_seconds_per_epoch"] / row["floor_seconds_per_epoch"]
        if label in before:
            row["before_seconds_per_epoch"] = before[label] * steps_per_epoch
            row["before_over_floor"] = (
                row["before_seconds_per_epoch"] / row["floor_seconds_per_epoch"]
            )
            row["speed_up"] = before[label] / after[label]
        result["networks"][label] = row
        print(label, json.dumps(row, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
