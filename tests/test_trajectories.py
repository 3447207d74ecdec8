"""Trajectory logger: terms are the objective's, NLLs are evaluate()'s, training is unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import vbnn
from vbnn.core.randomness import ModelGenerators
from vbnn.data.splits import StackedSplits
from vbnn.diagnostics.trajectories import TrajectoryLogger, plot_trajectories, rebound
from vbnn.priors.gaussian import GaussianPrior
from vbnn.regression.engine import train_stack
from vbnn.regression.evaluation import evaluate
from vbnn.regression.methods import method_config
from vbnn.regression.stack import build_stack

CONFIG = method_config("mf", hidden=(5,), iterations=30, posterior_std=0.01)


def _data() -> StackedSplits:
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(2, 50, 2, generator=generator)
    y = torch.tanh(x[..., 0]) + 0.1 * torch.randn(2, 50, generator=generator)
    return StackedSplits(
        (0, 1), x[:, :40], y[:, :40], x[:, 40:], y[:, 40:], torch.tensor([2.0, 1.0])
    )


def test_logger_rows_match_the_objective_and_the_evaluation(tmp_path: Path) -> None:
    data = _data()
    loggers: list[TrajectoryLogger] = []

    def make(model, likelihood):
        loggers.append(TrajectoryLogger(10, model, likelihood, data, samples=7, seed=5,
                                        prior_std=CONFIG.prior_std))  # fmt: skip
        return loggers[0]

    trained = train_stack(CONFIG, data, make_callback=make)
    frame = loggers[0].frame()
    assert frame["iteration"].tolist() == [1, 1, 10, 10, 20, 20, 30, 30]
    # Iteration 1's terms are those of the initial model: its KL is the closed form at the init.
    initial, _ = build_stack(CONFIG, 2, [0, 1])
    first = frame[frame["iteration"] == 1]
    torch.testing.assert_close(
        torch.tensor(first["kl"].tolist()), vbnn.kl(initial, GaussianPrior(CONFIG.prior_std))
    )
    torch.testing.assert_close(
        torch.tensor((first["expected_log_likelihood"] - first["kl"]).tolist()),
        torch.tensor(first["elbo"].tolist()),
    )
    # The last row's test NLL is -evaluate() of the trained model with the logger's streams.
    # Replay the logger's draws before it: 7 LRT passes (noise (N, 5) then (N, 1)) on the
    # training (40 rows) and test (10 rows) sets at iterations 1, 10, 20, then the training set.
    generators = ModelGenerators.for_keys(5, [0, 1], "eval")
    for rows in [40, 10] * 3 + [40]:
        for _ in range(7):
            generators.randn(rows, 5), generators.randn(rows, 1)
    metrics = evaluate(trained.model, trained.likelihood, data.x_test, data.y_test,
                       data.target_scale, generators, samples=7)  # fmt: skip
    last = frame[frame["iteration"] == 30]
    torch.testing.assert_close(torch.tensor(last["test_nll"].tolist()), -metrics.log_likelihood)
    assert summary_is_consistent(frame)
    path = plot_trajectories(frame, tmp_path / "figure4.png", split=1)
    assert path.stat().st_size > 0


def summary_is_consistent(frame) -> bool:
    stats = rebound(frame, "train_nll", split=0)
    rows = frame[frame["split"] == 0]
    return stats["min"] == rows["train_nll"].min() and stats["final"] == rows["train_nll"].iloc[-1]


def test_logging_does_not_change_training() -> None:
    data = _data()
    plain = train_stack(CONFIG, data)
    logged = train_stack(
        CONFIG, data, make_callback=lambda m, lik: TrajectoryLogger(3, m, lik, data, samples=4)
    )
    for name, value in plain.model.state_dict().items():
        assert torch.equal(value, logged.model.state_dict()[name]), name
    assert plain.results == [
        type(r)(r.split, r.test_log_likelihood, r.test_rmse, p.train_seconds, r.stopped_iteration)
        for r, p in zip(logged.results, plain.results, strict=True)
    ]
    with pytest.raises(ValueError, match="every=0"):
        TrajectoryLogger(0, plain.model, plain.likelihood, data)
