"""Wall-clock speed of vbnn's batched MF training against a per-split bayesian-torch loop.

For each UCI set (boston and power by default) and its first ``--splits`` standard splits, one run
measures:

* vbnn: ``vbnn.regression.engine.run_splits`` with ``method_config("mf")``: the splits are
  stacked on
  the model dimension and trained in chunks (``--vbnn-chunks`` sweeps the chunk size; ``auto`` is
  the engine's own choice), then evaluated with 100 predictive samples.
* bayesian-torch 0.5.0: a 1-hidden-layer MLP (I -> 50 tanh -> 1) of
  ``bayesian_torch.layers.LinearReparameterization`` layers, trained split after split with the
  same protocol: full-batch Adam(lr=0.005, betas=(0.9, 0.99)), one Monte-Carlo sample a step,
  loss = -(sum of the Gaussian log-likelihood with a learned noise std) + KL, divided by the
  number of training rows; prior N(0, 1); posterior std initialised at softplus(rho) = 1e-4;
  inputs and target standardised with the split's training statistics; test log-likelihood
  log mean_k N(y | f_k(x), sigma^2) over 100 predictive samples, in the target's original units.

Both timings cover everything from the raw data set to the test metrics (standardisation, model
construction, training, evaluation) and run in the same process, after ``keep_freed_memory`` and
an untimed warm-up of ``--warmup`` iterations on split 0.

bayesian-torch details that matter here (read from its 0.5.0 source):

* ``forward(x, return_kl=True)`` returns ``(output, kl)`` where ``kl`` is the *mean* of the
  elementwise KL over the weight tensor plus the mean over the bias vector, not the KL of the
  layer. ``--bt-kl sum`` (default) sums the library's own elementwise KL over every weight and
  bias (the true KL, as vbnn's ELBO); ``--bt-kl mean`` uses the returned value as is.
* One weight sample per forward pass, shared by all rows (no local reparameterization).
* Posterior means start as N(posterior_mu_init, 0.1^2) for weights and biases, rho as
  N(posterior_rho_init, 0.1^2); the 0.1 is fixed in the library. vbnn starts from LeCun-normal
  weight means and zero biases.
* ``prior_variance`` is used as the prior's standard deviation (the same for 1).

Install bayesian-torch for this benchmark only, without touching torch (its declared
dependencies torchvision and tensorboard are not needed by the layers)::

    pip install --no-deps bayesian-torch==0.5.0

Full measurement (both implementations use the same torch threads; run it on an otherwise idle
machine: with the CPU shared, torch's OpenMP threads slow down by an order of magnitude or more,
and ``--threads 1`` is the only stable setting)::

    VBNN_DATA_DIR=../shared/data python benchmarks/uci_speed.py --vbnn-chunks auto,1,5,20
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vbnn.core.runtime import keep_freed_memory
from vbnn.data import RegressionDataset, load_uci
from vbnn.data.splits import group_by_size, stack_splits
from vbnn.metrics import gaussian_mixture_log_likelihood
from vbnn.regression.engine import choose_chunk_size, run_splits
from vbnn.regression.runs import TrainConfig, VIConfig

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "uci_speed.json"
HIDDEN = 50
TEST_SAMPLES = 100
LEARNING_RATE = 0.005
BETAS = (0.9, 0.99)
PRIOR_VARIANCE = 1.0
INIT_STD = 1e-4
NOISE_STD_INIT = 1.0
BT_NAME = "bayesian-torch"


@dataclass
class Row:
    """One measured (data set, implementation, chunk size) combination.

    Attributes:
        dataset: UCI short name.
        implementation: "vbnn" or "bayesian-torch".
        chunk: chunk label ("auto=20", "5", or "-" for the per-split loop).
        seconds: wall clock of the whole run over all splits.
        iterations: training steps per split.
        split_ids: the splits measured.
        test_log_likelihood: per split, original units.
        test_rmse: per split, original units.
        ratio: bayesian-torch seconds / these seconds (None without a bayesian-torch row).
    """

    dataset: str
    implementation: str
    chunk: str
    seconds: float
    iterations: int
    split_ids: list[int]
    test_log_likelihood: list[float]
    test_rmse: list[float]
    ratio: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ms_per_iteration(self) -> float:
        """Milliseconds per training step for all splits together."""
        return 1000.0 * self.seconds / self.iterations

    @property
    def ll_mean(self) -> float:
        return statistics.fmean(self.test_log_likelihood)

    @property
    def ll_sem(self) -> float:
        """Standard error of the mean over splits (NaN for a single split)."""
        values = self.test_log_likelihood
        if len(values) < 2:
            return math.nan
        return statistics.stdev(values) / math.sqrt(len(values))

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["ms_per_iteration"] = self.ms_per_iteration
        out["test_log_likelihood_mean"] = self.ll_mean
        out["test_log_likelihood_sem"] = None if math.isnan(self.ll_sem) else self.ll_sem
        out["test_rmse_mean"] = statistics.fmean(self.test_rmse)
        return out


# ----------------------------------------------------------------------------------------- vbnn


def vbnn_config(
    iterations: int, chunk_size: int | None, seed: int, compile: bool = False
) -> TrainConfig:
    """The MF configuration of the benchmark (the paper's defaults otherwise)."""
    return VIConfig(
        family="mf",
        hidden=(HIDDEN,),
        iterations=iterations,
        learning_rate=LEARNING_RATE,
        betas=BETAS,
        prior_std=math.sqrt(PRIOR_VARIANCE),
        posterior_std=INIT_STD,
        noise_std_init=NOISE_STD_INIT,
        test_samples=TEST_SAMPLES,
        seed=seed,
        compile=compile,
        chunk_size=chunk_size,
    )


def resolved_chunk(
    dataset: RegressionDataset, split_ids: Sequence[int], config: TrainConfig
) -> int:
    """The chunk size ``run_splits`` uses for the (largest) group of equal-sized splits."""
    group = max(group_by_size(dataset, split_ids), key=len)
    train_rows = len(dataset.split(group[0])[0])
    return choose_chunk_size(config, train_rows, dataset.inputs.shape[1], len(group))


def measure_vbnn(
    dataset: RegressionDataset, split_ids: list[int], config: TrainConfig, label: str
) -> Row:
    """Time ``run_splits`` over all splits, from raw data to test metrics."""
    start = time.perf_counter()
    result = run_splits(dataset, split_ids, config)
    seconds = time.perf_counter() - start
    return Row(
        dataset=dataset.name,
        implementation="vbnn",
        chunk=label,
        seconds=seconds,
        iterations=config.iterations,
        split_ids=[s.split for s in result.splits],
        test_log_likelihood=[s.test_log_likelihood for s in result.splits],
        test_rmse=[s.test_rmse for s in result.splits],
    )


# ------------------------------------------------------------------------------- bayesian-torch


def import_linear_reparameterization() -> type[nn.Module]:
    """bayesian_torch.layers.LinearReparameterization, with an install hint if it is missing."""
    try:
        from bayesian_torch.layers import LinearReparameterization
    except ImportError as error:
        raise SystemExit(
            f"bayesian-torch is not importable ({error}); install it with "
            "'pip install --no-deps bayesian-torch==0.5.0' or pass --skip-bayesian-torch"
        ) from None
    return LinearReparameterization


def summed_kl(layer: nn.Module) -> torch.Tensor:
    """KL(q || prior) of a LinearReparameterization layer, summed over every weight and bias.

    Uses the layer's own ``kl_div`` and softplus; ``kl_div`` averages over the elements, so each
    tensor's value is multiplied back by its size.
    """
    total = torch.zeros(())
    pairs = [("weight", layer.mu_weight, layer.rho_weight)]
    if layer.mu_bias is not None:
        pairs.append(("bias", layer.mu_bias, layer.rho_bias))
    for name, mu, rho in pairs:
        sigma = torch.log1p(torch.exp(rho))
        prior_mu = getattr(layer, f"prior_{name}_mu")
        prior_sigma = getattr(layer, f"prior_{name}_sigma")
        total = total + layer.kl_div(mu, sigma, prior_mu, prior_sigma) * mu.numel()
    return total


class BayesianTorchMLP(nn.Module):
    """I -> 50 tanh -> 1 of LinearReparameterization layers, with a learned log noise std.

    Args:
        layer_class: ``bayesian_torch.layers.LinearReparameterization``.
        in_features: input width I.
        kl_mode: "sum" for the true KL, "mean" for the value the layers return.
    """

    def __init__(self, layer_class: type[nn.Module], in_features: int, kl_mode: str) -> None:
        super().__init__()
        options = {
            "prior_mean": 0.0,
            "prior_variance": PRIOR_VARIANCE,
            "posterior_mu_init": 0.0,
            "posterior_rho_init": math.log(math.expm1(INIT_STD)),
        }
        self.hidden = layer_class(in_features, HIDDEN, **options)
        self.output = layer_class(HIDDEN, 1, **options)
        self.log_noise_std = nn.Parameter(torch.tensor(math.log(NOISE_STD_INIT)))
        self.kl_mode = kl_mode

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One weight sample: x (N, I) -> (prediction (N,), KL scalar)."""
        if self.kl_mode == "mean":
            h, kl_hidden = self.hidden(x)
            out, kl_output = self.output(torch.tanh(h))
            return out.squeeze(-1), kl_hidden + kl_output
        h = self.hidden(x, return_kl=False)
        out = self.output(torch.tanh(h), return_kl=False)
        return out.squeeze(-1), summed_kl(self.hidden) + summed_kl(self.output)

    @torch.no_grad()
    def sample_predictions(self, x: torch.Tensor, samples: int) -> torch.Tensor:
        """(samples, N) outputs, a fresh weight sample each."""
        return torch.stack(
            [
                self.output(torch.tanh(self.hidden(x, return_kl=False)), return_kl=False).squeeze(
                    -1
                )
                for _ in range(samples)
            ]
        )


def gaussian_log_likelihood(
    prediction: torch.Tensor, target: torch.Tensor, log_std: torch.Tensor
) -> torch.Tensor:
    """Sum over rows of log N(target | prediction, exp(log_std)^2)."""
    z = (target - prediction) * torch.exp(-log_std)
    return (-0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi)).sum()


def train_bayesian_torch_split(
    layer_class: type[nn.Module],
    dataset: RegressionDataset,
    split: int,
    iterations: int,
    seed: int,
    kl_mode: str,
) -> tuple[float, float]:
    """Train and evaluate one split; returns (test log-likelihood, test RMSE), original units."""
    torch.manual_seed(seed + split)
    data = stack_splits(dataset, [split])
    x, y = data.x_train[0], data.y_train[0]
    model = BayesianTorchMLP(layer_class, x.shape[1], kl_mode)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, betas=BETAS)
    scale = 1.0 / x.shape[0]
    for _ in range(iterations):
        prediction, kl = model(x)
        loss = (kl - gaussian_log_likelihood(prediction, y, model.log_noise_std)) * scale
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    predictions = model.sample_predictions(data.x_test[0], TEST_SAMPLES)  # (K, N)
    noise_std = model.log_noise_std.detach().exp()
    per_example = gaussian_mixture_log_likelihood(predictions, noise_std, data.y_test[0])
    log_likelihood = per_example.mean() - torch.log(data.target_scale[0])
    rmse = ((predictions.mean(0) - data.y_test[0]) ** 2).mean().sqrt() * data.target_scale[0]
    return float(log_likelihood), float(rmse)


def measure_bayesian_torch(
    layer_class: type[nn.Module],
    dataset: RegressionDataset,
    split_ids: list[int],
    iterations: int,
    seed: int,
    kl_mode: str,
) -> Row:
    """Time the per-split loop over all splits, from raw data to test metrics."""
    start = time.perf_counter()
    results = [
        train_bayesian_torch_split(layer_class, dataset, k, iterations, seed, kl_mode)
        for k in split_ids
    ]
    seconds = time.perf_counter() - start
    return Row(
        dataset=dataset.name,
        implementation=BT_NAME,
        chunk="-",
        seconds=seconds,
        iterations=iterations,
        split_ids=list(split_ids),
        test_log_likelihood=[r[0] for r in results],
        test_rmse=[r[1] for r in results],
        extra={"kl": kl_mode},
    )


# ---------------------------------------------------------------------------------------- report


def format_table(rows: Sequence[Row], splits: int) -> str:
    """The rows as a markdown table."""
    lines = [
        f"| dataset | implementation | chunk | seconds | ms/iter ({splits} splits) "
        "| test LL (mean ± SEM) | bt s / this s |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        sem = "nan" if math.isnan(row.ll_sem) else f"{row.ll_sem:.3f}"
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}"
        lines.append(
            f"| {row.dataset} | {row.implementation} | {row.chunk} | {row.seconds:.1f} "
            f"| {row.ms_per_iteration:.2f} | {row.ll_mean:.3f} ± {sem} | {ratio} |"
        )
    return "\n".join(lines)


def attach_ratios(rows: Sequence[Row]) -> dict[str, dict[str, float]]:
    """Set ``Row.ratio`` (bayesian-torch seconds / row seconds) and return it per data set."""
    ratios: dict[str, dict[str, float]] = {}
    for dataset in dict.fromkeys(r.dataset for r in rows):
        reference = [r for r in rows if r.dataset == dataset and r.implementation == BT_NAME]
        if not reference:
            continue
        for row in rows:
            if row.dataset == dataset:
                row.ratio = reference[0].seconds / row.seconds
                if row.implementation == "vbnn":
                    ratios.setdefault(dataset, {})[row.chunk] = row.ratio
    return ratios


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write through a temporary file so that an interrupted run leaves no half file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(payload, indent=2) + "\n")
    temporary.replace(path)


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


# ------------------------------------------------------------------------------------------ main


def parse_chunks(text: str) -> list[int | None]:
    """'auto,1,5,20' -> [None, 1, 5, 20] (None: the engine's choice)."""
    chunks: list[int | None] = []
    for part in text.split(","):
        part = part.strip()
        if part == "auto":
            chunks.append(None)
            continue
        try:
            value = int(part)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(
                f"--vbnn-chunks {text!r}: expected 'auto' or integers >= 1, e.g. 'auto,1,5,20'"
            )
        chunks.append(value)
    return chunks


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--iterations", type=int, default=5000, help="training steps per split")
    parser.add_argument("--datasets", default="boston,power", help="comma-separated UCI names")
    parser.add_argument("--splits", type=int, default=20, help="first N standard splits")
    parser.add_argument(
        "--vbnn-chunks",
        type=parse_chunks,
        default=[None],
        help="comma-separated chunk sizes for vbnn ('auto' = engine's choice); "
        "sizes that resolve to the same value are measured once",
    )
    parser.add_argument("--skip-bayesian-torch", action="store_true")
    parser.add_argument(
        "--compile", action="store_true", help="vbnn with compile=True in its config"
    )
    parser.add_argument(
        "--bt-kl",
        choices=("sum", "mean"),
        default="sum",
        help="bayesian-torch KL: 'sum' = true KL (as vbnn), 'mean' = the layers' returned value",
    )
    parser.add_argument("--seed", type=int, default=0, help="vbnn seed; bayesian-torch seed+split")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--warmup", type=int, default=10, help="untimed warm-up iterations")
    parser.add_argument("--data-dir", default=None, help="else $VBNN_DATA_DIR")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output path")
    args = parser.parse_args(argv)
    if args.iterations < 1 or args.splits < 1 or args.warmup < 0:
        parser.error("--iterations and --splits must be >= 1, --warmup >= 0")
    return args


def run_dataset(
    name: str, args: argparse.Namespace, layer_class: type[nn.Module] | None
) -> list[Row]:
    """All measurements of one data set."""
    dataset = load_uci(name, args.data_dir)
    if args.splits > dataset.num_splits:
        raise SystemExit(f"{name}: --splits {args.splits} > its {dataset.num_splits} splits")
    split_ids = list(range(args.splits))
    if args.warmup:
        run_splits(dataset, [0], vbnn_config(args.warmup, None, args.seed, args.compile))
        if layer_class is not None:
            train_bayesian_torch_split(layer_class, dataset, 0, args.warmup, args.seed, args.bt_kl)
    rows: list[Row] = []
    measured: set[int] = set()
    for chunk in args.vbnn_chunks:
        config = vbnn_config(args.iterations, chunk, args.seed, args.compile)
        size = resolved_chunk(dataset, split_ids, config)
        if size in measured:
            continue  # e.g. 'auto' resolving to a size already in the list
        measured.add(size)
        label = f"auto={size}" if chunk is None else str(size)
        print(f"[{name}] vbnn chunk {label} ...", file=sys.stderr, flush=True)
        rows.append(measure_vbnn(dataset, split_ids, config, label))
    if layer_class is not None:
        print(f"[{name}] {BT_NAME} per split ...", file=sys.stderr, flush=True)
        rows.append(
            measure_bayesian_torch(
                layer_class, dataset, split_ids, args.iterations, args.seed, args.bt_kl
            )
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    freed_memory_kept = keep_freed_memory()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    layer_class = None if args.skip_bayesian_torch else import_linear_reparameterization()
    rows: list[Row] = []
    for name in (n.strip() for n in args.datasets.split(",")):
        rows.extend(run_dataset(name, args, layer_class))
    ratios = attach_ratios(rows)
    print(format_table(rows, args.splits))
    for dataset, by_chunk in ratios.items():
        pairs = ", ".join(f"chunk {chunk}: {ratio:.2f}x" for chunk, ratio in by_chunk.items())
        print(f"\n{dataset}: bayesian-torch seconds / vbnn seconds = {pairs}")
    payload = {
        "meta": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv),
            "iterations": args.iterations,
            "splits": args.splits,
            "seed": args.seed,
            "warmup": args.warmup,
            "bt_kl": args.bt_kl,
            "torch_threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
            "keep_freed_memory": freed_memory_kept,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "processor": platform.processor(),
            "torch": torch.__version__,
            "bayesian_torch": package_version("bayesian-torch"),
            "vbnn": package_version("vbnn"),
        },
        "rows": [row.to_dict() for row in rows],
        "ratio_bayesian_torch_over_vbnn": ratios,
    }
    write_json(args.out, payload)
    print(f"\nwrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
