"""Full-batch training of a model stack: one Adam over all models, independent in every element.

The loss is sum_m ( -objective_m / N ): Adam's update is elementwise, so model m follows exactly
the trajectory it would follow alone. The steps are ``loop.train_loop``'s; the objective is the
config's (``AdamConfig.objective_terms``: ES, MAP, VI; SGLD has its own optimizer in
``regression.sgld``); this module adds the compiled objective and early stopping.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators, NoiseSource, NoiseTape
from vbnn.core.runtime import one_core_for_noise
from vbnn.layers.modes import variational_layers
from vbnn.networks.mlp import MLP
from vbnn.priors.gaussian import GaussianPrior
from vbnn.regression.runs import AdamConfig, ModelValues
from vbnn.training.likelihoods import GaussianLikelihood, inputs_checked
from vbnn.training.loop import NonFiniteLossError, StepCallback, train_loop
from vbnn.training.optimizer import learning_rate_groups

__all__ = ["FitInfo", "NonFiniteLossError", "Problem", "StepCallback", "Validation", "fit"]

Objective = Callable[[], dict[str, torch.Tensor]]

# Below this many normal draws a step, the noise is drawn on the training thread: handing blocks
# over from the noise thread costs more than the draws it would hide (benchmarks/uci_speed.py;
# benchmarks/README.md). The numbers are the same either way.
BACKGROUND_DRAWS = 1 << 17


def noise_draws_per_step(model: nn.Module, x: torch.Tensor) -> int:
    """Normal draws of one local-reparameterization step of ``model`` on ``x`` (M, N, I): one
    per row and output of every family layer."""
    return x.shape[0] * x.shape[1] * sum(layer.out_features for layer in variational_layers(model))


@dataclass(frozen=True)
class Validation:
    """Early stopping (ES): held-out rows of each model's training data, (M, N_val, I) and
    (M, N_val)."""

    x: torch.Tensor
    y: torch.Tensor


@dataclass(frozen=True)
class FitInfo:
    iterations: int
    final_objective: torch.Tensor  # (M,) per-example objective at the last step
    stopped_iteration: torch.Tensor | None = None  # (M,) ES: iteration of the kept weights


@dataclass(frozen=True)
class Problem:
    """What one full-batch fit works on: the model stack, its likelihood and training data.

    x (M, N, I) and y (M, N): each model's own standardised training rows.
    """

    model: MLP
    likelihood: GaussianLikelihood
    x: torch.Tensor
    y: torch.Tensor


def make_objective(
    config: AdamConfig, problem: Problem, noise: ModelGenerators, values: ModelValues
) -> Objective:
    """The closure computing the config's objective terms on the problem's data."""
    prior = config.prior(values)
    return lambda: objective_terms(config, problem, prior, noise)


def objective_terms(
    config: AdamConfig, problem: Problem, prior: GaussianPrior | None, noise: NoiseSource
) -> dict[str, torch.Tensor]:
    """The config's objective terms (``AdamConfig.objective_terms``: ES's log-likelihood, MAP's
    log joint, VI's ELBO) on the problem's data."""
    model, likelihood, x, y = problem.model, problem.likelihood, problem.x, problem.y
    return config.objective_terms(model, likelihood, prior, x, y, noise)


def compiled_objective(
    config: AdamConfig, problem: Problem, noise: ModelGenerators, values: ModelValues
) -> Objective:
    """The objective with its tensor maths in one ``torch.compile`` graph (forward and backward).

    The first call runs eagerly and records the shapes of the noise blocks the step draws; later
    calls draw the same blocks from ``noise`` (in the same order, so the same numbers) and
    pass them into the compiled graph through a ``NoiseTape``. Compilation fuses the step's
    elementwise passes into a few loops (benchmarks/README.md); results agree with the eager
    objective to float rounding.
    """
    prior = config.prior(values)

    def with_noise(*blocks: torch.Tensor) -> dict[str, torch.Tensor]:
        return objective_terms(config, problem, prior, NoiseTape(blocks))

    # Dynamo caches graphs on the code object of ``with_noise``, which every call here shares:
    # after ``recompile_limit`` (8) stacks, a long sweep would silently fall back to eager.
    # One compiled objective is live at a time, so the old graphs are dropped.
    torch._dynamo.reset()
    graph = torch.compile(with_noise, dynamic=False)
    calls: list[tuple[tuple[int, ...], torch.dtype]] | None = None

    def objective() -> dict[str, torch.Tensor]:
        nonlocal calls
        if calls is None:  # the first step, eager, learns which blocks a step draws
            recorder = NoiseTape(source=noise)
            terms = objective_terms(config, problem, prior, recorder)
            calls = recorder.calls
            return terms
        blocks = (
            noise.randn(*shape, dtype=dtype, device=problem.x.device) for shape, dtype in calls
        )
        return graph(*blocks)

    return objective


def parameter_groups(config: AdamConfig, modules: nn.Module) -> list[dict]:
    """Adam parameter groups: the correlation parameters (FC's off-diagonal Cholesky entries,
    ``ParameterRole.CORRELATION``) may get their own rate.

    Adam moves every coordinate by about the learning rate whatever the size of its gradient.
    The D (D - 1) / 2 off-diagonal entries of an FC layer's Cholesky factor receive almost pure
    Monte-Carlo noise, so at the paper's rate they random-walk until the off-diagonal part alone
    gives each weight about the prior's variance, and the fit does not recover (measured:
    reproductions/overpruning/README.md, "FC and Adam").
    VI's ``correlation_learning_rate`` sets their rate apart (``role_learning_rates``); None
    keeps the paper's single rate.
    """
    return learning_rate_groups(modules, config.learning_rate, config.role_learning_rates())


def _describe_non_finite(
    terms: dict[str, torch.Tensor], modules: nn.Module, labels: list[str]
) -> str:
    bad_model = int((~torch.isfinite(terms["objective"])).nonzero()[0, 0])
    bad_terms = [
        k for k, v in terms.items() if k != "objective" and not torch.isfinite(v[bad_model])
    ]
    bad_groups = [
        name
        for name, parameter in modules.named_parameters()
        if not torch.isfinite(parameter.detach()[bad_model]).all()
    ]
    where = f"model {bad_model} ({labels[bad_model]})" if labels else f"model {bad_model}"
    return f"in {where}: terms {bad_terms or ['objective']} are NaN/inf; " + (
        f"parameter groups with non-finite values: {bad_groups}"
        if bad_groups
        else "all parameter groups are finite (the forward pass overflowed: try a smaller "
        "learning rate or a larger noise std)"
    )


def fit(
    config: AdamConfig,
    problem: Problem,
    noise: ModelGenerators,
    *,
    values: ModelValues | None = None,
    validation: Validation | None = None,
    callback: StepCallback | None = None,
    labels: list[str] | None = None,
    progress: bool = False,
    description: str = "train",
) -> FitInfo:
    """Optimise every model of the stack for ``config.iterations`` full-batch steps.

    With ``validation`` (ES), the held-out log-likelihood of the mean network is checked every
    ``config.early_stopping().eval_every`` steps (every step for a config without early
    stopping) and each model keeps the weights of its best check. ``values`` holds per-model
    settings (tuning candidates). The keyword options are independent of each other (ES's
    validation rows, per-model values, a step callback, and what a progress bar and an error
    message call the models), so they stay separate keywords.

    Raises:
        ValueError: targets not (M, N) for inputs (M, N, I), or data holding NaN or inf (names
            the model and the row).
        NonFiniteLossError: at the first step whose loss is NaN or inf.
    """
    _check_problem(problem, validation)
    model, likelihood, x = problem.model, problem.likelihood, problem.x
    modules = nn.ModuleDict({"model": model, "likelihood": likelihood})
    optimizer = torch.optim.Adam(
        parameter_groups(config, modules), lr=config.learning_rate, betas=config.betas, fused=True
    )
    make = compiled_objective if config.compile else make_objective
    objective = make(config, problem, noise, values or ModelValues())
    iterations = config.iterations
    scale = 1.0 / x.shape[1]
    callbacks = [] if callback is None else [callback]
    best = _BestState(modules, validation) if validation is not None else None
    if best is not None:
        stopping = config.early_stopping()
        eval_every = 1 if stopping is None else stopping.eval_every

        def check(iteration: int, terms: dict[str, torch.Tensor]) -> None:
            if iteration % eval_every == 0 or iteration == iterations:
                best.update(iteration, model, likelihood)

        callbacks.append(check)
    background = noise_draws_per_step(model, x) >= BACKGROUND_DRAWS

    def step(iteration: int) -> dict[str, torch.Tensor]:
        noise.next_step(iterations - iteration)  # hands the noise thread steps, not blocks
        return objective()

    with (
        noise.drawing_ahead(background),
        one_core_for_noise() if background else nullcontext(),
        inputs_checked(),  # x and y were checked above and do not change between steps
    ):
        terms = train_loop(
            step,
            optimizer,
            iterations,
            scale,
            callbacks,
            lambda iteration, terms: _describe_non_finite(terms, modules, labels or []),
            progress,
            description,
        )
    stopped = best.restore() if best is not None else None
    return FitInfo(iterations, terms["objective"] * scale, stopped)


def _check_problem(problem: Problem, validation: Validation | None) -> None:
    """ValueError when the targets do not match the inputs or a row holds NaN or inf."""
    x, y = problem.x, problem.y
    if y.shape != x.shape[:2]:
        raise ValueError(
            f"fit: targets {tuple(y.shape)} must be (M, N) = {tuple(x.shape[:2])} "
            "for inputs (M, N, I)"
        )
    checked = [("inputs", x), ("targets", y)]
    if validation is not None:
        checked += [("validation inputs", validation.x), ("validation targets", validation.y)]
    for label, tensor in checked:
        bad = ~torch.isfinite(tensor.reshape(*tensor.shape[:2], -1)).all(-1)
        if bool(bad.any()):
            model_index, row = (int(i) for i in bad.nonzero()[0])
            raise ValueError(f"fit: {label} hold NaN or inf in model {model_index}, row {row}")


class _BestState:
    """Per-model copy of the parameters at the best validation log-likelihood so far."""

    def __init__(self, modules: nn.Module, validation: Validation) -> None:
        self.modules = modules
        self.validation = validation
        self.state = {k: v.detach().clone() for k, v in modules.state_dict().items()}
        num_models = validation.y.shape[0]
        device = validation.y.device
        self.score = torch.full(
            (num_models,), -float("inf"), dtype=validation.y.dtype, device=device
        )
        self.iteration = torch.zeros(num_models, dtype=torch.long, device=device)

    @torch.no_grad()
    def update(self, iteration: int, model: MLP, likelihood: GaussianLikelihood) -> None:
        prediction = model(self.validation.x, ForwardMode.MEAN)
        score = likelihood.log_prob(prediction, self.validation.y).mean(-1)
        improved = score > self.score
        if not bool(improved.any()):
            return
        self.score = torch.where(improved, score, self.score)
        self.iteration = torch.where(improved, iteration, self.iteration)
        for name, value in self.modules.state_dict().items():
            mask = improved.view(-1, *([1] * (value.dim() - 1)))
            self.state[name] = torch.where(mask, value, self.state[name])

    def restore(self) -> torch.Tensor:
        self.modules.load_state_dict(self.state)
        return self.iteration
