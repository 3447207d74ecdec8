"""Time to quality: test NLL, accuracy and ECE reached within fixed wall-clock budgets, per
estimator, against bayesian-torch and plain PyTorch; and each estimator's gradient variance.

    pip install --no-deps bayesian-torch==0.5.0      # optional; torch stays as it is
    VBNN_DATA_DIR=../shared/data python benchmarks/time_to_quality.py \
        --out benchmarks/results/time_to_quality

Networks (plain ``nn.Module``s of ``benchmarks/converted_step.py``): ``mlp`` 784-400-400-10 ReLU
and ``lenet`` (LeNet-5: conv 20@5x5, pool, conv 50@5x5, pool, dense 800-500-10) on MNIST;
``resnet``, a small residual CNN (stem conv 16@3x3 + BatchNorm, one residual block of two
conv 16@3x3 + BatchNorm, average pooling to 7x7, dense 784-10) on Fashion-MNIST; and, for the
recurrent and attention layers, ``row-lstm`` and ``row-transformer`` on MNIST read row by row (28
steps of 28 pixels: an LSTM of 128 units, or one transformer encoder layer of width 64).

Arms, each at its library's defaults for a converted model:

* ``plain``: the network itself, point weights, cross-entropy (the reference);
* ``vbnn-lrt``: ``vbnn.convert(network, "mf")`` with every layer in ``local`` mode (the local
  reparameterization trick, Kingma, Salimans & Welling 2015), loss CE + ``vbnn.kl`` / N;
* ``vbnn-weights``: the same model trained under ``vbnn.mode(model, "weights")``: one weight draw
  per minibatch, shared by its examples;
* ``vbnn-conv-weights``: the convolutions on one weight draw per minibatch, the dense layers on
  the LRT: the layers' defaults (for the MLP it is ``vbnn-lrt``);
* ``--init-stds``: the vbnn arms again with their layers starting at other posterior stds
  (``convert(..., init_std=s)``), labelled ``"vbnn-lrt, std s"``;
* ``vbnn-sequence-draw`` / ``vbnn-batch-draw`` (the row networks only): the recurrent and
  attention layers on one weight draw per sequence (their default, Fortunato et al. 2017) or one
  draw per minibatch shared by its sequences (``SequenceDraw.BATCH``), the dense layers on the
  LRT;
* ``bt-reparameterization`` / ``bt-flipout`` (the image networks only; bayesian-torch 0.5.0 has
  no attention layer): bayesian-torch 0.5.0's ``dnn_to_bnn`` with the
  prior/posterior parameters of its README (prior N(0, 1), posterior means N(0, 0.1^2), rho -3),
  loss CE + ``get_kl_loss`` / N. Note that ``get_kl_loss`` sums each layer's *mean* elementwise KL
  (read from its source), far below the KL itself; that is what its users get. Without
  bayesian-torch these arms are skipped with a message;
* ``vbnn-ivon``: the ``mf`` conversion trained by ``vbnn.IVON`` at Shen et al. 2024's settings
  (step 0.1, h0 0.1, no bound on the step, ess = N, prior N(0, 1)); ``vbnn-ivon-defaults``: the
  same at ``vbnn.IVON()``'s defaults, which key its units (a new default makes new ones);
  ``ivon-opt``: the plain network trained by ivon-opt by hand at vbnn-ivon's settings (skipped
  without ivon-opt).

Protocol: a seeded subset of 10,000 training and 2,000 test images (the same for every seed and
arm), Adam (lr 1e-3), batches of 128 (the last partial batch of an epoch dropped). One run per
(network, arm, seed) trains for the largest budget; only the training steps are timed (batch
slicing, forward, loss, backward, Adam), and at each budget the clock pauses for the evaluation:
test NLL, accuracy and ECE (15 bins) of the predictive probabilities averaged over 8 weight
draws (one pass for ``plain``). The step at which a budget is reached depends on the machine, so
the same seed gives the same numbers only for the same step counts; the evaluation's draws are
seeded apart from training's. Separately, per (network, arm, seed), the gradient variance
(``gradient_variance.py``) after ``--variance-steps`` untimed steps.

Budgets are wall seconds (``--clock wall``, the default) or, for a machine shared with other
work, ``--clock steps``: each arm's step time is measured first, for every arm of a network in
one interleaved run (``--kinds timing``, run alone on the machine), and each arm then trains
``ceil(budget / step time)`` steps, however busy the machine; the same seed then gives the same
numbers. ``--shard I/N`` lets N processes split the training and variance units.

Every finished unit is stored at once (``vbnn.stores.unit_store``: one JSON per unit, written
atomically) in ``--out``; a re-run skips stored units, and the table (``table.md``) and figure
(``nll_vs_time.png``) are made from the store. ``--smoke`` runs a tiny configuration in seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import torch
from converted_step import bayesian_torch_model, network
from gradient_variance import gradient_variance
from step_timing import measure_step_times
from time_to_quality_report import write_report
from torch import nn
from torch.nn import functional

import vbnn
from vbnn.data.mnist import ImageDataset, load_images
from vbnn.layers.sequence_weights import SequenceDraw
from vbnn.stores import unit_store

INSTALL_HINT = "pip install --no-deps bayesian-torch==0.5.0"


class Network(str, Enum):
    MLP = "mlp"
    LENET = "lenet"
    RESNET = "resnet"
    ROW_LSTM = "row-lstm"
    ROW_TRANSFORMER = "row-transformer"


class Arm(str, Enum):
    PLAIN = "plain"
    VBNN_LRT = "vbnn-lrt"
    VBNN_WEIGHTS = "vbnn-weights"
    VBNN_CONV_WEIGHTS = "vbnn-conv-weights"
    BT_REPARAMETERIZATION = "bt-reparameterization"
    BT_FLIPOUT = "bt-flipout"
    VBNN_SEQUENCE_DRAW = "vbnn-sequence-draw"
    VBNN_BATCH_DRAW = "vbnn-batch-draw"
    VBNN_IVON = "vbnn-ivon"
    VBNN_IVON_DEFAULTS = "vbnn-ivon-defaults"
    IVON_OPT = "ivon-opt"


DATASETS = {Network.MLP: ImageDataset.MNIST, Network.LENET: ImageDataset.MNIST,
            Network.RESNET: ImageDataset.FASHION_MNIST, Network.ROW_LSTM: ImageDataset.MNIST,
            Network.ROW_TRANSFORMER: ImageDataset.MNIST}  # fmt: skip
BASE_NAMES = {Network.MLP: "mlp", Network.LENET: "lenet", Network.RESNET: "resblock",
              Network.ROW_LSTM: "row-lstm", Network.ROW_TRANSFORMER: "row-transformer"}  # fmt: skip
VBNN_ARMS = (Arm.VBNN_LRT, Arm.VBNN_WEIGHTS, Arm.VBNN_CONV_WEIGHTS, Arm.VBNN_SEQUENCE_DRAW,
             Arm.VBNN_BATCH_DRAW)  # fmt: skip
IMAGE_ARMS = (Arm.PLAIN, Arm.VBNN_LRT, Arm.VBNN_WEIGHTS, Arm.VBNN_CONV_WEIGHTS,
              Arm.BT_REPARAMETERIZATION, Arm.BT_FLIPOUT)  # fmt: skip
# the recurrent and attention layers' two estimators; bayesian-torch 0.5.0 has no attention layer
SEQUENCE_ARMS = (Arm.PLAIN, Arm.VBNN_SEQUENCE_DRAW, Arm.VBNN_BATCH_DRAW)
SEQUENCE_NETWORKS = (Network.ROW_LSTM, Network.ROW_TRANSFORMER)
# natural-gradient VI: vbnn's IVON on the converted network (the layers' estimators) and
# ivon-opt by hand on the plain one; timed in a unit of their own beside plain's, so that the
# timing unit of the other arms, and with it their units' keys, stays as it is; their budgets
# are put on that unit's clock through plain, timed in both (calibrated_step)
NATURAL_GRADIENT_ARMS = (Arm.PLAIN, Arm.VBNN_IVON, Arm.IVON_OPT)
# vbnn-ivon at vbnn.IVON()'s defaults (chosen on validation images after the arms above were
# measured; the bounded step costs a pass more): timed beside plain in a unit of its own, and
# the defaults key its units and that timing unit (ivon_defaults)
IVON_DEFAULTS_ARMS = (Arm.PLAIN, Arm.VBNN_IVON_DEFAULTS)
SEQUENCE_DRAWS = {Arm.VBNN_SEQUENCE_DRAW: SequenceDraw.SEQUENCE,
                  Arm.VBNN_BATCH_DRAW: SequenceDraw.BATCH}  # fmt: skip
BAYESIAN_TORCH_KINDS = {Arm.BT_REPARAMETERIZATION: "Reparameterization",
                        Arm.BT_FLIPOUT: "Flipout"}  # fmt: skip


class Clock(str, Enum):
    """How a budget of seconds becomes training. ``wall``: each arm trains until its timed
    steps add up to the budget. ``steps``: each arm trains ``ceil(budget / t)`` steps, t being its
    step time measured beforehand for every arm of the network in one interleaved run (a
    ``timing`` unit, ``step_timing.py``); the training units can then share a busy machine and
    still give what an idle one would, and the same seed gives the same numbers."""

    WALL = "wall"
    STEPS = "steps"


@dataclass(frozen=True)
class Protocol:
    """What one unit does; stored with (and keying) every unit."""

    budgets: tuple[float, ...] = (20.0, 60.0, 180.0)
    train_size: int = 10_000
    test_size: int = 2_000
    batch_size: int = 128
    learning_rate: float = 1e-3
    test_draws: int = 8
    ece_bins: int = 15
    data_seed: int = 0
    threads: int = os.cpu_count() or 1
    variance_steps: int = 100
    variance_draws: int = 16
    clock: Clock = Clock.WALL
    timing_warmup: int = 20
    timing_steps: int = 20
    timing_rounds: int = 7

    def __post_init__(self) -> None:
        budgets = tuple(sorted(float(b) for b in self.budgets))
        if not budgets or budgets[0] <= 0:
            raise ValueError(f"Protocol: budgets must be positive seconds, got {self.budgets}")
        object.__setattr__(self, "budgets", budgets)
        object.__setattr__(self, "clock", Clock(self.clock))
        if self.train_size < self.batch_size:
            raise ValueError(
                f"Protocol: train_size {self.train_size} < batch_size {self.batch_size}"
            )


KINDS = ("timing", "training", "variance")
SMOKE = Protocol(budgets=(0.5, 1.0), train_size=512, test_size=256, batch_size=64, test_draws=2,
                 variance_steps=2, variance_draws=3)  # fmt: skip


def bayesian_torch_version() -> str | None:
    """bayesian-torch's installed version, or None."""
    from importlib import metadata

    try:
        return metadata.version("bayesian-torch")
    except metadata.PackageNotFoundError:
        return None


