"""``vbnn.diagnose(model, x, y)``: is this posterior pathological? One report for any network.

The report gathers three readings of a trained network holding family layers (a ``vbnn.convert``
ed model, an ``MLP``, ``LeNet5``; dense or convolutional; regression or classification):

1. **Layers** (``diagnostics.layers``): the SNR of every layer's weights, its units at the prior
   and its pruned units (Trippe & Turner 2017), and for variational dropout the share of weights
   with log alpha > 3.
2. **Where the information sits** (Neklyudov et al. 2019, section 4): the same data predicted
   three ways, by mean propagation (every weight at its mean), by one weight sample, and by the
   ensemble of ``samples`` weight samples (averaged probabilities; for regression the mean of the
   sampled outputs). A network is flagged as a **variance network** when the ensemble has learned
   something (its gain over the trivial predictor is at least ``VARIANCE_MIN_GAIN`` of the
   possible) and mean propagation keeps less than half of that gain: its information is in the
   variances, and predicting with the means discards it. The trivial predictor is the majority
   class (classification) or the mean of ``y`` (regression).
3. **Calibration** of the ensemble: ECE over equal-width bins (classification), or the coverage
   of the central 95 % predictive interval when a noise std is given (regression).

Verdicts: over-pruning when some layer has pruned at least ``OVERPRUNED_SHARE`` of its units;
variance network as above. The thresholds are stated in every printed report.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch
from torch import nn

from vbnn import metrics
from vbnn.classification.kappa import pre_activation_hessian_diagonal
from vbnn.core.batch_rule import Inputs, predict, rows
from vbnn.core.defaults import PRIOR_STD
from vbnn.core.randomness import ModelGenerators
from vbnn.diagnostics.layers import DROPOUT_FAMILIES, LayerDiagnosis, diagnose_layers
from vbnn.layers.modes import mode, stack_size
from vbnn.layers.shell import VariationalLayer
from vbnn.networks.predictive import class_probabilities, predictive_probabilities, sample
from vbnn.plots import pyplot, save_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

T = TypeVar("T")

OVERPRUNED_SHARE = 0.2  # a layer with at least this share of its units pruned is flagged
VARIANCE_MIN_GAIN = 0.2  # the ensemble's gain over the trivial predictor, as a share of the best
VARIANCE_KEPT = 0.5  # mean propagation keeping less than this share of that gain is flagged
KAPPA_LOG10_THRESHOLD = 1.5  # Neklyudov et al. 2018, Fig. 4
KAPPA_EXAMPLES, KAPPA_UNITS = 256, 512  # kappa's cost: one backward pass per output unit


@dataclass(frozen=True)
class DiagnosisReport:
    """What ``diagnose`` found; ``print(report)`` is the plain-language summary.

    Attributes:
        task: "classification" or "regression".
        examples: rows of the data the report was computed on.
        samples: weight samples of the ensemble.
        layers: one ``LayerDiagnosis`` per family layer.
        predictive: metric -> {"mean", "sample", "ensemble", "trivial"} -> value; accuracy and
            negative log-likelihood (classification) or RMSE (regression).
        calibration: "ECE" and "bins" (classification), or "coverage_95" (regression with a
            noise std; absent otherwise).
        verdicts: one sentence per finding, each with its numbers.
        flags: "over-pruning", "variance network": True where the finding holds.
        kappa_above: dense variational-dropout layers of a classifier -> the number of weights
            with log10 kappa > 1.5 (Neklyudov et al. 2018, eq. 16: weights whose noise the
            likelihood feels), computed on the first 256 examples.
    """

    task: str
    examples: int
    samples: int
    layers: list[LayerDiagnosis]
    predictive: dict[str, dict[str, float]]
    calibration: dict[str, float]
    verdicts: list[str]
    flags: dict[str, bool] = field(default_factory=dict)
    kappa_above: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "examples": self.examples,
            "samples": self.samples,
            "layers": [layer.to_dict() for layer in self.layers],
            "predictive": self.predictive,
            "calibration": self.calibration,
            "verdicts": self.verdicts,
            "flags": self.flags,
            "kappa_above": self.kappa_above,
        }

    def to_markdown(self) -> str:
        rows = ["| layer | family | kind | units | SNR median (10-90 %) | at prior | pruned | "
                "log alpha > 3 |", "|---|---|---|---:|---|---:|---:|---:|"]  # fmt: skip
        for layer in self.layers:
            low, median, high = (_number(q) for q in layer.snr_quantiles)
            alpha = "" if layer.large_alpha_share is None else f"{layer.large_alpha_share:.1%}"
            rows.append(
                f"| {layer.name} | {layer.family} | {layer.kind} | {layer.units} | "
                f"{median} ({low}-{high}) | {_count(layer.units_at_prior)} | "
                f"{_count(layer.pruned)} | {alpha} |"
            )
        predictive = ["| metric | mean propagation | one sample | ensemble | trivial |",
                      "|---|---:|---:|---:|---:|"]  # fmt: skip
        for name, values in self.predictive.items():
            predictive.append(f"| {name} | " + " | ".join(f"{values[k]:.4g}" for k in _WAYS) + " |")
        calibration = ", ".join(f"{k} {v:.4g}" for k, v in self.calibration.items()) or "-"
        verdicts = "\n".join(f"- {verdict}" for verdict in self.verdicts)
        return (
            f"## Diagnosis ({self.task}, {self.examples} examples, {self.samples} samples)\n\n"
            + "\n".join(rows) + "\n\n" + "\n".join(predictive)
            + f"\n\nCalibration: {calibration}\n\n{verdicts}\n"
        )  # fmt: skip

    def __str__(self) -> str:
        lines = [f"vbnn diagnosis: {self.task}, {self.examples} examples, ensemble of "
                 f"{self.samples} weight samples"]  # fmt: skip
        for layer in self.layers:
            low, median, high = (_number(q) for q in layer.snr_quantiles)
            text = (f"  {layer.name} ({layer.family}, {layer.kind}, {layer.units} units): "
                    f"weight SNR median {median} (10-90 %: {low}-{high})")  # fmt: skip
            if layer.units_at_prior is not None:
                text += f"; {layer.units_at_prior} units at the prior"
            if layer.pruned is not None:
                text += f", {layer.pruned} pruned"
            if layer.large_alpha_share is not None:
                text += f"; log alpha > 3 for {layer.large_alpha_share:.1%} of weights"
            if layer.name in self.kappa_above:
                text += f"; log10 kappa > 1.5 for {self.kappa_above[layer.name]} weights"
            lines.append(text)
        for name, values in self.predictive.items():
            lines.append(
                f"  {name}: mean propagation {values['mean']:.4g}, one sample "
                f"{values['sample']:.4g}, ensemble {values['ensemble']:.4g} "
                f"(trivial predictor {values['trivial']:.4g})"
            )
        if self.calibration:
            lines.append("  calibration: " + ", ".join(
                f"{k} {v:.4g}" for k, v in self.calibration.items()))  # fmt: skip
        lines += [f"* {verdict}" for verdict in self.verdicts]
        return "\n".join(lines)

    def plot(self, path: str | Path | None = None) -> Figure:
        """Weight SNR per layer (median, 10-90 % bars), pruned share per layer, and the main
        metric of the three ways of predicting."""
        figure, (snr_axis, pruned_axis, ways_axis) = pyplot().subplots(1, 3, figsize=(13, 3.8))
        names = [layer.name for layer in self.layers]
        positions = range(len(names))
        medians = [min(layer.snr_quantiles[1], 1e6) for layer in self.layers]
        lows = [m - min(layer.snr_quantiles[0], 1e6) for m, layer in zip(medians, self.layers,
                                                                         strict=True)]  # fmt: skip
        highs = [min(layer.snr_quantiles[2], 1e6) - m for m, layer in zip(medians, self.layers,
                                                                          strict=True)]  # fmt: skip
        snr_axis.errorbar(positions, medians, yerr=[lows, highs], fmt="o", capsize=3)
        snr_axis.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        snr_axis.set(yscale="log", xticks=list(positions), title="weight SNR |mu| / sigma",
                     ylabel="median, 10-90 %")  # fmt: skip
        snr_axis.set_xticklabels(names, rotation=45, ha="right")
        shares = [(layer.pruned or 0) / layer.units for layer in self.layers]
        pruned_axis.bar(positions, shares)
        pruned_axis.axhline(OVERPRUNED_SHARE, color="red", linestyle="--", linewidth=1)
        pruned_axis.set(ylim=(0, 1), xticks=list(positions), title="pruned units (share)")
        pruned_axis.set_xticklabels(names, rotation=45, ha="right")
        metric = "accuracy" if self.task == "classification" else "RMSE"
        values = self.predictive[metric]
        ways_axis.bar(range(4), [values[k] for k in _WAYS])
        ways_axis.set(xticks=range(4), title=f"{metric} by way of predicting")
        ways_axis.set_xticklabels(["mean", "one sample", "ensemble", "trivial"])
        figure.tight_layout()
        if path is not None:
            save_figure(figure, path, close=False)
        return figure


_WAYS = ("mean", "sample", "ensemble", "trivial")


def _number(value: float) -> str:
    return f"{value:.3g}"


def _count(value: int | None) -> str:
    return "" if value is None else str(value)


def _infer_task(outputs: torch.Tensor, y: torch.Tensor) -> str:
    if not y.dtype.is_floating_point and outputs.dim() == 2 and outputs.shape[-1] >= 2:
        return "classification"
    return "regression"


def _classification(
    mean_logits: torch.Tensor, sampled_logits: torch.Tensor, y: torch.Tensor, bins: int
) -> tuple[dict, dict, float, float]:
    ways = {"mean": class_probabilities(mean_logits),
            "sample": class_probabilities(sampled_logits[0]),
            "ensemble": predictive_probabilities(sampled_logits)}  # fmt: skip
    frequencies = torch.bincount(y, minlength=ways["mean"].shape[-1]).double() / len(y)
    ways["trivial"] = frequencies.expand_as(ways["mean"])
    predictive = {
        "accuracy": {k: float(metrics.accuracy(p, y)) for k, p in ways.items()},
        "NLL": {k: float(metrics.classification_nll(p, y)) for k, p in ways.items()},
    }
    calibration = {"ECE": float(metrics.expected_calibration_error(ways["ensemble"], y, bins)),
                   "bins": float(bins)}  # fmt: skip
    accuracy = predictive["accuracy"]
    best_gain = 1.0 - accuracy["trivial"]
    return predictive, calibration, accuracy["ensemble"] - accuracy["trivial"], best_gain


def _regression(
    mean_output: torch.Tensor, sampled: torch.Tensor, y: torch.Tensor, noise_std: float | None
) -> tuple[dict, dict, float, float]:
    target = y.double().reshape(-1)
    ways = {"mean": mean_output.double().reshape(-1), "sample": sampled[0].double().reshape(-1),
            "ensemble": sampled.double().reshape(len(sampled), -1).mean(0),
            "trivial": target.mean().expand_as(target)}  # fmt: skip
    predictive = {"RMSE": {k: float(metrics.rmse(p, target)) for k, p in ways.items()}}
    calibration = {}
    if noise_std is not None:
        means = sampled.double().reshape(len(sampled), -1)
        calibration["coverage_95"] = float(metrics.interval_coverage(means, noise_std, target))
    rmse = predictive["RMSE"]
    return predictive, calibration, rmse["trivial"] - rmse["ensemble"], rmse["trivial"]


class OneOfStack(nn.Module):
    """A stack of one model (the UCI engine's and the regressor's networks, inputs (1, N, I))
    called as one network: (N, I) in, (N, O) out."""

    def __init__(self, stack: nn.Module) -> None:
        super().__init__()
        self.stack = stack

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stack(x.unsqueeze(0)).squeeze(0)


def _sample(model: nn.Module, x: Inputs, samples: int, seed: int) -> torch.Tensor:
    """K weight samples of the outputs, (K, N, ...); a ``OneOfStack`` is sampled as its stack
    (``sample`` reads a stack's examples from dimension 1 of its inputs)."""
    noise = ModelGenerators([seed])
    if isinstance(model, OneOfStack):
        return sample(model.stack, x.unsqueeze(0), samples, noise=noise)[:, 0]  # type: ignore[union-attr]
    return sample(model, x, samples, noise=noise)


def _from_estimator(estimator, x, y) -> tuple[nn.Module, torch.Tensor, torch.Tensor, dict]:
    """The network, the inputs and targets as the network sees them, and the settings that follow
    (task, noise std) of a fitted ``BayesianRegressor`` or ``BayesianClassifier``."""
    # the estimators' modules import scikit-learn: loaded here, when one is diagnosed
    from vbnn.classification.estimator import BayesianClassifier
    from vbnn.regression.estimator import BayesianRegressor

    if not isinstance(estimator, BayesianRegressor | BayesianClassifier):
        raise TypeError(
            "diagnose: model must be an nn.Module, a BayesianRegressor or a BayesianClassifier, "
            f"got {type(estimator).__name__}"
        )
    if not hasattr(estimator, "model_"):
        raise ValueError(f"diagnose: the {type(estimator).__name__} is not fitted yet")
    parameter = next(estimator.model_.parameters())
    features = (np.asarray(x, dtype=np.float64) - estimator.x_mean_) / estimator.x_scale_
    inputs = torch.as_tensor(features, dtype=parameter.dtype, device=parameter.device)
    if isinstance(estimator, BayesianClassifier):
        labels = np.asarray(y)
        encoded = np.clip(
            np.searchsorted(estimator.classes_, labels), 0, len(estimator.classes_) - 1
        )
        if (estimator.classes_[encoded] != labels).any():
            raise ValueError(f"diagnose: y holds labels outside {estimator.classes_.tolist()}")
        targets = torch.as_tensor(encoded, device=parameter.device)
        return estimator.model_, inputs, targets, {"task": "classification"}
    if getattr(estimator, "heteroscedastic", False):
        raise ValueError(
            "diagnose: a BayesianRegressor(heteroscedastic=True) has a noise std per input; the "
            "report takes one noise std (diagnose a fit with heteroscedastic=False)"
        )
    scaled = (np.asarray(y, dtype=np.float64) - estimator.y_mean_) / estimator.y_scale_
    targets = torch.as_tensor(scaled, device=parameter.device)
    noise_std = float(estimator.likelihood_.std().detach().reshape(-1)[0])
    return (
        OneOfStack(estimator.model_),
        inputs,
        targets,
        {"task": "regression", "noise_std": noise_std},
    )


def layer_kappa(
    model: nn.Module, layer: VariationalLayer, x: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """kappa (I, O) of one dense layer of any classifier (Neklyudov et al. 2018, eq. 16),

        kappa_ij = sigma_ij^2 | sum_n a_ni^2 d^2 log p(y_n | x_n) / d b_nj^2 |,

    with a the layer's inputs and b its pre-activations, the whole network at its means. The
    network after the layer is read by a forward hook that replaces the layer's output, so any
    module works; examples must not interact (BatchNorm in eval mode)."""
    captured: list[torch.Tensor] = []
    replacement: list[torch.Tensor] = []

    def hook(module, inputs, output):
        if not replacement:
            captured.append(inputs[0].detach())
            return output
        return replacement[0]

    handle = layer.register_forward_hook(hook)
    try:
        with mode(model, "mean"):
            model(x)
            pre_activation = layer(captured[0], "mean").detach()

            def head(b: torch.Tensor) -> torch.Tensor:
                replacement[:] = [b.squeeze(0)]
                return model(x).unsqueeze(0)

            def log_likelihood(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
                return torch.log_softmax(logits, -1).gather(-1, targets.view(1, -1, 1))[..., 0]

            hessian = pre_activation_hessian_diagonal(
                head, pre_activation.unsqueeze(0), labels, log_likelihood
            )[0]
    finally:
        handle.remove()
    inputs = captured[0]
    curvature = (inputs * inputs).t() @ hessian  # sum_n a_ni^2 h_nj
    return layer.weight_moments()[1].detach()[0] * curvature.abs()


def _kappa_above(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, int]:
    """log10 kappa > 1.5 counts of the dense variational-dropout layers small enough to afford."""
    counts = {}
    for name, layer in model.named_modules():
        if (isinstance(layer, VariationalLayer) and layer.family_name in DROPOUT_FAMILIES
                and layer.kernel_size is None and layer.out_features <= KAPPA_UNITS):  # fmt: skip
            kappa = layer_kappa(model, layer, x[:KAPPA_EXAMPLES], y[:KAPPA_EXAMPLES])
            counts[name or type(layer).__name__] = int((kappa > 10**KAPPA_LOG10_THRESHOLD).sum())
    return counts


def _kept(gain_mean: float, gain_ensemble: float) -> float:
    return gain_mean / gain_ensemble if gain_ensemble > 0 else math.nan


@torch.no_grad()
def diagnose(
    model: nn.Module,
    x: Inputs,
    y: torch.Tensor,
    *,
    task: str | None = None,
    samples: int = 32,
    prior_std: float = PRIOR_STD,
    bins: int = 15,
    noise_std: float | None = None,
    seed: int = 0,
) -> DiagnosisReport:
    """Diagnose a trained network on data (module docstring); each option is independent.

    A fitted ``BayesianRegressor`` or ``BayesianClassifier`` may stand for ``model``: ``x`` and
    ``y`` are then in the data's own units and labels, scaled and encoded as the estimator does
    (regression is then diagnosed in standardised units, with the fitted noise std).

    Args:
        model: one network holding family layers (a stack of one model is called as one), or a
            fitted estimator.
        x: inputs (N, ...) as the model takes them, or a mapping of them (a HuggingFace model's
            ``input_ids``, ``attention_mask``, ...), its prediction the output's logits
            (``core.batch_rule``; kappa is read for tensor inputs only).
        y: integer class labels (N,) or real targets (N,) / (N, 1).
        task: "classification" or "regression"; None infers it (integer labels and (N, C)
            outputs with C >= 2: classification).
        samples: weight samples of the ensemble (K >= 2).
        prior_std: the N(0, s^2) prior "at the prior" refers to (pruning rule).
        bins: equal-width bins of the ECE.
        noise_std: regression only: the Gaussian noise std, for the interval coverage.
        seed: seeds the weight samples.

    Raises:
        ValueError: mismatched lengths of ``x`` and ``y``, fewer than 2 samples, an unknown
            task, labels outside the model's classes, or a model with no family layer.
        TypeError: a model that is neither an ``nn.Module`` nor a fitted estimator.
    """
    if rows(x) != len(y):
        raise ValueError(f"diagnose: x has {rows(x)} rows and y {len(y)}; they must match")
    if not isinstance(model, nn.Module):  # a fitted estimator
        model, x, y, settings = _from_estimator(model, x, y)
        task = task or settings["task"]
        noise_std = noise_std if noise_std is not None else settings.get("noise_std")
    elif stack_size(model) == 1:
        model = OneOfStack(model)
    if samples < 2:
        raise ValueError(f"diagnose: samples must be >= 2 (an ensemble), got {samples}")
    layers = diagnose_layers(model, prior_std)
    mean_output, sampled = _outputs(model, x, samples, seed)
    task = task or _infer_task(mean_output, y)
    scores = _scores(task, mean_output, sampled, y, bins, noise_std)
    predictive, calibration, gain, best, metric, kept_gain = scores
    verdicts, flags = _verdicts(layers, metric, gain, best, kept_gain)
    kappa = {}
    if task == "classification" and isinstance(x, torch.Tensor):
        kappa = _evaluated(model, lambda: _kappa_above(model, x, y))
    return DiagnosisReport(
        task, rows(x), samples, layers, predictive, calibration, verdicts, flags, kappa
    )


def _evaluated(model: nn.Module, compute: Callable[[], T]) -> T:
    """``compute()`` with ``model`` in ``.eval()`` mode (BatchNorm and dropout modules at their
    test-time behaviour), its mode restored after."""
    was_training = model.training
    model.eval()
    try:
        return compute()
    finally:
        model.train(was_training)


def _outputs(
    model: nn.Module, x: Inputs, samples: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean network's output and ``samples`` sampled outputs (seeded by ``seed``) on x."""

    def compute() -> tuple[torch.Tensor, torch.Tensor]:
        with mode(model, "mean"):
            mean_output = predict(model, x)
        return mean_output, _sample(model, x, samples, seed)

    return _evaluated(model, compute)


def _scores(
    task: str,
    mean_output: torch.Tensor,
    sampled: torch.Tensor,
    y: torch.Tensor,
    bins: int,
    noise_std: float | None,
) -> tuple[dict, dict, float, float, str, float]:
    """The task's predictive metrics, calibration, the ensemble's gain and the best sample's
    score (``_classification`` / ``_regression``), the metric's name, and how much the mean
    network beats the trivial predictor by it."""
    if task == "classification":
        classes = mean_output.shape[-1]
        if y.dtype.is_floating_point or bool(((y < 0) | (y >= classes)).any()):
            raise ValueError(f"diagnose: labels y must be integers in [0, {classes})")
        predictive, calibration, gain, best = _classification(mean_output, sampled, y, bins)
        accuracy = predictive["accuracy"]
        return (
            predictive,
            calibration,
            gain,
            best,
            "accuracy",
            accuracy["mean"] - accuracy["trivial"],
        )
    if task == "regression":
        predictive, calibration, gain, best = _regression(mean_output, sampled, y, noise_std)
        rmse = predictive["RMSE"]
        return predictive, calibration, gain, best, "RMSE", rmse["trivial"] - rmse["mean"]
    raise ValueError(f"diagnose: task must be 'classification' or 'regression', got {task!r}")


def _verdicts(
    layers: list[LayerDiagnosis], metric: str, gain: float, best: float, kept_gain: float
) -> tuple[list[str], dict[str, bool]]:
    verdicts = []
    overpruned = [
        layer for layer in layers
        if layer.pruned is not None and layer.pruned >= OVERPRUNED_SHARE * layer.units
    ]  # fmt: skip
    for layer in overpruned:
        verdicts.append(
            f"over-pruning: {layer.pruned} of {layer.units} units of layer {layer.name!r} are "
            f"pruned ({layer.pruned / layer.units:.0%}; flagged at {OVERPRUNED_SHARE:.0%}): their "
            "incoming weights sit at the prior and their outgoing weights are indistinguishable "
            "from zero, so the layer is narrower than it looks"
        )
    if not overpruned and any(layer.pruned is not None for layer in layers):
        verdicts.append(f"no over-pruning: no layer has {OVERPRUNED_SHARE:.0%} of its units pruned")
    learned = best > 0 and gain >= VARIANCE_MIN_GAIN * best
    kept = _kept(kept_gain, gain)
    variance_network = learned and kept < VARIANCE_KEPT
    if variance_network:
        verdicts.append(
            f"variance network: the ensemble improves the {metric} over the trivial predictor by "
            f"{gain:.3g}, mean propagation keeps {kept:.0%} of that (flagged below "
            f"{VARIANCE_KEPT:.0%}): the information sits in the variances, so predict with "
            "samples, not with the means"
        )
    elif learned:
        verdicts.append(
            f"not a variance network: mean propagation keeps {kept:.0%} of the ensemble's "
            f"{metric} gain over the trivial predictor"
        )
    else:
        verdicts.append(
            f"the ensemble improves the {metric} over the trivial predictor by only {gain:.3g} "
            f"(less than {VARIANCE_MIN_GAIN:.0%} of the possible {best:.3g}): the network has "
            "learned little on these data"
        )
    return verdicts, {"over-pruning": bool(overpruned), "variance network": variance_network}
