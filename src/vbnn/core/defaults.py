"""vbnn's defaults, each defined once with the reason for its value.

A setting that two entry points share takes its default from here, so the two cannot drift
apart. Where two entry points train in different regimes (thousands of minibatch steps on a
network against a few hundred full-batch steps on a small table), they are two settings with two
names, each with its own reason, rather than one name with two values.

The prior:

- ``PRIOR_STD`` = 1.0: the Gaussian families' prior N(0, 1) on every weight and bias
  (``VariationalLayer.default_prior``, which ``vbnn.kl`` uses when given none), the UCI engine's
  MAP, SGLD and VI, ``BayesianRegressor``, the reference posteriors and the diagnostics that
  measure a posterior against its prior: the unit normal prior of Trippe & Turner 2017
  (appendix A) and Farquhar, Smith & Gal 2020. On converted networks a fan-in-scaled
  N(0, 1 / fan_in) per layer, the scale of the weights' initialisation, scored a worse
  validation NLL on all three networks of the time-to-quality benchmark at every budget (2.8 to
  5 times on an MLP and LeNet-5, 4 to 14 % on a residual CNN; ``benchmarks/prior_choice.py``,
  table in ``benchmarks/README.md``).

Initial posterior std (the marginal std of every weight before training):

- ``INIT_STD`` = 1e-4: every family layer (``init_std``; GD's fixed ``std``), ``vbnn.convert``,
  the networks of ``vbnn.networks`` and the UCI engine's VI (``regression.runs.VIConfig``). Trippe &
  Turner 2017 (appendix A) initialise sigma to 1e-4. On validation images of ``vbnn compare``'s
  four cases (``mf`` trained by Adam at 3e-3 for 110 to 440 steps, 2,700 training images, 300
  held out, seeds 0-2; ``benchmarks/mf_init_std.py``) the validation NLL against 1e-4's, paired
  over the 12 (case, seed) runs, is -0.003 +- 0.005 nats at 1e-3, -0.006 +- 0.004 at 3e-3,
  +0.013 +- 0.010 at 0.01 and +0.055 +- 0.020 at 0.03 (mean +- standard error): 1e-4 to 3e-3
  are tied and a wider start costs NLL, so 1e-4 stays, though a posterior so narrow has almost
  no mutual information (below 1e-5 nats an image at 1e-4, 0.04 to 0.26 at 0.03).
- ``ESTIMATOR_INIT_STD`` = 0.01: the scikit-learn estimators (``BayesianRegressor``,
  ``BayesianClassifier``). They train for a few hundred to a few thousand full-batch steps, and
  Adam moves a log std by at most about one learning rate a step: from 1e-4, 100 epochs on a few
  hundred rows leave a near-point posterior (mutual information below 0.001 nats). With ReLU
  and one hidden layer of 50, 0.01 scores a UCI validation log-likelihood (boston, yacht,
  energy, concrete, splits 0-2, 20 % of each split's training rows held out) tied with 1e-3
  (1e-3 - 0.01: +0.016 +- 0.032 nats) and ahead of tanh with 1e-3 (-0.053 +- 0.055) and of two
  hidden layers (-0.208 +- 0.053) (``benchmarks/estimator_defaults.py``).
- ``GD_POSTERIOR_STD`` = 0.01: the fixed std the UCI engine gives GD where no tuned value
  applies; at ``INIT_STD`` GD is a MAP fit that overfits, and tuned GD stds lie in 0.003-0.05.

Training length and step:

- ``UCI_ITERATIONS`` = 5000: full-batch Adam steps of the UCI engine (Trippe & Turner 2017,
  appendix A); early-stopped maximum likelihood stops within ``EARLY_STOPPING_ITERATIONS`` = 2000.
- ``ESTIMATOR_ITERATIONS`` = 2000: ``BayesianRegressor`` and ``vbnn fit``, where a user waits for
  one network on one table; the estimator's other defaults were measured at this length
  (``benchmarks/estimator_defaults.py``).
- ``EPOCHS`` = 20, ``BATCH_SIZE`` = 128, ``LEARNING_RATE`` = 1e-3: minibatch training of a user's
  network (``vbnn.train``, ``vbnn.compare`` on a network, ``ClassifierConfig``).
- ``IVON_LEARNING_RATE`` = 0.7, ``IVON_CLIP_RADIUS`` = 0.005, ``IVON_HESS_INIT`` = 1.0:
  ``optimizer="ivon"`` (``vbnn.IVON``): the step size alpha, the bound r of every preconditioned
  step (no mean moves more than alpha (h0 + delta) r, 0.0035, a step) and ivon-opt's initial
  Hessian h0. Every std starts at sigma_0 = 1 / sqrt(N (h0 + 1 / N)) and, with beta2 = 0.99999,
  stays near it for the first thousands of steps, so h0 sets the posterior's width in a short
  run: 0.019 on 2,700 examples with h0 = 1.0, 0.061 with the paper's image-classification value
  0.1 (chosen there for N of 50,000 and more). All three were chosen on validation images of
  ``vbnn compare``'s four cases (the CNN of its example at 5 and 20 epochs, the residual CNN on
  Fashion-MNIST, the MLP 784-400-400-10 on MNIST; 2,700 training images, 300 held out, median of
  3 seeds; ``benchmarks/ivon_step_size.py``) as the setting of least worst-case regret
  (validation NLL above the case's best setting of the grid); its NLL against the unbounded
  step 0.3 that it replaced, paired by (case, seed) over the 12 runs, is -0.055 +- 0.019 nats
  (mean +- standard error). Validation NLL:

  | alpha, r (h0 = 1) | cnn-5 | cnn-20 | resnet | mlp | worst regret |
  |---|---|---|---|---|---|
  | 0.1, none | 1.122 | 0.624 | 0.580 | 0.845 | 0.492 |
  | 0.3, none | 0.729 | 0.500 | 0.677 | 0.515 | 0.136 |
  | 0.5, none | 0.710 | 0.485 | 0.973 | 0.481 | 0.431 |
  | 0.5, 0.01 | 0.731 | 0.462 | 0.676 | 0.477 | 0.134 |
  | 0.7, 0.003 | 0.706 | 0.472 | 0.618 | 0.482 | 0.076 |
  | 0.7, 0.005 | 0.673 | 0.489 | 0.580 | 0.489 | 0.043 |
  | 1.0, 0.003 | 0.657 | 0.488 | 0.610 | 0.514 | 0.069 |
  | 1.0, none | 0.775 | 0.558 | 1.720 | 0.496 | 1.179 |

  Unbounded, the residual CNN wants alpha 0.1 (1.5 to 1.7 at alpha 1) and the plain networks 0.5
  to 1; the bound lets the larger step through on the plain networks and keeps the residual CNN
  within 0.04 nats of its best. The grid holds 32 settings of alpha in 0.1 to 3, r in 0.001 to
  0.03 or none, h0 in {0.3, 1, 3} and beta2 in {0.99, 0.999, 0.99999}; a choice among so many on
  12 runs flatters the winner by about the seeds' spread, and its neighbours (alpha 0.5 to 1 at r
  0.003 to 0.005) are -0.03 to -0.05 nats against 0.3 too. beta2 0.999 is tied with 0.99999
  (+0.019 +- 0.018) and 0.99 is worse (+0.249 +- 0.077): a faster Hessian average widens the stds
  of the many weights of little curvature, so 0.99999 (Shen et al.'s) stays. At the chosen step
  and bound h0 = 1.0 is ahead of 0.3 (+0.047 +- 0.022) and 3.0 (+0.053 +- 0.026); unbounded at
  alpha 0.3 it was tied with 3.0 (-0.011 +- 0.010), and at alpha 0.1 h0 = 0.1 scored 2.272 and
  0.762 after 5 and 20 epochs, the weight noise drowning the signal
  (``benchmarks/ivon_hess_init.py``). The settings suit runs of a few hundred steps, ``vbnn
  compare``'s and ``vbnn.train``'s 20 epochs of a few thousand examples; for much longer ones the
  paper's alpha 0.1 without a bound may be the better start (on the time-to-quality benchmark's
  LeNet-5, about 2,100 to 2,300 steps of 10,000 images, these defaults end behind the paper's step
  0.1 with h0 0.1, test NLL 0.065 against 0.055, while on its residual CNN they end ahead, 0.332
  against 0.375; the test numbers are reported, not used to choose: ``benchmarks/README.md``).
- ``IVON_ATTENTION_LEARNING_RATE`` = 5.0, ``IVON_ATTENTION_CLIP_RADIUS`` = 0.0007:
  ``vbnn.IVON.for_attention()``, IVON on attention networks (transformers): their query and key
  weights can start with gradients thousands of times smaller than a CNN's, and a step of
  alpha g (h stays near h0) leaves them in place, so the step is 7 times the defaults' while the
  largest, alpha (h0 + delta) r, stays theirs (0.0035); chosen on validation sequences of a tiny
  BERT (``benchmarks/ivon_attention.py``; ``benchmarks/README.md`` has the numbers).
- ``PATIENCE`` = 3, ``VALIDATION_FRACTION`` = 0.1: ``vbnn compare`` on a network stops its
  maximum-likelihood entries (``point``, the deep ensemble's members, ``laplace``'s network)
  after 3 epochs without a lower NLL on 10 % of the training examples held out, keeping the best
  epoch's weights: a point network trained as a user would, which the NLL of a network trained
  by maximum likelihood for all ``EPOCHS`` does not represent. The values are a convention (a
  tenth held out, patience a sixth of the default 20 epochs), not chosen on data.
- ``TABLE_EPOCHS`` = 100, ``TABLE_LEARNING_RATE`` = 0.01: ``BayesianClassifier`` and ``vbnn
  compare`` on a classification table, where 100 epochs of a few hundred rows are a few hundred
  steps.
"""

from __future__ import annotations

PRIOR_STD = 1.0

INIT_STD = 1e-4
ESTIMATOR_INIT_STD = 0.01
GD_POSTERIOR_STD = 0.01

UCI_ITERATIONS = 5000
EARLY_STOPPING_ITERATIONS = 2000
ESTIMATOR_ITERATIONS = 2000

EPOCHS = 20
BATCH_SIZE = 128
LEARNING_RATE = 1e-3

IVON_LEARNING_RATE = 0.7
IVON_CLIP_RADIUS = 0.005
IVON_HESS_INIT = 1.0
IVON_ATTENTION_LEARNING_RATE = 5.0
IVON_ATTENTION_CLIP_RADIUS = 0.0007

PATIENCE = 3
VALIDATION_FRACTION = 0.1

TABLE_EPOCHS = 100
TABLE_LEARNING_RATE = 0.01