def ivon_opt_version() -> str | None:
    """ivon-opt's version, None when it is not installed."""
    try:
        return importlib.metadata.version("ivon-opt")
    except importlib.metadata.PackageNotFoundError:
        return None


def images(network_name: Network, protocol: Protocol) -> tuple[torch.Tensor, ...]:
    """(train x, train y, test x, test y): seeded subsets (``data_seed``) of the network's data."""
    generator = torch.Generator().manual_seed(protocol.data_seed)
    out = []
    for split, size in (("train", protocol.train_size), ("test", protocol.test_size)):
        x, y = load_images(DATASETS[network_name], split)
        if size > len(y):
            raise ValueError(f"{split}_size {size} > the {len(y)} {split} images")
        rows = torch.randperm(len(y), generator=generator)[:size]
        out += [x[rows].contiguous(), y[rows]]
    return tuple(out)


def build(network_name: Network, arm: Arm, seed: int, init_std: float | None = None
          ) -> tuple[nn.Module, Callable] | None:  # fmt: skip
    """(model, KL function or None) of ``arm`` on ``network_name``, drawn from ``seed``, the
    vbnn arms' layers starting at ``init_std`` (None: the layers' default); None when
    bayesian-torch is missing."""
    torch.manual_seed(seed)
    base = network(BASE_NAMES[network_name])
    if arm is Arm.PLAIN:
        return base, None
    if arm in (Arm.VBNN_IVON, Arm.VBNN_IVON_DEFAULTS):
        return vbnn.convert(base, "mf"), None
    if arm is Arm.IVON_OPT:
        return IvonOptNetwork(base), None
    if arm in VBNN_ARMS:
        options = {} if init_std is None else {"init_std": init_std}
        if arm in SEQUENCE_DRAWS:  # the recurrent and attention layers' draw, named
            options["draw"] = SEQUENCE_DRAWS[arm]
        model = vbnn.convert(base, "mf", **options)
        return model, vbnn.kl
    return bayesian_torch_model(base, BAYESIAN_TORCH_KINDS[arm])


