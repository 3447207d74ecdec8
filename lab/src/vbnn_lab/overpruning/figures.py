"""Figures 2-5 of "Overpruning in Variational BNNs" (Trippe & Turner 2017).

Each function takes an output folder and a ``quick`` flag and returns the paths it wrote, so the
``vbnn reproduce overpruning`` driver can call it. Settings are the paper's appendix A (one hidden
layer of 50 tanh units, unit normal prior, posterior std initialised to 1e-4, Adam lr 0.005,
betas (0.9, 0.99), 5000 full-batch iterations); ``quick`` cuts iterations and splits, and says so
in the files it writes. ``iterations`` and ``splits`` override both (tests use tiny values).

    figure2_5: MF on boston, per-unit panels of one network (Fig. 2: an active and a pruned
        unit; Fig. 5: all 50), and the pruned count per split beside the paper's 39 of 50.
    figure3: the prior-network simulation (N = 5, 25, 100), posterior function samples.
    figure4: training trajectories of MF on boston (KL, free energy, expected log-likelihood,
        predictive NLL on train and test).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from vbnn.data import load_uci
from vbnn.data.splits import stack_splits
from vbnn.diagnostics.saved import PAPER_PRUNED, PAPER_UNITS, diagnose_saved
from vbnn.diagnostics.trajectories import TrajectoryLogger, plot_trajectories, rebound
from vbnn.plots import pyplot, save_figure
from vbnn.regression.engine import train_stack
from vbnn.regression.runs import VIConfig
from vbnn.regression.saved_models import load_model, save_model
from vbnn.stores.atomic import write_atomic
from vbnn.stores.markdown import markdown_table
from vbnn_lab.overpruning.prior_network import (
    fit_prior_network,
    posterior_function_samples,
    sample_prior_network,
)

FULL_ITERATIONS, QUICK_ITERATIONS = 5000, 3000


def _setting(
    quick: bool, iterations: int | None, splits: Sequence[int] | None, full_splits: Sequence[int]
) -> tuple[int, list[int], str]:
    iterations = iterations or (QUICK_ITERATIONS if quick else FULL_ITERATIONS)
    splits = list(splits) if splits is not None else ([0] if quick else list(full_splits))
    note = f"{iterations} iterations, boston splits {splits}" + (
        " (quick mode: the paper runs 5000 iterations)" if iterations < FULL_ITERATIONS else ""
    )
    return iterations, splits, note


# Parameters: a figure's entry point; quick mode, data folder and the overrides are independent
def figure2_5(
    out: str | Path,
    *,
    quick: bool = False,
    data_dir: str | Path | None = None,
    iterations: int | None = None,
    splits: Sequence[int] | None = None,
    progress: bool = False,
    figure5_units: int | None = None,
) -> list[Path]:
    """Train MF on boston (paper settings), save it, and write Figures 2 and 5 and the counts.

    Full: splits 0-19 (one batched stack); quick: split 0 and 3000 iterations.
    Writes ``model-mf-boston/`` (a saved model), ``figure2.png``, ``figure5.png`` (split of the
    first model), ``pruning_counts.csv``, ``units_split_<k>.csv`` and ``pruning_counts.md``.
    """

    out = Path(out)
    iterations, splits, note = _setting(quick, iterations, splits, range(20))
    dataset = load_uci("boston", data_dir)
    config = VIConfig(family="mf", iterations=iterations)
    trained = train_stack(config, stack_splits(dataset, splits), progress)
    metrics = {str(r.split): r.test_log_likelihood for r in trained.results}
    folder = save_model(out / "model-mf-boston", trained.model, trained.likelihood, config,
                        dataset.inputs.shape[1], splits, dataset="boston",
                        metadata={"test_log_likelihood": metrics})  # fmt: skip
    report = diagnose_saved(load_model(folder), dataset, out, figure5_units=figure5_units)
    counts = report.counts["pruned"]
    lines = [
        "# Over-pruning of MF on boston (Figures 2 and 5)",
        "",
        f"Setting: {note}; prior N(0, 1), 50 tanh units, posterior std initialised to 1e-4.",
        "Rule: vbnn.diagnostics.pruning.pruned_units with its default thresholds",
        "(output weight SNR < 3 and every incoming weight's KL to the prior < 0.05 nats).",
        "",
        f"Paper: {PAPER_PRUNED} of {PAPER_UNITS} units pruned (one network).",
        f"Ours: {counts.mean():.1f} of {PAPER_UNITS} on average over {len(counts)} split(s) "
        f"(min {counts.min()}, max {counts.max()}); per split:",
        "",
        markdown_table(report.counts),
        "",
    ]
    write_atomic(out / "pruning_counts.md", "\n".join(lines))
    return [folder, *report.written, out / "pruning_counts.md"]


def figure3(
    out: str | Path,
    quick: bool = False,
    iterations: int | None = None,
    seed: int = 0,
    samples: int = 20,
) -> list[Path]:
    """Prior-network simulation: ``figure3.png`` and ``figure3_counts.csv``.

    Top row: the data (N = 5, 25, 100) and the true function; bottom row: ``samples`` functions
    drawn from the fitted MF posterior against the truth, with the number of pruned units.
    Quick: 3000 iterations instead of 5000.
    """
    import pandas as pd
    import torch

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    iterations = iterations or (QUICK_ITERATIONS if quick else FULL_ITERATIONS)
    network = sample_prior_network(torch.Generator().manual_seed(seed))
    fits = fit_prior_network(network, iterations=iterations, seed=seed)
    grid = torch.linspace(-4, 4, 400, dtype=torch.float64)
    truth = network(grid.unsqueeze(-1))
    figure, axes = pyplot().subplots(2, len(fits), figsize=(4.2 * len(fits), 6.4), squeeze=False)
    for column, result in enumerate(fits):
        top, bottom = axes[0, column], axes[1, column]
        for axis in (top, bottom):
            axis.plot(grid, truth, "k-", lw=1.5, label="true f")
            axis.plot(result.x[:, 0], result.y, "o", color="C3", ms=4, label="data")
        top.set_title(f"N = {result.rows}", fontsize=10)
        functions = posterior_function_samples(result.model, grid, samples, seed)
        for function in functions:
            bottom.plot(grid, function, color="C0", lw=0.6, alpha=0.6)
        bottom.set_title(f"posterior samples; {result.pruned} of 50 units pruned", fontsize=9)
    axes[0, 0].legend(fontsize=8)
    figure.suptitle(f"Figure 3: MF initialised at the true weights, {iterations} iterations",
                    fontsize=10)  # fmt: skip
    figure.tight_layout()
    paths = [out / "figure3.png", out / "figure3_counts.csv"]
    save_figure(figure, paths[0], dpi=110)
    counts = pd.DataFrame(
        {"N": [f.rows for f in fits], "pruned": [f.pruned for f in fits], "units": 50,
         "iterations": iterations, "seed": seed}
    )  # fmt: skip
    write_atomic(paths[1], counts.to_csv(index=False))
    return paths


# Parameters: a figure's entry point; quick mode, data folder and the overrides are independent
def figure4(
    out: str | Path,
    *,
    quick: bool = False,
    data_dir: str | Path | None = None,
    iterations: int | None = None,
    splits: Sequence[int] | None = None,
    every: int | None = None,
    progress: bool = False,
) -> list[Path]:
    """Trajectories of MF on boston: ``figure4.png``, ``trajectories.csv``, ``rebound.csv``.

    Logs every 50 iterations (quick: 100) on splits 0-2 (quick: split 0). ``rebound.csv`` has,
    per split and set, the minimum predictive NLL, where it occurred, and the final value.
    """
    import pandas as pd

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    iterations, splits, note = _setting(quick, iterations, splits, range(3))
    every = every or (100 if quick else 50)
    data = stack_splits(load_uci("boston", data_dir), splits)
    config = VIConfig(family="mf", iterations=iterations)
    loggers: list[TrajectoryLogger] = []

    def make_logger(model, likelihood):
        loggers.append(TrajectoryLogger(every, model, likelihood, data, prior_std=1.0))
        return loggers[-1]

    train_stack(config, data, progress, make_callback=make_logger)
    frame = loggers[0].frame()
    write_atomic(out / "trajectories.csv", frame.to_csv(index=False))
    rows = [
        {"split": split, "set": column.removesuffix("_nll"), **rebound(frame, column, split)}
        for split in splits
        for column in ("train_nll", "test_nll")
    ]
    write_atomic(out / "rebound.csv", pd.DataFrame(rows).to_csv(index=False))
    figure = plot_trajectories(frame, out / "figure4.png", split=splits[0],
                               title=f"Figure 4: MF on boston, {note}")  # fmt: skip
    return [figure, out / "trajectories.csv", out / "rebound.csv"]
