"""Per-epoch checkpoints of ``train_classifier``: a run killed (SIGKILL) in the middle of an epoch
and started again gives exactly the numbers of a run that was never stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import vbnn
from vbnn.classification.training import (
    ClassifierConfig,
    LearningRateSchedule,
    train_classifier,
)
from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.operators import Operator
from vbnn.networks.lenet import LeNet5, LeNetConfig
from vbnn.priors import ARDPrior, LogUniformPrior
from vbnn.priors.kl import DropoutGaussian, kl_divergence

SRC = Path(__file__).resolve().parents[1] / "src"
STEPS = 6  # 120 images, batch 20

# Trains the authors' protocol (BatchNorm, log alpha -5, linear schedule) for 3 epochs with the
# tracker every 2nd epoch; argv: checkpoint ("-" for none), result file, the training forward
# call at which to stop and wait to be killed (0: never).
CHILD = """
import sys, time
from pathlib import Path
import torch
from vbnn.classification.training import ClassifierConfig, PhaseTransitionTracker, train_classifier
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.operators import Operator
from vbnn.networks.lenet import LeNet5, LeNetConfig
from vbnn.priors import ARDPrior, LogUniformPrior

torch.set_num_threads(1)
checkpoint = None if sys.argv[1] == "-" else Path(sys.argv[1])
result, pause_at = Path(sys.argv[2]), int(sys.argv[3])
generator = torch.Generator().manual_seed(5)
images = torch.rand(120, 1, 28, 28, generator=generator)
labels = torch.randint(0, 10, (120,), generator=generator)
config = LeNetConfig(log_alpha_init=-5.0, batch_norm=True)
model = LeNet5(config, ModelGenerators.for_keys(0, [0], "init"))
settings = ClassifierConfig(epochs=3, batch_size=20, schedule="linear", eval_every=2)
tracker = PhaseTransitionTracker(images[:20], labels[:20], samples=2)
calls = 0

def pause(module, inputs):
    global calls
    if module.training:
        calls += 1
        if calls == pause_at:
            (result.parent / "paused").write_text("")
            time.sleep(600)

model.register_forward_pre_hook(pause)
train_classifier(model, LogUniformPrior(), images, labels, settings, callback=tracker,
                 progress=False, checkpoint=checkpoint)