def estimator(arm: Arm, layer: vbnn.VariationalLayer) -> str:
    """The forward mode ``layer`` trains in under ``arm``: "local" (the LRT) or "weights" (one
    weight draw a minibatch)."""
    on_conv = arm in (Arm.VBNN_CONV_WEIGHTS, Arm.VBNN_IVON, Arm.VBNN_IVON_DEFAULTS)  # defaults
    if arm is Arm.VBNN_WEIGHTS or (on_conv and layer.operator.is_conv):
        return "weights"
    return "local"


def batches(rows: int, size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Row indices of minibatches, epoch after epoch, each epoch a fresh permutation."""
    while True:
        order = torch.randperm(rows, generator=generator)
        yield from order[: rows - rows % size].split(size)


class Trainer:
    """One arm's model, optimizer and loss; ``step()`` is what a user's loop does a step."""

    def __init__(self, arm: Arm, built: tuple[nn.Module, Callable | None], data, protocol,
                 seed: int) -> None:  # fmt: skip
        self.arm, (self.model, self.kl) = arm, built
        self.x, self.y = data
        self.protocol = protocol
        self.optimizer = optimizer(arm, self.model, protocol)
        self.order = batches(len(self.y), protocol.batch_size, torch.Generator().manual_seed(seed))
        self.model.train()
        # every vbnn layer's estimator, named (not left to the layers' default)
        self.layer_modes = [(layer, estimator(arm, layer))
                            for layer in vbnn.variational_layers(self.model)]  # fmt: skip

    def loss(self, rows: torch.Tensor) -> torch.Tensor:
        """CE of the minibatch ``rows`` + KL / N, with the arm's estimator's noise."""
        with contextlib.ExitStack() as modes:
            for layer, mode in self.layer_modes:
                modes.enter_context(vbnn.mode(layer, mode))
            logits = self.model(self.x[rows])
        loss = functional.cross_entropy(logits, self.y[rows])
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{self.arm.value}: non-finite cross-entropy {loss.item()}")
        if self.kl is not None:
            loss = loss + self.kl(self.model) / self.protocol.train_size
        return loss

    def step(self) -> None:
        with weights_drawn(self.arm, self.optimizer, train=True):
            self.optimizer.zero_grad(set_to_none=True)
            self.loss(next(self.order)).backward()
        self.optimizer.step()


class IvonOptNetwork(nn.Module):
    """The plain network of ivon-opt's arm: in eval mode each pass runs on one weight draw of
    its optimiser (``sampler``, set by ``optimizer``); in training the step draws."""

    def __init__(self, network: nn.Module) -> None:
        super().__init__()
        self.network, self.sampler = network, None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            return self.network(x)
        with self.sampler.sampled_params(train=False):
            return self.network(x)


def optimizer(arm: Arm, model: nn.Module, protocol: Protocol) -> torch.optim.Optimizer:
    """Adam (lr ``protocol.learning_rate``), or the natural-gradient arms' IVON at Shen et al.
    2024's settings (lr 0.1, no bound on the step, ess = N, prior N(0, 1): weight decay 1 / N,
    h0 0.1), or ``vbnn-ivon-defaults``'s ``vbnn.IVON()`` (vbnn's defaults, chosen on
    validation images after the other arms were measured)."""
    if arm in (Arm.VBNN_IVON, Arm.VBNN_IVON_DEFAULTS):
        paper = vbnn.IVON(learning_rate=0.1, hess_init=0.1, clip_radius=math.inf)
        settings = vbnn.IVON() if arm is Arm.VBNN_IVON_DEFAULTS else paper
        return settings.build(
            model,
            nn.Module(),
            learning_rate=protocol.learning_rate,
            rates={},
            prior=None,
            dataset_size=protocol.train_size,
        )
    if arm is Arm.IVON_OPT:
        import ivon  # the by-hand peer arm (pip install ivon-opt)

        size = protocol.train_size
        model.sampler = ivon.IVON(model.parameters(), lr=0.1, ess=size, hess_init=0.1,
                                  weight_decay=1.0 / size)  # fmt: skip
        return model.sampler
    return torch.optim.Adam(model.parameters(), lr=protocol.learning_rate)


def weights_drawn(arm: Arm, optimizer: torch.optim.Optimizer, train: bool = False):
    """ivon-opt's arm: its optimiser swaps a weight draw into the plain network for the pass;
    every other arm: nothing to do (its layers draw their own noise)."""
    if arm is Arm.IVON_OPT:
        return optimizer.sampled_params(train=train)
    return contextlib.nullcontext()


@torch.no_grad()
def evaluate(model: nn.Module, arm: Arm, x, y, protocol: Protocol, seed: int) -> dict[str, float]:
    """Test NLL, accuracy and ECE of the predictive probabilities averaged over
    ``test_draws`` weight draws (vbnn arms in "weights" mode; one pass for ``plain``), in eval
    mode (BatchNorm's running statistics), drawing from ``seed`` without moving the training
    RNG."""
    draws = 1 if arm is Arm.PLAIN else protocol.test_draws
    model.eval()
    with torch.random.fork_rng(devices=[]), vbnn.mode(model, "weights"):
        torch.manual_seed(seed)
        probabilities = torch.cat([
            torch.stack([functional.softmax(model(chunk), -1) for _ in range(draws)]).mean(0)
            for chunk in x.split(500)
        ])  # fmt: skip
    model.train()
    return {
        "nll": vbnn.metrics.classification_nll(probabilities, y).item(),
        "accuracy": vbnn.metrics.accuracy(probabilities, y).item(),
        "ece": vbnn.metrics.expected_calibration_error(probabilities, y, protocol.ece_bins).item(),
    }


def train_unit(trainer: Trainer, test, protocol: Protocol, seed: int,
               step_ms: float | None = None, measure: Callable = evaluate
               ) -> dict[str, Any]:  # fmt: skip
    """Train for the largest budget; at each budget the clock pauses for ``measure``
    (``evaluate``'s arguments and metrics). With ``step_ms`` (the ``steps`` clock) the clock
    counts ``step_ms`` a step instead of timing."""
    marks, clock, steps, rows = list(protocol.budgets), 0.0, 0, []
    while marks:
        start = time.perf_counter()
        trainer.step()
        clock += time.perf_counter() - start if step_ms is None else step_ms / 1000
        steps += 1
        if clock >= marks[0] - 1e-9:
            metrics = measure(trainer.model, trainer.arm, *test, protocol, seed + 1_000_003)
            rows.append({"budget": marks.pop(0), "seconds": clock, "steps": steps,
                         "ms_per_step": 1000 * clock / steps, **metrics})  # fmt: skip
    return {"marks": rows}


def variance_unit(trainer: Trainer, protocol: Protocol, seed: int) -> dict[str, Any]:
    """Gradient variance after ``variance_steps`` untimed steps of the arm's own training."""
    for _ in range(protocol.variance_steps):
        trainer.step()
    size, rows = protocol.batch_size, len(trainer.y)
    return {"layers": gradient_variance(
        trainer.model, lambda index: trainer.loss(torch.arange(index * size, (index + 1) * size)),
        rows // size, protocol.variance_draws, torch.Generator().manual_seed(seed),
    )}  # fmt: skip


def environment(protocol: Protocol) -> dict[str, Any]:
    """Machine, CPU model, threads and library versions, stored with every unit."""
    cpu = platform.processor() or platform.machine()
    if Path("/proc/cpuinfo").is_file():
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                 .splitlines() if line.startswith("model name")]  # fmt: skip
        cpu = names[0] if names else cpu
    return {"cpu": cpu, "cores": os.cpu_count(), "threads": protocol.threads,
            "torch": torch.__version__, "vbnn": vbnn.__version__,
            "bayesian_torch": bayesian_torch_version(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d")}  # fmt: skip


def settings(kind: str, network_name: Network, arm: Arm, seed: int, protocol: Protocol,
             init_std: float | None = None) -> dict:  # fmt: skip
    """The stored key of a unit; ``init_std`` only when a vbnn arm's layers start at a given
    std (so that the units at the layers' default keep their keys)."""
    key = {"benchmark": "time_to_quality", "kind": kind, "network": network_name.value,
           "arm": arm.value, "seed": seed, "protocol": dataclasses.asdict(protocol)}  # fmt: skip
    if init_std is not None:
        key["init_std"] = init_std
    if arm is Arm.VBNN_IVON_DEFAULTS:
        key["ivon"] = ivon_defaults()
    return key


def ivon_defaults() -> dict:
    """``vbnn.IVON()``'s settings: they define ``vbnn-ivon-defaults``, so they key its units."""
    return dataclasses.asdict(vbnn.IVON())


def variants(arms, init_stds, network_name: Network) -> list[tuple[Arm, float | None]]:
    """(arm, initial std) pairs on ``network_name``: each vbnn arm at every ``init_stds`` value
    (None: the layers' default), every other arm once; ``vbnn-conv-weights`` only on networks
    with convolutions (on the MLP it is ``vbnn-lrt``)."""
    arms = [arm for arm in arms if arm in measured_arms(network_name)]
    if network_name is Network.MLP:
        arms = [arm for arm in arms if arm is not Arm.VBNN_CONV_WEIGHTS]
    return [(arm, init_std) for arm in arms
            for init_std in (init_stds if arm in VBNN_ARMS else [None])]  # fmt: skip


def network_arms(network_name: Network) -> tuple[Arm, ...]:
    """The arms timed in the ``timing`` unit of ``network_name``."""
    return SEQUENCE_ARMS if network_name in SEQUENCE_NETWORKS else IMAGE_ARMS


def timing_arms(network_name: Network, arm: Arm) -> tuple[Arm, ...]:
    """The arms of the timing unit that holds ``arm``'s step time on ``network_name``."""
    for group in (NATURAL_GRADIENT_ARMS, IVON_DEFAULTS_ARMS):
        if arm in group[1:]:
            return group
    return network_arms(network_name)


def measured_arms(network_name: Network) -> tuple[Arm, ...]:
    """Every arm measured on ``network_name``."""
    if network_name in SEQUENCE_NETWORKS:
        return SEQUENCE_ARMS
    return IMAGE_ARMS + NATURAL_GRADIENT_ARMS[1:] + IVON_DEFAULTS_ARMS[1:]


def label(arm: Arm, init_std: float | None) -> str:
    """The arm's name in the table and the figure."""
    return arm.value if init_std is None else f"{arm.value}, std {init_std:g}"


def available_arms(arms, quiet: bool = False) -> list[Arm]:
    """``arms`` less bayesian-torch's when it is not installed (saying so unless ``quiet``)."""
    if ivon_opt_version() is None and Arm.IVON_OPT in arms:
        if not quiet:
            print("ivon-opt is not installed: skipping 'ivon-opt' (pip install ivon-opt)")
        arms = [arm for arm in arms if arm is not Arm.IVON_OPT]
    missing = [arm for arm in arms if arm in BAYESIAN_TORCH_KINDS]
    if missing and bayesian_torch_version() is None:
        if quiet:
            return [arm for arm in arms if arm not in BAYESIAN_TORCH_KINDS]
        print(f"bayesian-torch is not installed: skipping {[a.value for a in missing]} "
              f"(install it with `{INSTALL_HINT}`)")  # fmt: skip
        return [arm for arm in arms if arm not in BAYESIAN_TORCH_KINDS]
    return list(arms)


def step_times(out: Path, network_name: Network, protocol: Protocol, data=None,
               group: tuple[Arm, ...] | None = None) -> dict | None:  # fmt: skip
    """The stored ``timing`` unit of ``network_name`` (the milliseconds a step of every
    available arm of ``group``, None: ``network_arms``, measured in one interleaved run);
    measured and stored first when missing and ``data`` is given, else None."""
    arms = available_arms(group or network_arms(network_name), quiet=True)
    key = {"benchmark": "time_to_quality", "kind": "timing", "network": network_name.value,
           "arms": [arm.value for arm in arms],
           "protocol": dataclasses.asdict(protocol)}  # fmt: skip
    if Arm.VBNN_IVON_DEFAULTS in arms:
        key["ivon"] = ivon_defaults()
    info = unit_store.load_info(out, key)
    if info is None and data is not None:
        trainers = {arm.value: Trainer(arm, build(network_name, arm, 0), data[:2], protocol, 0)
                    for arm in arms}  # fmt: skip
        info = measure_step_times(trainers, protocol.timing_warmup, protocol.timing_steps,
                                  protocol.timing_rounds)  # fmt: skip
        info["environment"] = environment(protocol)
        unit_store.save(out, key, None, info)
        print(f"{network_name.value} step times, ms: {info['ms_per_step']}")
    return info


def run(out: Path, networks, arms, seeds, protocol: Protocol, kinds=KINDS,
        shard: tuple[int, int] = (0, 1), init_stds=(None,)) -> None:  # fmt: skip
    """Compute every unit not yet stored in ``out``, storing each as soon as it is done.

    ``shard=(i, n)`` computes only the i-th of every n training and variance units (in network,
    arm, seed, kind order), so that n processes can share a machine without computing a unit
    twice. With the ``steps`` clock, a network's ``timing`` unit is measured before its first
    training unit when it is missing (``kinds=("timing",)`` measures only those: run it alone on
    the machine)."""
    torch.set_num_threads(protocol.threads)
    index, count = shard
    number = -1
    arms = available_arms(arms)
    for network_name in networks:
        data = None  # loaded when a unit of this network is missing
        if "timing" in kinds and protocol.clock is Clock.STEPS:
            data = images(network_name, protocol)
            for group in {timing_arms(network_name, arm) for arm in arms
                          if arm in measured_arms(network_name)}:  # fmt: skip
                step_times(out, network_name, protocol, data, group)
        for arm, init_std in variants(arms, init_stds, network_name):
            for seed in seeds:
                for kind in (kind for kind in kinds if kind != "timing"):
                    number += 1
                    if number % count != index:
                        continue
                    key = unit_key(out, kind, network_name, arm, seed, protocol, init_std)
                    if key is not None and unit_store.load_info(out, key) is not None:
                        continue
                    if data is None:
                        data = images(network_name, protocol)
                    if key is None:  # the steps clock without the arm's timing unit
                        step_times(out, network_name, protocol, data,
                                   timing_arms(network_name, arm))  # fmt: skip
                        key = unit_key(out, kind, network_name, arm, seed, protocol, init_std)
                    built = build(network_name, arm, seed, init_std)
                    trainer = Trainer(arm, built, data[:2], protocol, seed)
                    began = time.perf_counter()
                    if kind == "training":
                        info = train_unit(trainer, data[2:], protocol, seed,
                                          key.get("ms_per_step"))  # fmt: skip
                    else:
                        info = variance_unit(trainer, protocol, seed)
                    info["environment"] = environment(protocol)
                    unit_store.save(out, key, None, info)
                    print(f"{network_name.value} {label(arm, init_std)} seed {seed} {kind}: "
                          f"{time.perf_counter() - began:.1f} s")  # fmt: skip


def unit_key(out: Path, kind: str, network_name: Network, arm: Arm, seed: int,
             protocol: Protocol, init_std: float | None) -> dict | None:  # fmt: skip
    """``settings``, with the arm's measured step time for a training unit of the steps clock
    (so that a new measurement makes new units); None when that time is not yet measured."""
    key = settings(kind, network_name, arm, seed, protocol, init_std)
    if kind == "training" and protocol.clock is Clock.STEPS:
        ms_per_step = calibrated_step(out, network_name, arm, protocol)
        if ms_per_step is None:
            return None
        key["ms_per_step"] = ms_per_step
    return key


def calibrated_step(out: Path, network_name: Network, arm: Arm, protocol: Protocol) -> float | None:
    """``arm``'s milliseconds a step on the clock of the network's own timing unit: an arm timed
    in another group (another run, perhaps another day's machine) is put on it through ``plain``,
    timed in both, ms = ms_group * plain_network / plain_group, so that every arm's budget is the
    same number of plain steps. None while either timing is missing."""
    group = timing_arms(network_name, arm)
    timing = step_times(out, network_name, protocol, group=group)
    if timing is None:
        return None
    ms = timing["ms_per_step"][arm.value]
    if group == network_arms(network_name):
        return ms
    reference = step_times(out, network_name, protocol)
    if reference is None:
        return None
    return ms * reference["ms_per_step"][Arm.PLAIN.value] / timing["ms_per_step"][Arm.PLAIN.value]


def stored_units(out: Path, networks, arms, seeds, protocol: Protocol,
                 init_stds=(None,)) -> list[dict[str, Any]]:  # fmt: skip
    """Every stored unit of these settings: ``{"kind", "network", "arm", "seed", "info"}``,
    ``arm`` being the arm's label (with its initial std when one was given)."""
    units = []
    for network_name in networks:
        for arm, init_std in variants(arms, init_stds, network_name):
            for seed in seeds:
                for kind in ("training", "variance"):
                    key = unit_key(out, kind, network_name, arm, seed, protocol, init_std)
                    info = None if key is None else unit_store.load_info(out, key)
                    if info is not None:
                        units.append({**key, "arm": label(arm, init_std), "info": info})
    return units


def init_std_argument(text: str) -> float | None:
    """``"default"`` as None, else a positive float."""
    if text == "default":
        return None
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"--init-stds {text!r}: a std must be > 0")
    return value


def shard_argument(text: str) -> tuple[int, int]:
    """``"I/N"`` as ``(I, N)``, refused unless 0 <= I < N."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: expected I/N, e.g. 0/2") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: need 0 <= I < N")
    return index, count


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder of the stored units")
    parser.add_argument("--networks", nargs="+", type=Network, default=list(Network))
    parser.add_argument("--arms", nargs="+", type=Arm, default=list(Arm))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budgets", nargs="+", type=float, default=None, help="seconds")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (all cores)")
    parser.add_argument("--variance-steps", type=int, default=None)
    parser.add_argument("--clock", type=Clock, default=None,
                        help="wall (default), or steps: budgets turned into steps by each "
                        "arm's step time measured first (--kinds timing), for a shared "
                        "machine")  # fmt: skip
    parser.add_argument("--init-stds", nargs="+", type=init_std_argument, default=[None],
                        metavar="STD", help="initial posterior stds of the vbnn arms' layers, "
                        "'default' for the layers' own (default: default)")  # fmt: skip
    parser.add_argument(
        "--kinds",
        nargs="+",
        choices=KINDS,
        default=list(KINDS),
        help="timed training units, untimed gradient-variance units, or both",
    )
    parser.add_argument(
        "--shard",
        type=shard_argument,
        default=(0, 1),
        metavar="I/N",
        help="compute only the I-th of every N units (0 <= I < N)",
    )
    parser.add_argument(
        "--report", action="store_true", help="only make the table and figure from the stored units"
    )
    parser.add_argument("--smoke", "--quick", action="store_true",
                        help="tiny budgets and data, one seed: runs in seconds")  # fmt: skip
    args = parser.parse_args(argv)
    protocol = SMOKE if args.smoke else Protocol()
    seeds = args.seeds[:1] if args.smoke else args.seeds
    changes = {"budgets": args.budgets, "threads": args.threads,
               "variance_steps": args.variance_steps, "clock": args.clock}  # fmt: skip
    protocol = dataclasses.replace(protocol, **{k: v for k, v in changes.items() if v is not None})
    if not args.report:
        run(args.out, args.networks, args.arms, seeds, protocol, tuple(args.kinds), args.shard,
            args.init_stds)  # fmt: skip
    units = stored_units(args.out, args.networks, args.arms, seeds, protocol, args.init_stds)
    table = write_report(args.out, units, protocol.budgets)
    print(table)


if __name__ == "__main__":
    sys.exit(main())
