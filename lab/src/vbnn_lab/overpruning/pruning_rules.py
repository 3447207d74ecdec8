"""How many of boston's 50 MF units are pruned, under each counting rule and two priors.

Trippe & Turner 2017 (section 3 and Figures 2, 5) count 39 of 50
units of one MF network on boston whose "output weight [is] confidently around zero with all
incoming weights sitting precisely at the prior"; it states no numerical rule. Our default rule
(``diagnostics.pruning.pruned_units``) counts 43.9 with the N(0, 1) prior of Figure 2. This module
trains MF on boston's splits under a given set of prior stds and counts each model's units
under every rule of ``RULES`` (thresholds in the names):

    default          SNR |E v| / std v < 3 and every incoming KL to the prior < 0.05 nats
    SNR only         SNR < 3
    KL only          every incoming KL < 0.05 nats
    default + |E v| + 2 std v < 0.1   the paper's "confidently around zero" added to the default
    |E v| + 2 std v < 0.1 only
    activation spread   the unit moves the output by less than 0.05 (standardised target units):
                     sqrt(E v^2) * mean_s std_x h_j(x; w_s) < 0.05, with 25 draws w_s ~ q of the
                     incoming weights (the bottom panels of Figures 2 and 5)

Writes ``pruning_rules.csv`` (prior, split, rule, count) and ``pruning_rules.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pandas as pd
import torch

from vbnn.core.randomness import ModelGenerators
from vbnn.data import load_uci
from vbnn.data.splits import stack_splits
from vbnn.diagnostics.pruning import KL_THRESHOLD, UnitDiagnostics, diagnose_units, pruned_units
from vbnn.diagnostics.saved import PAPER_PRUNED, PAPER_UNITS
from vbnn.regression.engine import train_stack
from vbnn.regression.presets import preset
from vbnn.regression.runs import VIConfig
from vbnn.stores.atomic import write_atomic
from vbnn.stores.markdown import markdown_table

OUTPUT_TOLERANCE = 0.1  # |E v| + 2 std v below it: "confidently around zero"
ACTIVATION_TOLERANCE = 0.05  # output movement, standardised target units
SAMPLES = 25  # weight draws, as in the paper's activation histograms


def confidently_zero(diagnostics: UnitDiagnostics, tolerance: float = OUTPUT_TOLERANCE):
    """(M, H): |E v_jo| + 2 std v_jo < tolerance for every output o."""
    spread = diagnostics.output_mean.abs() + 2 * diagnostics.output_std
    return (spread < tolerance).all(-1)


def output_movement(diagnostics: UnitDiagnostics) -> torch.Tensor:
    """(M, H): sqrt(E v_j^2) * mean over draws of std over the data of h_j(x; w_s)."""
    second_moment = (diagnostics.output_mean**2 + diagnostics.output_std**2).sum(-1).sqrt()
    spread = diagnostics.sampled_activations.std(dim=2).mean(dim=0)  # (M, H)
    return second_moment * spread


Rule = Callable[[UnitDiagnostics], torch.Tensor]

RULES: dict[str, Rule] = {
    "default (SNR < 3 and KL < 0.05)": lambda d: pruned_units(d),
    "SNR < 3 only": lambda d: (d.output_snr < 3.0).all(-1),
    "KL < 0.05 only": lambda d: d.max_incoming_kl < KL_THRESHOLD,
    "default and |E v| + 2 std v < 0.1": lambda d: pruned_units(d, output_tolerance=0.1),
    "|E v| + 2 std v < 0.1 only": lambda d: confidently_zero(d),
    "activation spread (output moves < 0.05)": lambda d: output_movement(d) < ACTIVATION_TOLERANCE,
}


def rule_counts(diagnostics: UnitDiagnostics, splits: Sequence[int]) -> pd.DataFrame:
    """Long frame: split, rule, count (pruned units of that split's model under the rule)."""
    rows = []
    for name, rule in RULES.items():
        counts = rule(diagnostics).sum(dim=-1)
        pairs = zip(splits, counts.tolist(), strict=True)
        rows += [{"split": k, "rule": name, "count": int(c)} for k, c in pairs]
    return pd.DataFrame(rows)


def default_priors() -> dict[str, float]:
    """N(0, 1) (Figures 2 and 5) and boston MF's tuned prior std from the Table 1 run."""
    tuned = preset("boston", "mf")[0]["prior_std"]
    return {"N(0, 1)": 1.0, f"tuned N(0, {tuned:.4g}^2)": tuned}


# Parameters: the study's entry point; each option is independent (the CLI maps flags onto them)
def count_rules(
    out: str | Path,
    data_dir: str | Path | None = None,
    *,
    iterations: int = 5000,
    splits: Sequence[int] = tuple(range(20)),
    priors: Mapping[str, float] | None = None,
    seed: int = 0,
    progress: bool = False,
) -> list[Path]:
    """Train MF on boston (paper settings, one stack per prior), count under every rule.

    Returns the paths written: ``pruning_rules.csv`` and ``pruning_rules.md`` in ``out``.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    priors = dict(priors) if priors is not None else default_priors()
    dataset = load_uci("boston", data_dir)
    frames, fits = [], []
    for label, prior_std in priors.items():
        config = VIConfig(family="mf", iterations=iterations, prior_std=prior_std,
                             seed=seed)  # fmt: skip
        trained = train_stack(config, stack_splits(dataset, list(splits)), progress)
        generators = ModelGenerators.for_keys(seed, list(splits), "eval")
        diagnostics = diagnose_units(trained.model, trained.data.x_train, prior_std, generators,
                                     samples=SAMPLES)  # fmt: skip
        frames.append(rule_counts(diagnostics, list(splits)).assign(prior=label))
        test = torch.as_tensor(trained.metrics.log_likelihood, dtype=torch.float64)
        fits.append(f"{label}: test LL {test.mean():.3f} +- {test.std() / len(test) ** 0.5:.3f}")
    counts = pd.concat(frames, ignore_index=True)[["prior", "split", "rule", "count"]]
    write_atomic(out / "pruning_rules.csv", counts.to_csv(index=False))
    table = counts.groupby(["rule", "prior"], sort=False)["count"].agg(["mean", "min", "max"])
    wide = table["mean"].unstack("prior").map(lambda v: f"{v:.1f}")
    for prior in priors:
        low, high = table["min"].unstack("prior")[prior], table["max"].unstack("prior")[prior]
        wide[prior] = wide[prior] + " (" + low.astype(str) + "-" + high.astype(str) + ")"
    wide = wide.loc[list(RULES)]
    lines = [
        f"# Pruned units of MF on boston under each counting rule (of {PAPER_UNITS})",
        "",
        f"Paper: {PAPER_PRUNED} of {PAPER_UNITS} (one network; Trippe & Turner 2017 "
        "section 3). Ours: mean "
        f"(min-max) over {len(splits)} split(s), {iterations} iterations, 50 tanh units, "
        "posterior std initialised to 1e-4, Adam 0.005.",
        "",
        markdown_table(wide, index=True),
        "",
        *fits,
        "",
    ]
    write_atomic(out / "pruning_rules.md", "\n".join(lines))
    return [out / "pruning_rules.csv", out / "pruning_rules.md"]
