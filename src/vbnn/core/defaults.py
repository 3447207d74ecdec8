"""vbnn's defaults, each defined once: the value, one line on why, and where it was measured.

A setting that two entry points share takes its default from here, so the two cannot drift
apart; where two entry points train in different regimes (thousands of minibatch steps on a
network, a few hundred full-batch steps on a small table) they are two names. The measurements
behind each value are in ``benchmarks/README.md`` ("Where the defaults come from").
"""

from __future__ import annotations

# The Gaussian prior N(0, 1) of Trippe & Turner 2017 and Farquhar et al. 2020 on every weight;
# a fan-in-scaled prior did worse on converted networks (benchmarks/prior_choice.py).
PRIOR_STD = 1.0

# Initial posterior std of every family layer and the UCI engine's VI (Trippe & Turner 2017);
# 1e-4 to 3e-3 are tied on validation images, wider costs NLL (benchmarks/mf_init_std.py).
INIT_STD = 1e-4
# The estimators' initial std: their few hundred full-batch steps cannot widen 1e-4
# (benchmarks/estimator_defaults.py).
ESTIMATOR_INIT_STD = 0.01
# GD's fixed std where no tuned value applies: inside the tuned range 0.003-0.05.
GD_POSTERIOR_STD = 0.01

# Full-batch Adam steps of the UCI engine, and early stopping's budget (Trippe & Turner 2017).
UCI_ITERATIONS = 5000
EARLY_STOPPING_ITERATIONS = 2000
# BayesianRegressor and `vbnn fit`: the length its other defaults were measured at
# (benchmarks/estimator_defaults.py).
ESTIMATOR_ITERATIONS = 2000

# Minibatch training of a user's network (vbnn.train, compare on a network, ClassifierConfig).
EPOCHS = 20
BATCH_SIZE = 128
LEARNING_RATE = 1e-3

# IVON's step size alpha, the bound r on each preconditioned step and the initial Hessian h0:
# the least worst-case regret on validation images of compare's four cases, for runs of a few
# hundred steps (benchmarks/ivon_step_size.py, benchmarks/ivon_hess_init.py).
IVON_LEARNING_RATE = 0.7
IVON_CLIP_RADIUS = 0.005
IVON_HESS_INIT = 1.0
# IVON.for_attention(): transformers' query and key gradients start thousands of times smaller
# than a CNN's, so the step below the bound is 7 times the defaults' while the largest step stays
# theirs (0.0035); chosen on validation sequences of a tiny BERT (benchmarks/ivon_attention.py).
IVON_ATTENTION_LEARNING_RATE = 5.0
IVON_ATTENTION_CLIP_RADIUS = 0.0007

# compare's maximum-likelihood entries stop after 3 epochs without a lower NLL on 10 % of the
# training examples: a convention (a point network trained as a user would), not measured.
PATIENCE = 3
VALIDATION_FRACTION = 0.1

# BayesianClassifier and compare on a classification table: a few hundred steps of a few hundred
# rows.
TABLE_EPOCHS = 100
TABLE_LEARNING_RATE = 0.01
