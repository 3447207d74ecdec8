"""Contracts of vbnn: read this module first.

Every tensor that belongs to a model carries a leading *model dimension* ``M``: a stack of
independent networks (the 20 splits of a UCI data set, seeds, hyper-parameter candidates) is
one set of tensors, trained by batched matrix products. A single network is ``M = 1``.

Shapes used throughout:
    M: number of independent models in the stack.
    N: number of examples.
    I, O: input and output width of a layer.

The pieces:
    * :class:`ForwardMode` - how a variational layer maps inputs to outputs.
    * :class:`ParameterRole` - what a layer's parameter holds, for per-role learning rates.
    * :class:`Prior` - a prior over a layer's weights; its KLs are the table of ``priors.kl``.
    * :class:`Activation` - the hidden non-linearities.
    * :class:`SplitResult` - the metrics of one split of a data set, as the stores keep them.

The family contract every layer obeys is the ``VariationalLayer`` shell in ``layers.shell``; the
noise contract, ``NoiseSource``, is in ``core.randomness``. The settings of a UCI-engine run (one
config per algorithm) and the record of all its splits are in ``regression.runs``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol, runtime_checkable

import torch


class ForwardMode(str, Enum):
    """How the variational layers of a network produce their output in one forward pass.

    LOCAL: a fresh draw per example. Families with Gaussian, factorised weights use the local
        reparameterization trick (Kingma et al. 2015): the pre-activation of every example is drawn
        from its exact Gaussian marginal. Families without it (full covariance) draw one weight
        sample per model, shared across the examples. Dense layers train in this mode.
    WEIGHTS: one weight sample per model, shared by all examples: the pass is one function f ~ q.
    MEAN: weights replaced by their posterior means (deterministic; mean propagation, Neklyudov
        et al. 2019 eq. 3).
    ZERO_MEAN: WEIGHTS with each Gaussian N(mu, var) replaced by N(0, var) (Neklyudov et al. 2019,
        Theorem 1); families whose weights are not Gaussian (point, binary dropout) sample as in
        WEIGHTS.

    TRAINING: each layer's own training estimator (``VariationalLayer.training_mode``): LOCAL
        for dense layers, WEIGHTS for (transposed) convolutions, where one weight draw a batch
        costs one convolution against the LRT's two and reached a given test NLL sooner
        (``docs/families.md``). Training uses this mode; the objectives (``vbnn.elbo``) draw in
        it.

    An ensemble (test-time averaging over K passes, Neklyudov et al. 2019 eq. 2) is not a mode:
    it is K passes in WEIGHTS or ZERO_MEAN mode (``vbnn.sample``).
    """

    LOCAL = "local"
    WEIGHTS = "weights"
    MEAN = "mean"
    ZERO_MEAN = "zero-mean"
    TRAINING = "training"


class ParameterRole(str, Enum):
    """What a parameter of a family layer holds, for the optimizer (``VariationalLayer.roles``).

    Adam moves every coordinate by about its learning rate whatever its gradient, so parameters
    whose scale or gradient noise differs from the means' may need a rate of their own
    (``training.optimizer.learning_rate_groups``).

    WEIGHTS: every parameter a family does not name (standard deviations, log scales) and every
        parameter outside the family layers.
    MEAN: the parameters of the mean network, the weights MEAN mode uses (``means()``): weight
        and bias means, point weights and point biases.
    CORRELATION: entries of a covariance factor that hold correlations between weights (FC's
        strictly lower Cholesky entries, the low-rank factor).
    LOG_ALPHA: log alpha of variational dropout (the noise-to-signal ratio of every weight).
    """

    WEIGHTS = "weights"
    MEAN = "mean"
    CORRELATION = "correlation"
    LOG_ALPHA = "log-alpha"


class Activation(str, Enum):
    TANH = "tanh"
    RELU = "relu"
    LEAKY_RELU = "leaky_relu"
    IDENTITY = "identity"


@runtime_checkable
class Prior(Protocol):
    """A prior over the weights of one layer (factorised over its entries).

    Its KL to each posterior form is an entry of the table in ``priors.kl``
    (``vbnn.register_kl(DiagonalGaussian, MyPrior)``), chosen by the pair of types as
    ``torch.distributions`` chooses a KL; the layers never ask what type a prior is.
    ``scale_invariant``: KL(theta q0 || prior) of a scaled fixed q0 does not depend on theta
    (log-uniform, ARD).
    """

    scale_invariant: bool

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """log p(value), summed over all but the leading model dim -> (M,)."""
        ...


@dataclass(frozen=True)
class SplitResult:
    """Metrics of one split, in the target's original units."""

    split: int
    test_log_likelihood: float
    test_rmse: float
    train_seconds: float
    stopped_iteration: int | None = None  # ES: the iteration whose weights were kept
