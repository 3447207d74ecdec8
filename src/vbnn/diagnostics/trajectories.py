"""Training trajectories (Figure 4 of Trippe & Turner 2017).

Trippe & Turner follow, for an MF network on boston, the KL term, the variational free energy
(-ELBO), the expected log-likelihood, and the negative log-likelihood of the training and test
data under the posterior predictive. Their observation: the free energy falls monotonically, but
the predictive NLL on both sets falls, then rebounds as hidden units are pruned (underfitting).

:class:`TrajectoryLogger` is a ``training.fit`` callback that records those quantities every
``every`` iterations into a pandas DataFrame; :func:`plot_trajectories` draws the four panels.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from vbnn.core.randomness import ModelGenerators
from vbnn.data.splits import StackedSplits
from vbnn.diagnostics.pruning import count_pruned, diagnose_units
from vbnn.networks.mlp import MLP
from vbnn.plots import pyplot, save_figure
from vbnn.regression.evaluation import evaluate
from vbnn.training.likelihoods import GaussianLikelihood

# objective term (objectives.py) -> column
TERM_COLUMNS = {"objective": "elbo", "log-likelihood": "expected_log_likelihood", "KL": "kl"}


class TrajectoryLogger:
    """``fit`` callback: every ``every`` iterations, log the objective terms and predictive NLLs.

    Columns of :meth:`frame` (one row per logged iteration and model):
        iteration, split;
        elbo, expected_log_likelihood, kl: the training objective's terms as ``fit`` passes
            them (totals over the training set, a Monte-Carlo estimate for the expected
            log-likelihood; computed at the parameters *before* that iteration's Adam step);
        free_energy: -elbo;
        train_nll, test_nll: -(1/N) sum_n log (1/K) sum_k p(y_n | x_n, W_k), per example, in the
            target's original units (``evaluation.evaluate``, K = ``samples``), after the step;
        pruned_units: with ``prior_std`` (one hidden layer only), the count of
            ``diagnostics.pruning.pruned_units`` (default thresholds), after the step.

    Its evaluation draws come from its own generators (seeded by ``seed``), so logging never
    changes the training trajectory.
    """

    # Parameters: what is logged (every, model, likelihood, data), then independent options
    def __init__(
        self,
        every: int,
        model: MLP,
        likelihood: GaussianLikelihood,
        data: StackedSplits,
        *,
        samples: int = 20,
        seed: int = 0,
        stochastic: bool = True,
        prior_std: float | None = None,
    ) -> None:
        if every < 1 or samples < 1:
            raise ValueError(f"TrajectoryLogger: every={every} and samples={samples} must be >= 1")
        self.every, self.model, self.likelihood, self.data = every, model, likelihood, data
        self.samples, self.stochastic, self.prior_std = samples, stochastic, prior_std
        self.generators = ModelGenerators.for_keys(seed, data.split_ids, "eval")
        self.rows: list[dict[str, float]] = []

    def _nll(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        metrics = evaluate(
            self.model,
            self.likelihood,
            x,
            y,
            self.data.target_scale,
            self.generators,
            samples=self.samples,
            stochastic=self.stochastic,
        )
        return -metrics.log_likelihood

    def __call__(self, iteration: int, terms: dict[str, torch.Tensor]) -> None:
        if iteration % self.every != 0 and iteration != 1:
            return
        pruned = None
        if self.prior_std is not None:
            pruned = count_pruned(diagnose_units(self.model, self.data.x_train, self.prior_std))
        train = self._nll(self.data.x_train, self.data.y_train)
        test = self._nll(self.data.x_test, self.data.y_test)
        for m, split in enumerate(self.data.split_ids):
            row = {"iteration": iteration, "split": split}
            for key, column in TERM_COLUMNS.items():
                if key in terms:
                    row[column] = float(terms[key][m])
            if "elbo" in row:
                row["free_energy"] = -row["elbo"]
            row["train_nll"], row["test_nll"] = float(train[m]), float(test[m])
            if pruned is not None:
                row["pruned_units"] = int(pruned[m])
            self.rows.append(row)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


def rebound(frame: pd.DataFrame, column: str, split: int | None = None) -> dict[str, float]:
    """Minimum of ``column`` over the run, where it occurred, the final value and the rise."""
    rows = frame if split is None else frame[frame["split"] == split]
    best = rows.loc[rows[column].idxmin()]
    final = rows.iloc[-1]
    return {
        "min": float(best[column]),
        "min_iteration": int(best["iteration"]),
        "final": float(final[column]),
        "rise": float(final[column] - best[column]),
    }


def plot_trajectories(
    frame: pd.DataFrame, path: str | Path, split: int | None = None, title: str | None = None
) -> Path:
    """Figure 4's panels: A KL, B free energy, C expected log-likelihood, D predictive NLLs."""
    rows = frame if split is None else frame[frame["split"] == split]
    if rows.empty:
        raise ValueError(f"plot_trajectories: no rows for split {split}")
    rows = rows[rows["split"] == rows["split"].iloc[0]]
    panels = [
        ("A: KL(q || p)", ["kl"]),
        ("B: free energy (-ELBO)", ["free_energy"]),
        ("C: expected log-likelihood", ["expected_log_likelihood"]),
        ("D: predictive NLL per point", ["train_nll", "test_nll"]),
    ]
    if "pruned_units" in rows:
        panels.append(("pruned hidden units", ["pruned_units"]))
    figure, axes = pyplot().subplots(1, len(panels), figsize=(3.5 * len(panels), 3.4))
    for axis, (name, columns) in zip(axes, panels, strict=True):
        for column, colour in zip(columns, ("C0", "C2"), strict=False):
            if column in rows:
                label = column.replace("_nll", "") if column.endswith("_nll") else None
                axis.plot(rows["iteration"], rows[column], color=colour, label=label)
        axis.set_title(name, fontsize=9)
        axis.set_xlabel("iteration")
        if len(columns) > 1:
            axis.legend(fontsize=8)
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    return save_figure(figure, path, dpi=110)
