"""Milliseconds per minibatch training step of one converted model, every family against plain
PyTorch and bayesian-torch, on an MLP, two small CNNs and a transposed-convolution decoder.

    pip install --no-deps bayesian-torch==0.5.0      # benchmark only; torch stays at 2.13.0
    python benchmarks/converted_step.py --rounds 5 --steps 20 \
        --out benchmarks/results/converted_step.json

A step is what a user's loop does: ``zero_grad``, forward of a batch of 128 MNIST-shaped inputs,
cross-entropy + KL / 60000, backward, ``Adam.step``. Networks:

* ``mlp``: 784-400-400-10, ReLU;
* ``lenet``: LeNet-5 (conv 20@5x5, max-pool, conv 50@5x5, max-pool, dense 800-500-10), ReLU;
* ``resblock``: a stem conv 16@3x3 with BatchNorm, one residual block (two conv 16@3x3, each with
  BatchNorm), average pooling to 7x7 and a dense 784-10 layer;
* ``decoder``: average pooling to 1x7x7, then only transposed convolutions, 32@4x4 stride 2
  (14x14), 16@4x4 stride 2 (28x28), 10@3x3, ReLU between them, and an average over the image
  (the logits): the upsampling path of a convolutional decoder;
* ``row-lstm`` and ``row-transformer``: an image read as a sequence of its 28 rows of 28 pixels,
  by an LSTM of 128 units (a dense 128-10 on its last state), or by one transformer encoder layer
  (a dense 28-64 row embedding plus fixed sinusoidal positions, 4 heads, feed-forward 128, mean
  over rows, dense 64-10): the recurrent and attention layers.

Variants: ``plain`` (the ``nn.Module`` itself), ``floor: two products + noise`` (every weight
layer computed twice and joined with one normal draw per output: what the local reparameterization
trick cannot avoid, see ``TwoProducts``), every family of ``vbnn.FAMILIES`` that can convert
the network (``vbnn.convert(network, family)``; BatchNorm stays deterministic), ``mf, weight
samples`` (mf trained with one weight draw a step, bayesian-torch's estimator, see
``WeightSamples``), ``mf, compiled KL`` (mf with ``torch.compile(vbnn.kl, fullgraph=True)``, the
recipe of docs/families.md; it compiles in the first warm-up step), and
bayesian-torch's ``dnn_to_bnn`` with ``Reparameterization`` and ``Flipout`` layers (when it is
installed). Every variant first takes ``--warmup`` steps; then, in each of ``--rounds`` rounds,
the variants take ``--steps`` steps each in turn, so that a change of the machine's load reaches
every variant alike. Reported: the median over rounds of the milliseconds a step, and the median
over rounds of the ratio to ``plain`` measured in the same round. Inputs are random (speed does
not depend on the pixel values). ``--fused-adam`` gives every variant ``Adam(fused=True)``;
``--device cuda`` times with ``torch.cuda.synchronize`` and counts the kernels of a step.
``mf, ivon`` is mf trained by ``vbnn.IVON`` (no KL term: the prior is its weight decay) and
``mf weights, ivon`` the same with one weight draw a minibatch on every layer (``training_mode=
"weights"``, no second product on the dense layers);
``ivon-opt (plain network)``, with ivon-opt installed, is the plain network trained by ivon-opt's
IVON, which samples the weights into it around each forward and backward pass.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional
from torch.profiler import ProfilerActivity, profile, record_function

import vbnn

DATASET_SIZE = 60000
CLASSES = 10


class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.first = nn.Conv2d(channels, channels, 3, padding=1)
        self.first_norm = nn.BatchNorm2d(channels)
        self.second = nn.Conv2d(channels, channels, 3, padding=1)
        self.second_norm = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.first_norm(self.first(x)))
        return torch.relu(x + self.second_norm(self.second(out)))


class RowLSTM(nn.Module):
    """An image (N, 1, 28, 28) as 28 time steps of 28 pixels: LSTM(28, 128), dense 128-10."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(28, 128, batch_first=True)
        self.head = nn.Linear(128, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(x.flatten(1, 2))[0][:, -1])


