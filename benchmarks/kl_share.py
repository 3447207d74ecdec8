"""What the KL costs in a converted mean-field model's training step, by ablation.

Three measurements, each in one process with the variants alternating (``--rounds`` rounds of
``--steps`` steps after ``--steps`` warm-up steps, one torch thread by default; median over rounds
of the milliseconds a step and of the ratio to plain measured in the same round):

* the benchmark MLP (784-400-400-10, batch 128, Adam, cross-entropy + KL / 60000, as
  ``converted_step.py``): plain, the floor, ``mf``, ``mf`` with its KL left out of the loss, and
  ``mf`` with ``torch.compile(vbnn.kl, fullgraph=True)``;
* the same on a 4-4-4-10 MLP with batch 2, where arithmetic costs nothing: what is left is
  Python and dispatch;
* the KL alone on the MLP's six parameter tensors (forward and backward, gradients set to None
  each time), eager against compiled.

    python benchmarks/kl_share.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from converted_step import make_step, network, two_products
from torch import nn

import vbnn
from vbnn.core.gaussian import kl_diagonal_gaussian_log_std


def alternate(steps: dict[str, Callable[[], None]], rounds: int, count: int) -> None:
    """Print the median ms a step of each variant and its median ratio to the first one."""
    for step in steps.values():
        for _ in range(count):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            began = time.perf_counter()
            for _ in range(count):
                step()
            times[name].append((time.perf_counter() - began) / count * 1e3)
    first = next(iter(times.values()))
    for name, values in times.items():
        ratio = statistics.median(a / b for a, b in zip(values, first, strict=True))
        print(f"  {name:24s} {statistics.median(values):7.3f} ms  {ratio:5.2f}x")


def model_steps(base: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict:
    compiled = torch.compile(vbnn.kl, fullgraph=True)
    return {
        "plain": make_step(base, lambda model: 0.0, x, y),
        "floor": make_step(two_products(base), lambda model: 0.0, x, y),
        "mf": make_step(vbnn.convert(base, "mf"), vbnn.kl, x, y),
        "mf, KL left out": make_step(vbnn.convert(base, "mf"), lambda model: 0.0, x, y),
        "mf, compiled KL": make_step(vbnn.convert(base, "mf"), compiled, x, y),
    }


def kl_alone(rounds: int, count: int) -> None:
    tensors = []
    for fan_in, fan_out in [(784, 400), (400, 400), (400, 10)]:
        for shape in [(1, fan_in, fan_out), (1, fan_out)]:
            tensors += [torch.randn(shape, requires_grad=True),
                        torch.full(shape, -9.2, requires_grad=True)]  # fmt: skip

    def eager() -> torch.Tensor:
        total = 0.0
        for index in range(0, 12, 4):
            total = total + kl_diagonal_gaussian_log_std(
                tensors[index], tensors[index + 1], 1.0, *tensors[index + 2 : index + 4]
            )
        return total

    compiled = torch.compile(eager, fullgraph=True)

    def step(kl: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            for tensor in tensors:
                tensor.grad = None
            (kl().sum() / 60000).backward()

        return run

    alternate({"eager KL": step(eager), "compiled KL": step(compiled)}, rounds, count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    mlp = network("mlp")
    x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))
    print("MLP 784-400-400-10, batch 128:")
    alternate(model_steps(mlp, x, y), args.rounds, args.steps)
    torch.manual_seed(0)
    tiny = nn.Sequential(nn.Flatten(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(),
                         nn.Linear(4, 10))  # fmt: skip
    x, y = torch.randn(2, 4), torch.randint(0, 10, (2,))
    print("MLP 4-4-4-10, batch 2 (dispatch only):")
    alternate(model_steps(tiny, x, y), args.rounds, 50)
    print("the KL alone, the MLP's six parameter tensors:")
    kl_alone(args.rounds, 50)


if __name__ == "__main__":
    main()
