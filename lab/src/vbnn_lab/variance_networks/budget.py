"""Budgets, training protocols and layer settings of the variance-networks reproduction
(Neklyudov et al. 2018, Neklyudov et al. 2019)."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from enum import Enum

from vbnn.classification.training import LearningRateSchedule

VARIANCE = "zero-mean"  # the "var" layers of appendix C
TABLE1 = {"zero-mean": "zero-mean", "layer": "vd-layer", "neuron": "vd-neuron",
          "weight": "vd-weight", "additive": "additive"}  # fmt: skip
# Non-linearity of each Table 1 row (Neklyudov et al. 2019 does not state it). Softplus as in
# Neklyudov et al. 2018's kappa study,
# except the zero-mean row: Neklyudov et al. 2018 section 6 trains its zero-centred dense layer
# "from scratch" with
# |.| instead of ReLU. After softplus a zero-mean layer carries almost no signal, as
# E softplus(s eps) = log 2 + s^2 / 8 + ... hardly depends on s, and the network collapses to the
# class prior (measured: 11.35 % after 5 epochs of full MNIST; reproductions/variance-networks/).
TABLE1_ACTIVATION = {"zero-mean": "abs"}
TANH = {"det-det-det-det": ("point",) * 4,
        "det-var-det-det": ("point", VARIANCE, "point", "point"),
        "det-det-var-det": ("point", "point", VARIANCE, "point"),
        "det-var-var-det": ("point", VARIANCE, VARIANCE, "point")}  # fmt: skip


class TrainingProtocol(str, Enum):
    """Whose description of the LeNet-5 training to follow (``PROTOCOLS``)."""

    TEXT = "text"  # the papers' text (Neklyudov et al. 2018, 2019, section 6)
    AUTHORS = "authors"  # the authors' public code, da-molchanov/variance-networks (PyTorch)
    # an ablation, not a description: the authors' protocol with its BatchNorm removed, to test
    # whether BatchNorm is what keeps Table 1's dense1-only networks from collapsing
    AUTHORS_WITHOUT_BATCHNORM = "authors-without-batchnorm"


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
    protocol: str = "text"  # a TrainingProtocol value
    eval_every: int = 1  # tracker and kappa after every eval_every-th epoch and the last

    def __post_init__(self) -> None:
        object.__setattr__(self, "protocol", TrainingProtocol(self.protocol).value)
        if self.epochs < 1 or self.eval_every < 1:
            raise ValueError(
                f"Budget {self.name}: epochs and eval_every must be >= 1, got {self.epochs} and "
                f"{self.eval_every}"
            )


BUDGETS = {
    "tiny": Budget("tiny", 64, 32, 1, 2, 32, 16, 5, 10, 32),
    "quick": Budget("quick", 5000, 1000, 4, 10, 500, 500, 1500, 100, 1000),
    # full: all 60000 training images, 200 epochs as the papers (Neklyudov et al. 2019 Fig. 3) and
    # the authors'
    # code; per-epoch cost: ``--time-epoch`` and reproductions/variance-networks/README.md
    # (the tracker, 22 passes over 2000 test images, costs ~1/4 of an epoch: every 5th epoch)
    "full": Budget("full", 60000, 10000, 200, 20, 2000, 1000, 3000, 250, 2000, eval_every=5),
}


@dataclass(frozen=True)
class ProtocolSettings:
    """What a protocol fixes: batch size, step-size schedule (Adam, 1e-3 at the start in both),
    initial log alpha of the variational-dropout layers (None: the family default, -4), and
    BatchNorm after dense1."""

    batch_size: int
    schedule: LearningRateSchedule
    log_alpha_init: float | None
    batch_norm: bool


PROTOCOLS = {
    TrainingProtocol.TEXT: ProtocolSettings(100, LearningRateSchedule.CONSTANT, None, False),
    TrainingProtocol.AUTHORS: ProtocolSettings(200, LearningRateSchedule.LINEAR, -5.0, True),
    TrainingProtocol.AUTHORS_WITHOUT_BATCHNORM: ProtocolSettings(
        200, LearningRateSchedule.LINEAR, -5.0, False
    ),
}
PROTOCOL_TABLE = """\
protocols (--protocol), every difference:
  setting                 text (the papers' text)      authors (da-molchanov/variance-networks)
  batch size              100                          200
  Adam step size          1e-3, constant               1e-3 (E - e + 1) / E in epoch e of E
                                                       (linear decay towards 0, per epoch)
  initial log alpha       -4 (vd-* layers)             -5 (vd-* layers)
  BatchNorm               none                         after dense1, before its non-linearity
  authors-without-batchnorm: an ablation, the authors' protocol with no BatchNorm
  all: 200 epochs (full), LeNet-5-Caffe, weight means N(0, 1 / fan_in), log-uniform prior
  (Molchanov et al. KL approximation), one LRT sample per step, KL weight 1
"""


def resolve_budget(args: argparse.Namespace) -> Budget:
    """The budget named by ``--size`` / ``--quick`` (default full), with ``--epochs`` and
    ``--log-alpha-lr`` applied."""
    budget = BUDGETS[args.size or ("quick" if args.quick else "full")]
    if args.epochs is not None:
        budget = Budget(**{**asdict(budget), "epochs": args.epochs})
    if getattr(args, "log_alpha_lr", None) is not None:
        budget = Budget(**{**asdict(budget), "log_alpha_learning_rate": args.log_alpha_lr})
    if getattr(args, "protocol", None) is not None:
        budget = Budget(**{**asdict(budget), "protocol": TrainingProtocol(args.protocol).value})
    if getattr(args, "eval_every", None) is not None:
        budget = Budget(**{**asdict(budget), "eval_every": args.eval_every})
    return budget