class RowTransformer(nn.Module):
    """An image (N, 1, 28, 28) as 28 tokens (its rows): a dense 28-64 embedding plus fixed
    sinusoidal positions (Vaswani et al. 2017), one encoder layer (4 heads, feed-forward 128, no
    dropout), the mean over tokens, dense 64-10."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.embed = nn.Linear(28, width)
        position = torch.arange(28.0)[:, None] / 10_000 ** (torch.arange(0, width, 2) / width)
        self.register_buffer("position", torch.cat([position.sin(), position.cos()], 1))
        self.encoder = nn.TransformerEncoderLayer(width, 4, 128, dropout=0.0, batch_first=True)
        self.head = nn.Linear(width, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x.flatten(1, 2)) + self.position).mean(1))


class TwoProducts(nn.Module):
    """A weight layer computed twice and joined with fresh noise, ``layer(x) + twin(x) * eps``:
    the two products (mean and variance) a local-reparameterization step does per layer, one
    standard normal per output, one multiply-add, and twice the parameters for Adam; none of a
    family's own element-wise work. The floor of the families that use the LRT."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer
        self.twin = copy.deepcopy(layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = self.layer(x)
        return torch.addcmul(mean, self.twin(x), torch.randn_like(mean))


class WeightSamples(nn.Module):
    """A converted network trained with one weight draw per step shared by the batch
    (``ForwardMode.WEIGHTS``), the estimator bayesian-torch's Reparameterization layers use,
    instead of the local reparameterization trick's draw per example and output."""

    def __init__(self, network: nn.Module) -> None:
        super().__init__()
        self.network = network

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with vbnn.mode(self.network, vbnn.ForwardMode.WEIGHTS):
            return self.network(x)


def two_products(base: nn.Module) -> nn.Module:
    model = copy.deepcopy(base)
    for parent in list(model.modules()):
        for child_name, child in parent.named_children():
            if isinstance(child, nn.Linear | nn.Conv2d | nn.ConvTranspose2d):
                setattr(parent, child_name, TwoProducts(child))
    return model


def network(name: str) -> nn.Module:
    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(), nn.Linear(784, 400), nn.ReLU(), nn.Linear(400, 400), nn.ReLU(),
            nn.Linear(400, CLASSES),
        )  # fmt: skip
    if name == "lenet":
        return nn.Sequential(
            nn.Conv2d(1, 20, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5), nn.ReLU(),
            nn.MaxPool2d(2), nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, CLASSES),
        )  # fmt: skip
    if name == "resblock":
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), ResidualBlock(16),
            nn.AvgPool2d(4), nn.Flatten(), nn.Linear(16 * 7 * 7, CLASSES),
        )  # fmt: skip
    if name == "decoder":
        return nn.Sequential(
            nn.AvgPool2d(4), nn.ConvTranspose2d(1, 32, 4, stride=2, padding=1), nn.ReLU(),
            nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1), nn.ReLU(),
            nn.ConvTranspose2d(16, CLASSES, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )  # fmt: skip
    if name == "row-lstm":
        return RowLSTM()
    if name == "row-transformer":
        return RowTransformer()
    raise ValueError(
        f"unknown network {name!r}; choose mlp, lenet, resblock, decoder, row-lstm or "
        f"row-transformer"
    )


def bayesian_torch_model(base: nn.Module, kind: str) -> tuple[nn.Module, Callable] | None:
    """bayesian-torch's conversion of ``base`` with ``kind`` layers and its KL, or None."""
    try:
        from bayesian_torch.models.dnn_to_bnn import dnn_to_bnn, get_kl_loss
    except ImportError:
        return None
    model = copy.deepcopy(base)
    prior = {"prior_mu": 0.0, "prior_sigma": 1.0, "posterior_mu_init": 0.0,
             "posterior_rho_init": -3.0, "type": kind, "moped_enable": False}  # fmt: skip
    dnn_to_bnn(model, prior)
    return model, get_kl_loss


