"""Microseconds per call of the element-wise operators a family layer's step runs over its weights.

The layers choose between equivalent forms by these numbers (``vbnn.core.kernels``): ``exp2``
for ``exp``, the hardtanh backward for clamp's backward (``where`` over a boolean mask), and
``rsqrt`` for ``sqrt``. One tensor of ``--size`` float32 values (default 784 x 400, the first
layer of the benchmark MLP), ``--threads`` torch threads, the median of ``--repeats`` timings of
``--calls`` calls each, every operator writing into a preallocated output where torch allows it.

    python benchmarks/elementwise_ops.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch.nn import functional

from vbnn.core.kernels import clip


def microseconds(function: Callable[[], object], calls: int, repeats: int) -> float:
    for _ in range(5):
        function()
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        timings.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(timings)


def operators(size: int) -> dict[str, Callable[[], object]]:
    generator = torch.Generator().manual_seed(0)
    x = 5 * torch.randn(size, generator=generator)
    positive = x.abs() + 0.1
    grad = torch.randn(size, generator=generator)
    out = torch.empty_like(x)
    mask = x > 0
    leaf = x.clone().requires_grad_()
    return {
        "mul (reference pass)": lambda: torch.mul(x, positive, out=out),
        "exp": lambda: torch.exp(x, out=out),
        "exp2": lambda: torch.exp2(x, out=out),
        "log": lambda: torch.log(positive, out=out),
        "softplus": lambda: functional.softplus(x),
        "sigmoid": lambda: torch.sigmoid(x, out=out),
        "sqrt": lambda: torch.sqrt(positive, out=out),
        "rsqrt": lambda: torch.rsqrt(positive, out=out),
        "comparison x > 0": lambda: torch.gt(x, 0),
        "where(mask, x, out)": lambda: torch.where(mask, x, out),
        "masked_fill_(mask, 0)": lambda: out.masked_fill_(mask, 0.0),
        "hardtanh_backward": lambda: torch.ops.aten.hardtanh_backward(grad, x, -10.0, 20.0),
        "clamp forward + backward": lambda: leaf.clamp(-10.0, 20.0).backward(grad),
        "vbnn clip forward + backward": lambda: clip(leaf, -10.0, 20.0).backward(grad),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=784 * 400)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.size} float32 values, {args.threads} thread(s), torch {torch.__version__}, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}")  # fmt: skip
    print("| operator | us a call | vs mul |\n|---|---:|---:|")
    reference = None
    for name, function in operators(args.size).items():
        value = microseconds(function, args.calls, args.repeats)
        reference = reference or value
        print(f"| {name} | {value:.0f} | {value / reference:.1f}x |")


if __name__ == "__main__":
    main()
