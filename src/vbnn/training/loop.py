"""The one training loop: an objective per iteration, an optimizer, and callbacks.

Contract. ``objective(iteration)`` returns the terms of one step (``objectives.Terms``: a dict whose
"objective" (M,) is to be maximised, summed over the step's examples); it draws its own batch and
noise, so the loop owns no data. ``train_loop`` then, for iteration = 1 .. iterations:

1. checks that every term is finite (else ``NonFiniteLossError``, naming the iteration and what
   ``describe`` says about the model and parameters at fault, e.g. "in model 3: ..."),
2. minimises ``-scale * objective.sum()`` with one ``optimizer.step()`` (models of a stack are
   independent, so the sum lets one elementwise optimizer drive each model exactly as alone),
3. calls ``callback(iteration, terms)`` with the detached terms.

Every trainer of the package is this loop with its own objective and optimizer: the epoch loop
``vbnn.train`` (``training.trainer``: any network and data; the classifier, compare's folds,
SGLD (``regression.sgld``, whose optimizer is the Langevin update ``LangevinDynamics``) and the
experiments train through it) and full-batch UCI training of a stack
(``regression.full_batch.fit``, Adam).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable

import torch
from tqdm.auto import tqdm

from vbnn.core.randomness import NoiseSource

Terms = dict[str, torch.Tensor]
Objective = Callable[[int], Terms]
# Called after every step with the iteration (1-based) and that step's terms, detached.
StepCallback = Callable[[int, Terms], None]


class NonFiniteLossError(FloatingPointError):
    """Training produced NaN or inf; the message names the iteration, model and parameter group."""


def train_loop(
    objective: Objective,
    optimizer: torch.optim.Optimizer,
    iterations: int,
    scale: float = 1.0,
    callbacks: Iterable[StepCallback] = (),
    describe: Callable[[int, Terms], str] | None = None,
    progress: bool = False,
    description: str = "train",
) -> Terms:
    """Run ``iterations`` steps (module docstring); returns the last step's detached terms."""
    if iterations < 1:
        raise ValueError(f"train_loop: iterations must be >= 1, got {iterations}")
    callbacks = list(callbacks)
    bar = tqdm(
        total=iterations,
        desc=description,
        file=sys.stderr,
        disable=not progress,
        leave=False,
        mininterval=0.5,
    )
    terms: Terms = {}
    try:
        for iteration in range(1, iterations + 1):
            terms = objective(iteration)
            if not bool(torch.isfinite(terms["objective"]).all()):
                detail = f" {describe(iteration, terms)}" if describe else ""
                raise NonFiniteLossError(f"non-finite objective at iteration {iteration}{detail}")
            optimizer.zero_grad(set_to_none=True)
            (-terms["objective"].sum() * scale).backward()
            optimizer.step()
            terms = {k: v.detach() for k, v in terms.items()}
            for callback in callbacks:
                callback(iteration, terms)
            if iteration % 100 == 0 or iteration == iterations:
                bar.update(iteration - bar.n)
    finally:
        bar.close()
    return terms


class LangevinDynamics(torch.optim.Optimizer):
    """The SGLD update as an optimizer (Welling & Teh 2011): for the loss -log p~(theta),

        theta <- theta - (eps_t / 2) grad(loss) + sqrt(eps_t) eta,    eta ~ N(0, I),

    with eps_t = ``step_size(t)`` (t = 1, 2, ...) and eta drawn per model from ``noise`` (one
    stream per model of the stack, in parameter order), so a chain is the same alone or stacked.
    Parameters carry the model dimension first. ``step_size`` returns one number for every
    model, or a (M,) tensor giving each model of the stack its own (tuning candidates).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        step_size: Callable[[int], float | torch.Tensor],
        noise: NoiseSource,
    ) -> None:
        super().__init__(params, {})
        self.step_size, self.noise, self.iteration = step_size, noise, 0

    @torch.no_grad()
    def step(self, closure: None = None) -> None:
        self.iteration += 1
        eps = self.step_size(self.iteration)
        for group in self.param_groups:
            for parameter in group["params"]:
                eta = self.noise.randn(
                    *parameter.shape[1:], dtype=parameter.dtype, device=parameter.device
                )
                if isinstance(eps, torch.Tensor):  # (M,): one step size per model
                    per_model = eps.to(parameter.dtype).reshape(-1, *[1] * (parameter.dim() - 1))
                    if parameter.grad is not None:
                        parameter.addcmul_(parameter.grad, per_model, value=-0.5)
                    parameter.addcmul_(eta, per_model.sqrt())
                    continue
                if parameter.grad is not None:
                    parameter.add_(parameter.grad, alpha=-eps / 2)
                parameter.add_(eta, alpha=math.sqrt(eps))