def variants(name: str) -> dict[str, tuple[nn.Module, Callable[[nn.Module], torch.Tensor]]]:
    """Every model to time on network ``name``: (model, KL function)."""
    torch.manual_seed(0)
    base = network(name)
    out: dict[str, tuple[nn.Module, Callable]] = {"plain": (base, lambda model: 0.0)}
    out["floor: two products + noise"] = (two_products(base), lambda model: 0.0)
    for family in vbnn.FAMILIES:
        try:
            model = vbnn.convert(base, family)
        # a dense-only family on a CNN; a full covariance over 314,000 weights (784 x 400) needs
        # its D x D factor: 394 GB
        except (ValueError, RuntimeError) as error:
            print(f"  {name}: {family} skipped ({str(error)[:80]})")
            continue
        try:
            vbnn.kl(model)
            kl: Callable = vbnn.kl
        except ValueError:  # a family without a KL term (point weights, binary dropout)
            kl = lambda model: 0.0  # noqa: E731
        out[family] = (model, kl)
        if family == "mf":
            out["mf, weight samples"] = (WeightSamples(vbnn.convert(base, family)), vbnn.kl)
            # docs/families.md's recipe; compiled at the first warm-up step
            compiled = torch.compile(vbnn.kl, fullgraph=True)
            out["mf, compiled KL"] = (vbnn.convert(base, family), compiled)
            out["mf, ivon"] = (vbnn.convert(base, family), NATURAL_GRADIENT)
            out["mf, ivon, no bound"] = (vbnn.convert(base, family), UNBOUNDED)
            # one weight draw a minibatch on every layer: no second product on the dense layers
            weights = vbnn.convert(base, family, training_mode="weights")
            out["mf weights, ivon"] = (weights, NATURAL_GRADIENT)
    try:
        import ivon  # noqa: F401  (the peer arm: ivon-opt on the plain network)

        out["ivon-opt (plain network)"] = (copy.deepcopy(base), IVON_OPT)
    except ImportError:
        print(f"  {name}: ivon-opt not installed, its arm skipped")
    for kind in ("Reparameterization", "Flipout"):
        converted = bayesian_torch_model(base, kind)
        if converted is not None:
            out[f"bayesian-torch {kind}"] = converted
    return out


# in place of a KL function: the variant trains by vbnn's IVON (at its defaults, or without the
# bound on the step), or by ivon-opt's on the plain net
NATURAL_GRADIENT, UNBOUNDED, IVON_OPT = "natural gradient", "natural gradient, no bound", "ivon-opt"
IVON_SETTINGS = {NATURAL_GRADIENT: vbnn.IVON(), UNBOUNDED: vbnn.IVON(clip_radius=math.inf)}


def make_step(
    model: nn.Module, kl: Callable | str, x: torch.Tensor, y: torch.Tensor, fused: bool = False
) -> Callable:
    model.train()
    if kl in IVON_SETTINGS:  # the objective's KL is IVON's weight decay: no KL term
        optimizer = IVON_SETTINGS[kl].build(model, nn.Module(), learning_rate=1e-3, rates={},
                                            prior=None, dataset_size=DATASET_SIZE)  # fmt: skip
        return make_step_without_kl(model, optimizer, x, y)
    if kl == IVON_OPT:
        import ivon

        sampler = ivon.IVON(model.parameters(), lr=0.1, ess=DATASET_SIZE, hess_init=0.1)

        def ivon_step() -> None:
            with sampler.sampled_params(train=True):
                sampler.zero_grad(set_to_none=True)
                functional.cross_entropy(model(x), y).backward()
            sampler.step()

        return ivon_step
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=fused or None)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with record_function("forward"):
            data_term = functional.cross_entropy(model(x), y)
        with record_function("kl"):
            loss = data_term + kl(model) / DATASET_SIZE
        with record_function("backward"):
            loss.backward()
        with record_function("adam"):
            optimizer.step()

    return step


def make_step_without_kl(
    model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> Callable:
    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with record_function("forward"):
            loss = functional.cross_entropy(model(x), y)
        with record_function("backward"):
            loss.backward()
        with record_function("adam"):
            optimizer.step()

    return step


PHASES = ("forward", "kl", "backward", "adam")
PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::mkldnn_convolution",
            "aten::convolution_backward", "aten::_convolution")  # fmt: skip
DRAWS = ("aten::normal_",)


