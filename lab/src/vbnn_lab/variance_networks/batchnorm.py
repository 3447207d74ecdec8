"""Where mean propagation loses its accuracy in a LeNet-5 with BatchNorm after dense1.

The authors' protocol (``budget.PROTOCOLS``) normalises dense1's output with BatchNorm. Training
runs in sample mode, so BatchNorm's running variance is that of the *noisy* pre-activations,
Var_x[M x] + E_x[alpha (M^2) (x^2)] per unit (the LRT variance, Neklyudov et al. 2019 App. E), and
once log alpha is large it dwarfs the spread of the mean pre-activations M x. Mean propagation
(Neklyudov et al. 2019 eq. 3) divides M x by that running standard deviation and so shrinks the mean
signal towards BatchNorm's bias. The diagnostic separates the two effects by predicting with the
weight means three ways:

* ``running``: BatchNorm with its running statistics (what the MEAN mode does);
* ``own batch``: BatchNorm with the batch statistics of the mean pre-activations themselves (the
  test images as one batch, BatchNorm's learned scale and shift kept);
* ``no norm``: BatchNorm left out.

If the last two classify while the first does not, the means still carry the class and the fall
of mean propagation is a matter of scale, not of information moved into the variances.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import torch

from vbnn.core.contracts import ForwardMode
from vbnn.layers.modes import as_input, stack_size
from vbnn.metrics import accuracy
from vbnn.networks.lenet import LeNet5
from vbnn_lab.variance_networks.runs import NetworkRun, load_stored

DENSE1 = 2  # index of dense1 in LeNet5.layers


def mean_accuracy(model: LeNet5, images: torch.Tensor, labels: torch.Tensor) -> float:
    """Accuracy (%) of model 0 with every weight at its mean, in one pass over ``images``.

    Not ``training.accuracies``: it predicts in chunks of 1000 images, and a BatchNorm in train
    mode (the "own batch" variant) would then normalise each chunk by its own statistics."""
    with torch.no_grad():
        probabilities = model(as_input(model, images), ForwardMode.MEAN).softmax(-1)
    first = probabilities if stack_size(model) is None else probabilities[0]
    return 100.0 * float(accuracy(first, labels))


def batchnorm_diagnostic(model: LeNet5, images: torch.Tensor, labels: torch.Tensor
                         ) -> dict[str, float]:  # fmt: skip
    """Mean-propagation accuracy (%) of ``model`` (a LeNet-5 with BatchNorm after dense1, in eval
    mode) with running statistics, with the mean pre-activations' own batch statistics and with
    no BatchNorm, and the scales behind them: medians over dense1's units of the standard deviation
    over ``images`` of the mean pre-activation M x, of BatchNorm's running standard deviation, and
    of their ratio.

    Raises:
        ValueError: the model has no BatchNorm.
    """
    if model.norm is None:
        raise ValueError("batchnorm_diagnostic: the model has no BatchNorm after dense1")
    own_batch, no_norm = copy.deepcopy(model), copy.deepcopy(model)
    own_batch.norm.train()  # batch statistics; the running ones are updated on the copy only
    no_norm.norm = None
    with torch.no_grad():
        hidden = model.input_of(DENSE1, as_input(model, images), ForwardMode.MEAN)
        spread = model.layers[DENSE1](hidden, ForwardMode.MEAN).flatten(0, -2).std(0)
    running = (model.norm.running_var + model.norm.eps).sqrt()
    return {
        "running": mean_accuracy(model, images, labels),
        "own batch": mean_accuracy(own_batch, images, labels),
        "no norm": mean_accuracy(no_norm, images, labels),
        "mean pre-activation std": float(spread.median()),
        "running std": float(running.median()),
        "ratio": float((spread / running).median()),
    }


def diagnose(runs: list[NetworkRun], test_images: torch.Tensor, test_labels: torch.Tensor,
             out: Path) -> pd.DataFrame:  # fmt: skip
    """The diagnostic for the stored network of each of ``runs``, one row each."""
    rows = []
    for run in runs:
        model = load_stored(run, out)
        rows.append({"network": run.name, **batchnorm_diagnostic(model, test_images, test_labels)})
    return pd.DataFrame(rows)