torch.save({"state": model.state_dict(), "rows": tracker.rows, "calls": calls}, result)
"""


def run_child(script: Path, checkpoint: str, result: Path, pause_at: int = 0):
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(script), checkpoint, str(result), str(pause_at)]
    return subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> None:
    _, errors = process.communicate(timeout=300)
    assert process.returncode == 0, errors


@pytest.mark.slow
def test_sigkill_in_epoch_two_then_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    checkpoint = tmp_path / "run.checkpoint.pt"
    finish(run_child(script, "-", tmp_path / "uninterrupted.pt"))

    killed = run_child(script, str(checkpoint), tmp_path / "never.pt", pause_at=STEPS + 3)
    deadline = time.monotonic() + 300
    while not (tmp_path / "paused").exists():
        assert killed.poll() is None, killed.communicate()[1]
        assert time.monotonic() < deadline, "the child never reached epoch 2"
        time.sleep(0.1)
    os.kill(killed.pid, signal.SIGKILL)  # mid-epoch 2: epoch 1's checkpoint is on disk
    killed.communicate(timeout=60)  # also closes its pipe
    assert killed.returncode == -signal.SIGKILL
    assert torch.load(checkpoint, weights_only=True)["epoch"] == 1
    assert not (tmp_path / "never.pt").exists()

    finish(run_child(script, str(checkpoint), tmp_path / "resumed.pt"))
    whole = torch.load(tmp_path / "uninterrupted.pt", weights_only=True)
    resumed = torch.load(tmp_path / "resumed.pt", weights_only=True)
    assert resumed["calls"] == 2 * STEPS  # epochs 2 and 3 only: it resumed, not restarted
    assert whole["calls"] == 3 * STEPS
    assert whole["state"].keys() == resumed["state"].keys()
    for name, value in whole["state"].items():
        assert torch.equal(value, resumed["state"][name]), name
    assert [row["epoch"] for row in whole["rows"]] == [2, 3]  # every 2nd epoch and the last
    assert resumed["rows"] == whole["rows"]
    assert torch.load(checkpoint, weights_only=True)["epoch"] == 3


def test_a_checkpoint_of_other_settings_is_refused(tmp_path: Path) -> None:
    images, labels = torch.rand(40, 1, 28, 28), torch.randint(0, 10, (40,))
    checkpoint = tmp_path / "run.checkpoint.pt"
    model = LeNet5(LeNetConfig(), ModelGenerators([0]))
    train_classifier(model, LogUniformPrior(), images, labels,
                     ClassifierConfig(epochs=1, batch_size=20), progress=False,
                     checkpoint=checkpoint)  # fmt: skip
    other = ClassifierConfig(epochs=2, batch_size=10)
    with pytest.raises(ValueError, match=r"run\.checkpoint\.pt.*other settings"):
        train_classifier(model, LogUniformPrior(), images, labels, other, progress=False,
                         checkpoint=checkpoint)  # fmt: skip


def test_linear_schedule_is_the_authors_lr_linear() -> None:
    # lr_linear(e, 0, E, lr) = lr (E - e) / E for the 0-based epoch e, set at each epoch's start
    epochs = 200
    factors = [LearningRateSchedule.LINEAR.factor(e, epochs) for e in range(1, epochs + 1)]
    assert factors == [(epochs - e) / epochs for e in range(epochs)]
    assert LearningRateSchedule.CONSTANT.factor(7, epochs) == 1.0
    config = ClassifierConfig(epochs=10, eval_every=4)
    assert [e for e in range(1, 11) if config.evaluates_after(e)] == [4, 8, 10]


def test_batch_norm_keeps_the_models_of_a_stack_independent() -> None:
    # model 1 of a stack of 2 computes what the same model alone computes (BatchNorm statistics
    # per model and unit), in training mode (batch statistics) and after (running statistics)
    config = LeNetConfig(batch_norm=True)
    stack = LeNet5(config, ModelGenerators.for_keys(3, [0, 1], "init"))
    alone = LeNet5(config, ModelGenerators.for_keys(3, [1], "init"))
    images = torch.rand(8, 1, 28, 28)
    for training in (True, False):
        stack.train(training)
        alone.train(training)
        both = stack(images.expand(2, *images.shape), ForwardMode.MEAN)
        one = alone(images.unsqueeze(0), ForwardMode.MEAN)
        torch.testing.assert_close(both[1], one[0], rtol=1e-5, atol=1e-5)
        assert not torch.allclose(both[0], both[1])


class Float64Noise:
    """The same standard normal draws whatever dtype a layer asks for (drawn in float64)."""

    def __init__(self, generators: ModelGenerators) -> None:
        self.generators = generators

    def randn(self, *shape, dtype=torch.float32, device=None) -> torch.Tensor:
        return self.generators.randn(*shape, dtype=torch.float64).to(dtype)

    def get_state(self) -> list[torch.Tensor]:
        return self.generators.get_state()

    def set_state(self, state: list[torch.Tensor]) -> None:
        self.generators.set_state(state)


def test_lenet_gradients_in_float32_agree_with_float64() -> None:
    # the convolutions run channels-last (a speed choice): the float32 forward and gradients of
    # the variance LeNet-5 must stay those of the float64 computation up to float32 rounding
    images, labels = torch.rand(16, 1, 28, 28, dtype=torch.float64), torch.randint(0, 10, (16,))
    results = []
    for dtype in (torch.float32, torch.float64):
        model = LeNet5(LeNetConfig(), ModelGenerators.for_keys(0, [0], "init"), dtype=torch.float64)
        model.to(dtype)
        noise = Float64Noise(ModelGenerators.for_keys(0, [0], "train"))
        logits = model(images.to(dtype).unsqueeze(0), ForwardMode.LOCAL, noise)
        loss = (
            torch.nn.functional.cross_entropy(logits[0], labels)
            + vbnn.kl(model, LogUniformPrior())[0]
        )
        loss.backward()
        grads = [p.grad.double() for p in model.parameters()]
        results.append((logits.double(), grads))
    (logits32, grads32), (logits64, grads64) = results
    torch.testing.assert_close(logits32, logits64, rtol=1e-4, atol=1e-4)
    for low, high in zip(grads32, grads64, strict=True):
        scale = float(high.abs().max())
        torch.testing.assert_close(low, high, rtol=1e-3, atol=1e-4 * scale)


def test_conv_operator_equals_one_plain_convolution_per_model() -> None:
    # the stacked, channels-last convolution against torch's conv2d of each model alone
    operator = Operator(3, 4, kernel_size=3, padding=1)
    x = torch.randn(2, 5, 3, 7, 7, dtype=torch.float64)
    weight = torch.randn(2, 4, 3, 3, 3, dtype=torch.float64)
    bias = torch.randn(2, 4, dtype=torch.float64)
    out = operator.apply(x, weight, bias)
    for model in range(2):
        expected = torch.nn.functional.conv2d(x[model], weight[model], bias[model], padding=1)
        torch.testing.assert_close(out[model], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("prior", [LogUniformPrior(), ARDPrior()])
def test_a_shared_alpha_counts_once_per_weight_in_the_kl(prior) -> None:
    # a layer- or neuron-wise alpha is one value for many weights: the KL must equal the sum
    # over the materialised per-weight alphas, values and gradients
    mean = torch.randn(2, 30, 7, dtype=torch.float64)
    for shape in ((2, 1, 1), (2, 1, 7), (2, 30, 7)):
        shared = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        expanded = shared.detach().expand(mean.shape).clone().requires_grad_(True)
        kl, reference = (
            kl_divergence(DropoutGaussian(mean, shared), prior),
            kl_divergence(DropoutGaussian(mean, expanded), prior),
        )
        torch.testing.assert_close(kl, reference, rtol=1e-12, atol=0.0)
        kl.sum().backward()
        reference.sum().backward()
        shared_dims = tuple(i for i, n in enumerate(shape) if n == 1)
        summed = expanded.grad.sum(shared_dims, keepdim=True) if shared_dims else expanded.grad
        torch.testing.assert_close(shared.grad, summed, rtol=1e-12, atol=1e-12)