def where_the_step_goes(step: Callable[[], None], steps: int) -> dict[str, float]:
    """Milliseconds a step in each phase (``PHASES``) and, across phases, in the products
    (matrix products and convolutions, forward and backward), in normal draws, and in all other
    operators (element-wise passes, reductions, copies), from torch's profiler over ``steps``
    steps (CPU time of this process; the profiler adds a little to every operator)."""
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(steps):
            step()
    totals = {phase: 0.0 for phase in PHASES}
    kinds = {"products": 0.0, "normal draws": 0.0, "other operators": 0.0}
    for event in profiler.key_averages():
        if event.key in totals:
            totals[event.key] += event.cpu_time_total
        elif event.key.startswith("aten::"):
            kind = "products" if event.key in PRODUCTS else "other operators"
            kind = "normal draws" if event.key in DRAWS else kind
            kinds[kind] += event.self_cpu_time_total
    return {name: value / steps / 1e3 for name, value in {**totals, **kinds}.items()}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(step: Callable[[], None], steps: int, device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return (time.perf_counter() - start) / steps * 1e3


def kernels_per_step(step: Callable[[], None]) -> int:
    """CUDA kernels (and memory operations) one step launches, counted by the profiler."""
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        step()
        torch.cuda.synchronize()
    return sum(1 for event in profiler.events() if event.device_type.name == "CUDA")


def benchmark(name: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    device = torch.device(args.device)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, 1, 28, 28, generator=generator).to(device)
    y = torch.randint(0, CLASSES, (args.batch,), generator=generator).to(device)
    chosen = variants(name)
    if args.variants is not None:
        unknown = set(args.variants) - set(chosen)
        if unknown:
            raise SystemExit(f"--variants: {sorted(unknown)} not among {sorted(chosen)}")
        chosen = {k: v for k, v in chosen.items() if k == "plain" or k in args.variants}
    steps = {
        label: make_step(model.to(device), kl, x, y, args.fused_adam)
        for label, (model, kl) in chosen.items()
    }
    for step in steps.values():
        time_steps(step, args.warmup, device)
    times: dict[str, list[float]] = {label: [] for label in steps}
    for _ in range(args.rounds):
        for label, step in steps.items():
            times[label].append(time_steps(step, args.steps, device))
    results = {
        label: {
            "ms_per_step": statistics.median(values),
            "ratio_to_plain": statistics.median(
                v / p for v, p in zip(values, times["plain"], strict=True)
            ),
        }
        for label, values in times.items()
    }
    if device.type == "cuda":
        for label, step in steps.items():
            results[label]["kernels_per_step"] = kernels_per_step(step)
    if args.profile:
        for label, step in steps.items():
            results[label]["profile_ms"] = where_the_step_goes(step, args.steps)
    return results


def print_profile(results: dict[str, dict]) -> None:
    """The profile of every variant as a markdown table, ms a step (``where_the_step_goes``)."""
    columns = [*PHASES, "products", "normal draws", "other operators"]
    print("\n| model (ms a step, profiled) | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for label, row in results.items():
        cells = " | ".join(f"{row['profile_ms'][column]:.2f}" for column in columns)
        print(f"| {label} | {cells} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--networks", nargs="+", default=["mlp", "lenet", "resblock"])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="where each step's time goes")
    parser.add_argument("--fused-adam", action="store_true", help="Adam(fused=True) for all")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (timed with synchronize)")
    parser.add_argument(
        "--variants", nargs="+", default=None, help="labels to time (plain always; default all)"
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON of the results")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {}
    for name in args.networks:
        results[name] = benchmark(name, args)
        adam = "fused Adam" if args.fused_adam else "Adam"
        print(f"\n{name}, batch {args.batch}, {args.device}, {args.threads} threads, {adam}")
        print("| model | ms a step | vs plain | kernels a step |\n|---|---:|---:|---:|")
        for label, row in results[name].items():
            kernels = row.get("kernels_per_step", "")
            print(
                f"| {label} | {row['ms_per_step']:.2f} | {row['ratio_to_plain']:.2f}x | {kernels} |"
            )
        if args.profile:
            print_profile(results[name])
    if args.out is not None:
        gpu = torch.cuda.get_device_name() if args.device == "cuda" else None
        settings = {**vars(args), "out": str(args.out), "torch": torch.__version__,
                    "machine": platform.machine(), "gpu": gpu}  # fmt: skip
        args.out.write_text(json.dumps({"settings": settings, "results": results}, indent=1))


if __name__ == "__main__":
    main()
