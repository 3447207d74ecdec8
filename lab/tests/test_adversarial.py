"""Targeted iterative FGSM (Neklyudov et al. 2019 section 6.3): the step against its closed form on
a linear softmax model, the ensemble predictive against its members, and a tiny end-to-end run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from vbnn.cli import main
from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn_lab.adversarial.attack import (
    AttackConfig,
    Prediction,
    fast_gradient_sign_step,
    predictive,
    random_targets,
    targeted_attack,
)
from vbnn_lab.adversarial.models import Training, build, member

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def test_step_matches_the_closed_form_gradient_of_a_linear_softmax():
    # -d log softmax_t(W x + b) / dx = -(W_t - sum_c p_c W_c)
    linear = nn.Linear(5, 3).double()
    x = torch.rand(7, 5, dtype=torch.float64) * 0.8 + 0.1
    targets = torch.tensor([0, 1, 2, 0, 1, 2, 0])
    step = 0.05
    means = Prediction(ForwardMode.MEAN)
    out = fast_gradient_sign_step(linear, x, targets, step=step, prediction=means, noise=None)
    with torch.no_grad():
        p = torch.softmax(linear(x), -1)
        gradient = -(linear.weight[targets] - p @ linear.weight)
    torch.testing.assert_close(out, (x - step * gradient.sign()).clamp(0, 1))
    # the step lowers the loss of the target for a small enough step (first-order decrease)
    with torch.no_grad():
        before = -torch.log(p.gather(1, targets[:, None])).sum()
        after = -torch.log(torch.softmax(linear(out), -1).gather(1, targets[:, None])).sum()
    assert float(after) < float(before)


def test_clipping_keeps_pixels_in_the_unit_interval():
    linear = nn.Linear(4, 2)
    x = torch.tensor([[0.0, 1.0, 0.5, 0.999]])
    out = fast_gradient_sign_step(linear, x, torch.tensor([1]), step=0.5,
                                  prediction=Prediction(ForwardMode.MEAN), noise=None)  # fmt: skip
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0


def test_deep_ensemble_predictive_is_the_mean_of_its_members():
    stack = build(Training.DETERMINISTIC, 3, seed=1).eval()
    x = torch.rand(6, 1, 28, 28)
    means = Prediction(ForwardMode.MEAN)
    together = predictive(stack, x, means, None)
    alone = [predictive(member(stack, k), x, means, None) for k in range(3)]
    torch.testing.assert_close(together, sum(alone) / 3)
    logits = stack(x.expand(3, *x.shape), ForwardMode.MEAN)
    torch.testing.assert_close(member(stack, 2)(x[None], ForwardMode.MEAN)[0], logits[2])


def test_stochastic_predictive_averages_k_draws_of_weights():
    model = build(Training.VARIANCE, 1, seed=0).eval()
    x = torch.rand(4, 1, 28, 28)
    draws = ModelGenerators([5])
    k_draws = predictive(model, x, Prediction(ForwardMode.WEIGHTS, 3), draws)
    again = ModelGenerators([5])
    one_by_one = [predictive(model, x, Prediction(ForwardMode.WEIGHTS), again) for _ in range(3)]
    torch.testing.assert_close(k_draws, sum(one_by_one) / 3)
    assert not torch.allclose(one_by_one[0], one_by_one[1])  # the draws differ


def test_targets_differ_from_labels_and_cover_the_other_classes():
    labels = torch.arange(10).repeat(100)
    targets = random_targets(labels, 10, seed=3)
    assert bool((targets != labels).all())
    assert set(targets[labels == 4].tolist()) == set(range(10)) - {4}


def test_attack_trace_starts_at_the_clean_images_and_succeeds_on_a_linear_model():
    torch.manual_seed(0)
    linear = nn.Linear(8, 4)
    x = torch.rand(50, 8)
    targets = random_targets(linear(x).argmax(-1), 4, seed=0)
    trace = targeted_attack(linear, x, targets, AttackConfig(step=0.1, iterations=20),
                            Prediction(ForwardMode.MEAN))  # fmt: skip
    assert trace.success_rate.shape == (21,) and trace.success_rate[0] == 0.0
    assert trace.success_rate[-1] > 0.5


def test_tiny_run_writes_its_files(tmp_path: Path) -> None:
    data = Path(os.environ.get("VBNN_DATA_DIR", SHARED_DATA))
    if not (data / "mnist" / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST not found under {data}")
    out = tmp_path / "out"
    argv = ["reproduce", "adversarial", "--quick", "--dataset", "mnist", "--train-size", "200",
            "--epochs", "1", "--images", "8", "--iterations", "2", "--samples", "2",
            "--out", str(out), "--data-dir", str(data), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    frame = pd.read_csv(out / "attacks.csv")
    assert len(frame) == 5 * 3 and set(frame["iteration"]) == {0, 1, 2}
    assert frame["success_rate"].between(0, 1).all()
    assert (out / "attacks.png").stat().st_size > 0
    record = json.loads((out / "run.json").read_text())
    assert record["budget"]["training"]["train_size"] == 200
    assert main(argv) == 0  # the second run reuses the stored stacks
