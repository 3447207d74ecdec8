"""Counting rules for pruned units: each rule on a hand-built network, and the files written."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch
from test_pruning import PRIOR_STD, hand_built_mean_field

from vbnn.core.randomness import ModelGenerators
from vbnn.diagnostics.pruning import diagnose_units
from vbnn_lab.overpruning.pruning_rules import RULES, count_rules, rule_counts

# Units of hand_built_mean_field (test_pruning.py): 0 output ~0 but incoming learned; 1, 3, 4
# output ~0 and at the prior; 2 active; 5 at the prior with an uncertain output (std 0.5);
# 6 at the prior with a small but certain output weight (0.05 +- 0.01).
EXPECTED = {
    "default (SNR < 3 and KL < 0.05)": [1, 3, 4, 5],
    "SNR < 3 only": [0, 1, 3, 4, 5],
    "KL < 0.05 only": [1, 3, 4, 5, 6],
    "default and |E v| + 2 std v < 0.1": [1, 3, 4],
    "|E v| + 2 std v < 0.1 only": [0, 1, 3, 4, 6],
    # sqrt(E v^2) * spread of tanh: unit 5 moves the output by ~0.5 * 0.65, unit 6 by ~0.03
    "activation spread (output moves < 0.05)": [0, 1, 3, 4, 6],
}


def test_each_rule_finds_its_units_on_a_hand_built_network() -> None:
    model = hand_built_mean_field()
    x = torch.randn(1, 200, 3, generator=torch.Generator().manual_seed(1))
    diagnostics = diagnose_units(model, x, PRIOR_STD, ModelGenerators([2]), samples=25)
    assert set(RULES) == set(EXPECTED)
    for name, rule in RULES.items():
        assert rule(diagnostics)[0].nonzero().flatten().tolist() == EXPECTED[name], name
    counts = rule_counts(diagnostics, [7])
    assert counts.set_index("rule")["count"].to_dict() == {k: len(v) for k, v in EXPECTED.items()}
    assert set(counts["split"]) == {7}


def test_count_rules_writes_every_rule_and_prior(data_dir: Path, tmp_path: Path) -> None:
    written = count_rules(tmp_path, data_dir, iterations=30, splits=[0, 1],
                          priors={"N(0, 1)": 1.0, "N(0, 0.5^2)": 0.5})  # fmt: skip
    assert [p.name for p in written] == ["pruning_rules.csv", "pruning_rules.md"]
    counts = pd.read_csv(tmp_path / "pruning_rules.csv")
    assert len(counts) == 2 * 2 * len(RULES)
    assert counts["count"].between(0, 50).all()
    text = (tmp_path / "pruning_rules.md").read_text()
    assert "N(0, 0.5^2)" in text and "test LL" in text
