"""Does a zero-mean dense1 in LeNet-5 learn after softplus, ReLU or |.|?
(reproductions/variance-networks/README.md)

Trains LeNet-5 with dense1 a zero-mean variance layer on the first IMAGES training images of
MNIST and prints one-sample, ensemble (K = 10) and mean-propagation accuracy on 1000 test images.

    OMP_NUM_THREADS=1 VBNN_DATA_DIR=../shared/data python benchmarks/zero_mean_activation.py \\
        softplus relu abs --epochs 4 --images 5000
"""

from __future__ import annotations

import argparse
import time

from vbnn.classification.training import ClassifierConfig, accuracies, train_classifier
from vbnn.core.randomness import ModelGenerators
from vbnn.data.mnist import load_images
from vbnn.networks.lenet import LeNet5, LeNetConfig
from vbnn.priors.log_uniform import LogUniformPrior

PREDICTIONS = ("sample", "ensemble", "deterministic")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("activations", nargs="+", choices=["softplus", "relu", "abs", "tanh"])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--images", type=int, default=5000)
    args = parser.parse_args()
    train_x, train_y = load_images("mnist", "train", None)
    test_x, test_y = load_images("mnist", "test", None)
    train_x, train_y = train_x[: args.images], train_y[: args.images]
    families = ("point", "point", "zero-mean", "point")
    for activation in args.activations:
        model = LeNet5(LeNetConfig(families, activation), ModelGenerators.for_keys(0, [0], "init"))
        began = time.perf_counter()
        settings = ClassifierConfig(epochs=args.epochs, batch_size=100, seed=0)
        train_classifier(model, LogUniformPrior(), train_x, train_y, settings, progress=False)
        model.eval()
        scores = accuracies(model, test_x[:1000], test_y[:1000], 10, 0, PREDICTIONS)
        print(activation, {k: round(v, 1) for k, v in scores.items()},
              f"{time.perf_counter() - began:.0f} s")  # fmt: skip


if __name__ == "__main__":
    main()
