"""Budgets and layer settings of the variance-networks reproduction (002, 003)."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass

VARIANCE = "zero-mean"  # the "var" layers of appendix C
TABLE1 = {"zero-mean": "zero-mean", "layer": "vd-layer", "neuron": "vd-neuron",
          "weight": "vd-weight", "additive": "additive"}  # fmt: skip
# Non-linearity of each Table 1 row (003 does not state it). Softplus as in 002's kappa study,
# except the zero-mean row: 002 section 6 trains its zero-centred dense layer "from scratch" with
# |.| instead of ReLU. After softplus a zero-mean layer carries almost no signal, as
# E softplus(s eps) = log 2 + s^2 / 8 + ... hardly depends on s, and the network collapses to the
# class prior (measured: 11.35 % after 5 epochs of full MNIST; reproductions/variance-networks/).
TABLE1_ACTIVATION = {"zero-mean": "abs"}
TANH = {"det-det-det-det": ("deterministic",) * 4,
        "det-var-det-det": ("deterministic", VARIANCE, "deterministic", "deterministic"),
        "det-det-var-det": ("deterministic", "deterministic", VARIANCE, "deterministic"),
        "det-var-var-det": ("deterministic", VARIANCE, VARIANCE, "deterministic")}  # fmt: skip


@dataclass(frozen=True)
class Budget:
    """Sizes of one reproduction run (train/test examples are the first ones of each set)."""

    name: str
    train_size: int
    test_size: int
    epochs: int
    samples: int  # K of the ensembles (the paper: 20)
    track_size: int  # test examples of the per-epoch phase-transition tracking
    kappa_size: int  # training examples summed over in kappa
    toy_steps: int
    toy_per_class: int
    study_size: int  # test examples of the sparse-ensemble and pruning curves
    log_alpha_learning_rate: float | None = None


BUDGETS = {
    "tiny": Budget("tiny", 64, 32, 1, 2, 32, 16, 5, 10, 32),
    "quick": Budget("quick", 5000, 1000, 4, 10, 500, 500, 1500, 100, 1000),
    # full: all 60000 training images, 20 epochs (the papers train ~200): 16-40 s per epoch per
    # run at OMP_NUM_THREADS=1 (the 5-epoch run's ``epoch_seconds``), 11 runs
    # (reproductions/variance-networks/README.md)
    "full": Budget("full", 60000, 10000, 20, 20, 2000, 1000, 3000, 250, 2000),
}


def resolve_budget(args: argparse.Namespace) -> Budget:
    budget = BUDGETS[args.size or ("quick" if args.quick else "full")]
    if args.epochs is not None:
        budget = Budget(**{**asdict(budget), "epochs": args.epochs})
    if getattr(args, "log_alpha_lr", None) is not None:
        budget = Budget(**{**asdict(budget), "log_alpha_learning_rate": args.log_alpha_lr})
    return budget
