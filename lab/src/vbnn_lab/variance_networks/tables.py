"""Tables of the variance-networks reproduction (see ``variance_networks``), assembled from the
networks of ``runs`` (each trained, resumed or reloaded there)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from vbnn.classification.training import plot_phase_transition
from vbnn.data.paths import published_path
from vbnn.stores.atomic import write_atomic
from vbnn_lab.variance_networks.budget import TABLE1, TABLE1_ACTIVATION, TANH, Budget
from vbnn_lab.variance_networks.parts import (
    lenet_kappa,
    plot_curves,
    plot_kappa_histograms,
    run_toy,
    sparse_ensemble_study,
    variance_pruning_study,
)
from vbnn_lab.variance_networks.runs import DENSE1, NetworkRun, train_run


def published() -> dict:
    path = published_path()
    return json.loads(path.read_text()) if path.is_file() else {}


def markdown(frame: pd.DataFrame) -> str:
    """A pipe table (pandas.to_markdown needs tabulate, which the project does not depend on)."""
    frame = frame.reset_index()
    rows = frame.astype(object).itertuples(index=False)
    cells = [[f"{v:.2f}" if isinstance(v, float) else str(v) for v in row] for row in rows]
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def write_tracking(record: dict, kappa: dict, out: Path, prefix: str, kappa_prefix: str):
    """The per-epoch tracking of a dense1 layer-wise run: ``<prefix>tracking.csv``, its phase
    transition figure and, when kappa was tracked, ``<kappa_prefix>kappa_histograms.png``."""
    tracking = pd.DataFrame(record["tracking"])
    write_atomic(out / f"{prefix}tracking.csv", tracking.to_csv(index=False))
    plot_phase_transition(tracking, out / f"{prefix}phase_transition.png",
                          "dense1 layer-wise, softplus")  # fmt: skip
    if kappa:
        plot_kappa_histograms(kappa, out / f"{kappa_prefix}kappa_histograms.png")
    return tracking


def make_tables(out: Path, budget: Budget, data, seed: int, progress: bool = True,
                device: str = "cpu") -> None:  # fmt: skip
    reference = published()
    sections = []
    train_x, train_y, test_x, test_y = data

    def train(name: str):
        return train_run(NetworkRun(name, budget, seed, device), data, out, progress)

    # Table 1 of Neklyudov et al. 2019 (other layers deterministic; non-linearity per row:
    # TABLE1_ACTIVATION)
    rows = {}
    for label in TABLE1:
        activation = TABLE1_ACTIVATION.get(label, "softplus")
        is_layer = label == "layer"
        model, record, kappa_store = train(f"table1-{label}")
        paper = reference.get("variance_networks_parameterizations", {}).get(label, [None] * 5)
        elbo = record["elbo"]
        rows[label] = {
            "activation": activation,
            "ELBO/1000": elbo["ELBO"] / 1000, "data/1000": elbo["data_term"] / 1000,
            "KL/1000": elbo["KL"] / 1000,
            "mean-prop acc": record["accuracy"]["deterministic"],
            "ensemble acc": record["accuracy"]["ensemble"],
            "dense1 log alpha": record["mean_log_alpha"].get("dense1", float("nan")),
            "paper ELBO": paper[0], "paper data": paper[1], "paper KL": paper[2],
            "paper mean-prop": paper[3], "paper ensemble": paper[4],
        }  # fmt: skip
        if is_layer:
            write_tracking(record, kappa_store, out, "table1_layer_", "")
            kappa = lenet_kappa(model, DENSE1, train_x[: budget.kappa_size],
                                train_y[: budget.kappa_size])  # fmt: skip
            study = (test_x[: budget.study_size], test_y[: budget.study_size])
            sparse = sparse_ensemble_study(model, DENSE1, kappa, study, samples=budget.samples,
                                           seed=seed)  # fmt: skip
            write_atomic(out / "sparse_ensemble.csv", sparse.to_csv(index=False))
            plot_curves(sparse, "log10_threshold",
                        ["ensemble_acc_mean", "ensemble_acc_zero"], out / "sparse_ensemble.png",
                        "sparse ensemble (Neklyudov et al. 2018 Fig. 5)")  # fmt: skip
            sections.append(
                "## Sparse ensemble (Neklyudov et al. 2018 Fig. 5)\n\n" + markdown(sparse)
            )
        if label == "zero-mean":
            study = (test_x[: budget.study_size], test_y[: budget.study_size])
            pruning = variance_pruning_study(model, DENSE1, study, samples=budget.samples,
                                             seed=seed)  # fmt: skip
            write_atomic(out / "variance_pruning.csv", pruning.to_csv(index=False))
            plot_curves(pruning, "sparsity", ["ensemble"], out / "variance_pruning.png",
                        "pruning by sigma (Neklyudov et al. 2019 Fig. 5)")  # fmt: skip
            sections.append(
                "## Pruning by sigma (Neklyudov et al. 2019 Fig. 5)\n\n" + markdown(pruning)
            )
    table1 = pd.DataFrame(rows).T
    write_atomic(out / "table1_parameterizations.csv", table1.to_csv())
    sections.insert(0, "## Table 1 of Neklyudov et al. 2019 (ELBO terms in thousands of "
                    "nats, totals on the training subset)\n\n" + markdown(table1))  # fmt: skip

    # Table 2 of Neklyudov et al. 2019, LeNet-5 rows
    published_2 = reference.get("variance_networks_accuracy", {}).get("LeNet5_MNIST", {})
    rows = {}
    for label in ("Dropout", "Variance"):
        _, record, _ = train(f"table2-{label.lower()}")
        accuracy = record["accuracy"]
        paper = published_2.get(label, [None] * 3)
        rows[label] = {"1 sample": accuracy["sample"], "deterministic": accuracy["deterministic"],
                       f"{budget.samples} samples": accuracy["ensemble"],
                       "zero-mean": accuracy["zero-mean"],
                       "paper 1 sample": paper[0], "paper det": paper[1],
                       "paper 20 samples": paper[2]}  # fmt: skip
        tracking = pd.DataFrame(record["tracking"])
        write_atomic(out / f"table2_{label.lower()}_tracking.csv", tracking.to_csv(index=False))
        plot_phase_transition(tracking, out / f"table2_{label.lower()}_phase_transition.png",
                              f"LeNet-5 {label}")  # fmt: skip
        rows[label].update({f"log alpha {k}": v for k, v in record["mean_log_alpha"].items()})
    table2 = pd.DataFrame(rows).T
    write_atomic(out / "table2_lenet5.csv", table2.to_csv())
    sections.insert(
        1,
        "## Table 2 of Neklyudov et al. 2019, LeNet-5 on MNIST (accuracy %)\n\n" + markdown(table2),
    )

    # appendix C of Neklyudov et al. 2019: tanh, no biases
    published_c = reference.get("variance_networks_other", {}).get("tanh_no_bias_LeNet5_MNIST", {})
    rows = {}
    for label in TANH:
        _, record, _ = train(f"tanh-{label}")
        paper = published_c.get(label, [None, None])
        rows[label] = {"stochastic": record["accuracy"]["sample"],
                       "ensemble": record["accuracy"]["ensemble"],
                       "deterministic": record["accuracy"]["deterministic"],
                       "paper stochastic": paper[0], "paper ensemble": paper[1]}  # fmt: skip
    table_c = pd.DataFrame(rows).T
    write_atomic(out / "appendix_c_tanh.csv", table_c.to_csv())
    sections.insert(
        2,
        "## Appendix C of Neklyudov et al. 2019: tanh, no biases (accuracy %)\n\n"
        + markdown(table_c),
    )

    # Fig. 1 of Neklyudov et al. 2019: toy problem, two initialisations trained as one stack
    toy = run_toy(out, (seed, seed + 1), budget.toy_steps, budget.toy_per_class)
    write_atomic(out / "toy_accuracy.csv", toy.to_csv())
    title = "Toy 4-class problem, 2-neuron variance bottleneck (Neklyudov et al. 2019 Fig. 1)"
    sections.insert(3, f"## {title}, test accuracy %\n\n" + markdown(toy))
    write_atomic(out / "summary.md", "\n\n".join(sections) + "\n")


def phase_transition_only(out: Path, budget: Budget, data, seed: int, progress: bool,
                          device: str = "cpu"):  # fmt: skip
    """The Table 1 layer-wise run alone, tracked every ``eval_every`` epochs (accuracy in four
    modes, mean log alpha, count of log10 kappa > 1.5); writes phase_only_tracking.csv and its
    plot."""
    run = NetworkRun("phase-only-layer", budget, seed, device)
    _, record, store = train_run(run, data, out, progress)
    return write_tracking(record, store, out, "phase_only_", "phase_only_")
