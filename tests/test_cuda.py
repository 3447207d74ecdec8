"""The library on a CUDA device: every family gives the CPU's numbers there, draws from CUDA
streams with the right moments and keeps "batched == alone", and a classifier run resumes on the
GPU exactly. Skipped where torch sees no CUDA device (CI has none); run them on a GPU machine with
``pytest tests/test_cuda.py`` (``VBNN_TEST_DEVICE=cpu`` runs the same checks on the CPU, to
check the tests themselves)."""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from test_family_contract import IDS, SHAPES, WITH_KL, assert_same_moments, inputs, make

from vbnn.classification.training import ClassifierConfig, train_classifier
from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.data.embedded import load_diabetes_splits
from vbnn.data.splits import stack_splits
from vbnn.diagnostics.layer_pruning import pruned_units_per_layer
from vbnn.layers import FAMILIES
from vbnn.networks.lenet import LeNet5, LeNetConfig
from vbnn.priors import ARDPrior, LogUniformPrior, StudentTPrior
from vbnn.priors.gaussian import GaussianPrior
from vbnn.regression.engine import run_splits, train_stack
from vbnn.regression.estimator import BayesianRegressor
from vbnn.regression.methods import method_config, taken_by
from vbnn.regression.runs import ModelValues
from vbnn.regression.tuning import TuningConfig, tune

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
        sampled = torch.stack([layer(x, ForwardMode.LOCAL, generators) for _ in range(draws)])
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
        train_classifier(model, LogUniformPrior(), images, labels, settings, callback=interrupt,
                         progress=False, checkpoint=checkpoint)  # fmt: skip
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


@pytest.mark.parametrize(
    "settings",
    [
        {"method": "es", "iterations": 60, "eval_every": 5},
        {"method": "mf"},
        {"method": "gd", "posterior_std": 0.05},
        {"method": "fc", "correlation_learning_rate": 1e-3},
        {"method": "sgld", "batch_size": 32, "burn_in": 20, "thinning": 10},
    ],
    ids=lambda settings: settings["method"],
)
def test_uci_runs_on_cuda_give_the_cpu_metrics(settings: dict) -> None:
    """The config's ``device``: a stack of two splits trained on CUDA (data, model, per-model
    values and noise moved there; the streams stay on the CPU) ends at the CPU run's test
    metrics, in float64 where only summation order differs."""
    dataset = load_diabetes_splits(seed=0)
    settings = dict(settings)
    method = settings.pop("method")
    base = {"iterations": 40, "test_samples": 20, "dtype": "float64", "hidden": (8,), **settings}
    on_cpu = run_splits(dataset, [0, 1], method_config(method, **taken_by(method, base)))
    on_cuda = run_splits(
        dataset, [0, 1], method_config(method, **taken_by(method, base), device=str(CUDA))
    )
    for cpu, cuda in zip(on_cpu.splits, on_cuda.splits, strict=True):
        assert cuda.test_log_likelihood == pytest.approx(cpu.test_log_likelihood, rel=1e-6)
        assert cuda.test_rmse == pytest.approx(cpu.test_rmse, rel=1e-6)
        assert cuda.stopped_iteration == cpu.stopped_iteration


def test_a_tuning_stack_on_cuda_scores_its_candidates_as_on_the_cpu() -> None:
    """Per-model prior stds (the tuner's candidates) travel to the device with the stack."""
    data = stack_splits(load_diabetes_splits(seed=0), [0, 0, 0], torch.float64)
    prior_std = torch.tensor([0.1, 1.0, 10.0], dtype=torch.float64)
    config = method_config("mf", iterations=30, test_samples=10, dtype="float64", hidden=(8,))
    cpu = train_stack(config, data, values=ModelValues(prior_std=prior_std))
    cuda = train_stack(
        replace(config, device=str(CUDA)), data, values=ModelValues(prior_std=prior_std)
    )
    assert cuda.metrics.log_likelihood.device.type == "cpu"
    torch.testing.assert_close(cuda.metrics.log_likelihood, cpu.metrics.log_likelihood)


