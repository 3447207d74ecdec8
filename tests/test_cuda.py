"""The library on a CUDA device: every family gives the CPU's numbers there, draws from CUDA
streams with the right moments and keeps "batched == alone", and a classifier run resumes on the
GPU exactly. Skipped where torch sees no CUDA device (CI has none); run them on a GPU machine with
``pytest tests/test_cuda.py`` (``VBNN_TEST_DEVICE=cpu`` runs the same checks on the CPU, to
check the tests themselves)."""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
from test_family_contract import IDS, SHAPES, WITH_KL, assert_same_moments, inputs, make

from vbnn.classification.training import ClassifierConfig, train_classifier
from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.layers import FAMILIES
from vbnn.networks.lenet import LeNet5, LeNetConfig
from vbnn.priors.dropout import ARDPrior, LogUniformPrior, StudentTPrior
from vbnn.priors.gaussian import GaussianPrior

CUDA = torch.device(os.environ.get("VBNN_TEST_DEVICE", "cuda"))
# cuBLAS reads this when it starts: its deterministic workspace (for the resume test)
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
pytestmark = pytest.mark.skipif(
    CUDA.type == "cuda" and not torch.cuda.is_available(), reason="no CUDA device"
)


@pytest.mark.parametrize(("name", "conv"), SHAPES, ids=IDS)
def test_family_on_cuda_gives_the_cpu_numbers(name: str, conv: bool) -> None:
    """Same parameters, same (CPU) streams: every mode's output and the KL agree across devices
    (float64, so only summation order differs)."""
    layer, x = make(name, conv=conv), inputs(conv)
    on_gpu = make(name, conv=conv)
    on_gpu.load_state_dict(layer.state_dict())
    on_gpu.to(CUDA)
    for mode in ForwardMode:
        expected = layer(x, mode, ModelGenerators([7, 8, 9]))
        out = on_gpu(x.to(CUDA), mode, ModelGenerators([7, 8, 9]))
        assert out.device.type == CUDA.type
        torch.testing.assert_close(out.cpu(), expected)
    if name in WITH_KL:
        torch.testing.assert_close(
            on_gpu.kl(GaussianPrior(0.7)).cpu(), layer.kl(GaussianPrior(0.7))
        )


@pytest.mark.parametrize(("name", "conv"), SHAPES, ids=IDS)
def test_cuda_streams_draw_the_weight_samples_moments(name: str, conv: bool) -> None:
    """SAMPLE (LRT where it applies) from CUDA generators against explicit weight draws: means
    within 5 standard errors, variances within 5 standard errors of a variance."""
    layer = make(name, conv=conv).to(CUDA)
    x = inputs(conv, rows=2).to(CUDA)
    draws = 4_000
    generators = ModelGenerators([11, 12, 13], CUDA)
    with torch.no_grad():
        sampled = torch.stack([layer(x, ForwardMode.SAMPLE, generators) for _ in range(draws)])
        weights = torch.stack([layer(x, ForwardMode.WEIGHTS, generators) for _ in range(draws)])
    assert_same_moments(sampled, weights)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_model_draws_the_same_on_cuda_alone_or_in_a_stack(name: str) -> None:
    """Model 1 of a three-model stack on CUDA equals the same model as a one-model stack."""
    stack = make(name).to(CUDA)
    alone = make(name, generators=ModelGenerators([2])).to(CUDA)
    alone.load_state_dict({key: value[1:2] for key, value in stack.state_dict().items()})
    x = inputs().to(CUDA)
    for mode in ForwardMode:
        together = stack(x, mode, ModelGenerators([7, 8, 9], CUDA))[1]
        single = alone(x[1:2], mode, ModelGenerators([8], CUDA))[0]
        torch.testing.assert_close(single, together)


PRIORS = {
    "gaussian": lambda: GaussianPrior(0.7),
    "log-uniform": LogUniformPrior,
    "ard": ARDPrior,
    "student-t": lambda: StudentTPrior(3.0),  # one-sample KL: its noise is drawn on the CPU
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_prior_gives_the_cpu_kl_on_cuda(name: str) -> None:
    """Each prior a family accepts: the KL lands on the device and equals the CPU's."""
    layer = make(name)
    on_gpu = make(name)
    on_gpu.load_state_dict(layer.state_dict())
    on_gpu.to(CUDA)
    for label, prior in PRIORS.items():
        try:
            expected = layer.kl(prior())
        except (TypeError, NotImplementedError):
            continue  # a pair the family refuses on every device
        kl = on_gpu.kl(prior())
        assert kl.device.type == CUDA.type, label
        torch.testing.assert_close(kl.cpu(), expected, msg=label)


@pytest.fixture
def deterministic():
    """cuDNN and torch ops in their deterministic implementations (the default GPU kernels
    may sum in another order from run to run)."""
    settings = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = settings


def _lenet_run(checkpoint: Path | None, stop_after: int | None = None) -> dict:
    generator = torch.Generator().manual_seed(5)
    images = torch.rand(120, 1, 28, 28, generator=generator).to(CUDA)
    labels = torch.randint(0, 10, (120,), generator=generator).to(CUDA)
    config = LeNetConfig(families=("vd-layer",) * 4, log_alpha_init=-5.0, batch_norm=True)
    model = LeNet5(config, ModelGenerators.for_keys(0, [0], "init")).to(CUDA)
    settings = ClassifierConfig(epochs=3, batch_size=20, schedule="linear", eval_every=1)

    def interrupt(epoch: int, model) -> None:
        if epoch == stop_after:
            raise KeyboardInterrupt  # after epoch stop_after - 1's checkpoint, before its own

    with pytest.raises(KeyboardInterrupt) if stop_after else nullcontext():
        train_classifier(model, LogUniformPrior(), images, labels, settings, interrupt, False,
                         "", checkpoint)  # fmt: skip
    return model.state_dict()


def test_a_lenet_run_on_cuda_resumes_to_the_uninterrupted_numbers(
    tmp_path: Path, deterministic
) -> None:
    whole = _lenet_run(None)
    checkpoint = tmp_path / "run.checkpoint.pt"
    _lenet_run(checkpoint, stop_after=2)
    assert torch.load(checkpoint, weights_only=True)["epoch"] == 1
    resumed = _lenet_run(checkpoint)
    assert all(value.device.type == CUDA.type for value in resumed.values())
    for key, value in whole.items():
        assert torch.equal(value, resumed[key]), key