def test_an_estimator_fit_on_cuda_predicts_as_on_the_cpu_and_loads_on_the_cpu(
    tmp_path: Path,
) -> None:
    dataset = load_diabetes_splits(seed=0)
    x, y = dataset.inputs, dataset.target
    params = {"hidden": (8,), "iterations": 50, "samples": 10}
    cpu = BayesianRegressor(**params).fit(x, y)
    cuda = BayesianRegressor(**params, device=str(CUDA)).fit(x, y)
    np.testing.assert_allclose(cuda.predict(x[:20]), cpu.predict(x[:20]), rtol=1e-6)
    cuda.save(tmp_path / "model")
    loaded = BayesianRegressor.load(tmp_path / "model", device="cpu")
    assert loaded.config_.device == "cpu"
    np.testing.assert_allclose(loaded.predict(x[:20]), cpu.predict(x[:20]), rtol=1e-6)


def test_pruned_units_per_layer_of_a_cuda_stack_are_the_cpu_ones() -> None:
    """uci-depth's pruning count (``stack_metrics`` hook): per-model prior stds on the CPU, the
    stack's moments on the device."""
    dataset = load_diabetes_splits(seed=0)
    config = method_config("mf", iterations=30, test_samples=5, hidden=(8, 8))
    stack = train_stack(config, stack_splits(dataset, [0, 1]))
    prior = torch.tensor([0.05, 1.0])
    on_cpu = pruned_units_per_layer(stack.model, prior)
    on_cuda = pruned_units_per_layer(stack.model.to(CUDA), prior)
    for cpu, cuda in zip(on_cpu, on_cuda, strict=True):
        assert torch.equal(cuda.cpu(), cpu)


# torch's first compile imports modules that warn of their own deprecations; none is vbnn's.
# torch 2.11's dynamo breaks the graph in this objective and, resuming, reads .grad of the non-leaf
# objective (its safe_has_grad); that warning would become an error inside the compile. torch
# 2.13 traces the objective as one graph (TORCH_LOGS=graph_breaks shows no break on the CPU)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
def test_a_compiled_uci_run_on_cuda_gives_the_cpu_metrics() -> None:
    """``compile=True`` on the device: the compiled objective and its noise blocks there end
    at the compiled CPU run's metrics (float64)."""
    dataset = load_diabetes_splits(seed=0)
    config = method_config("mf", iterations=40, test_samples=20, dtype="float64",
                         hidden=(8,), compile=True)  # fmt: skip
    on_cpu = run_splits(dataset, [0, 1], config)
    on_cuda = run_splits(dataset, [0, 1], replace(config, device=str(CUDA)))
    for cpu, cuda in zip(on_cpu.splits, on_cuda.splits, strict=True):
        assert cuda.test_log_likelihood == pytest.approx(cpu.test_log_likelihood, rel=1e-6)
        assert cuda.test_rmse == pytest.approx(cpu.test_rmse, rel=1e-6)


def test_a_study_on_cuda_chooses_the_cpu_values() -> None:
    """``tune()`` end to end with the config's device: the same candidates scored the same
    (float64), so the sampler proposes and the study chooses the same values."""
    dataset = load_diabetes_splits(seed=0)
    config = method_config("mf", iterations=30, test_samples=10, dtype="float64",
                         hidden=(8,))  # fmt: skip
    tuning = TuningConfig(trials=6, batch=3, seed=0)
    on_cpu = tune(dataset, 0, config, tuning)
    on_cuda = tune(dataset, 0, replace(config, device=str(CUDA)), tuning)
    assert on_cuda.keys() == on_cpu.keys()
    for name, value in on_cpu.items():
        assert on_cuda[name] == pytest.approx(value, rel=1e-9), name
