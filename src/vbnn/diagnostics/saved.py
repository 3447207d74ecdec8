"""Diagnostics of saved model folders: over-pruning of a saved stack (``vbnn diagnose pruning``)
and the full report of a saved estimator on a table (``vbnn diagnose report``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from vbnn.classification.estimator import PARAMS_FILE as CLASSIFIER_FILE
from vbnn.classification.estimator import BayesianClassifier
from vbnn.core.randomness import ModelGenerators
from vbnn.data.splits import stack_splits
from vbnn.data.table import read_table
from vbnn.data.uci import RegressionDataset
from vbnn.diagnostics.pruning import UnitDiagnostics, count_pruned, diagnose_units
from vbnn.diagnostics.pruning_plots import plot_units, representative_units
from vbnn.diagnostics.report import DiagnosisReport, diagnose
from vbnn.plots import save_figure
from vbnn.regression.estimator import BayesianRegressor
from vbnn.regression.saved_models import CONFIG_FILE as MODEL_FILE
from vbnn.regression.saved_models import ModelFileError, SavedModel
from vbnn.stores.atomic import write_atomic

PAPER_PRUNED, PAPER_UNITS = 39, 50  # boston MF, Trippe & Turner 2017 section 3


@dataclass(frozen=True)
class PruningReport:
    """Per-model counts, per-unit tables, and the files written."""

    counts: pd.DataFrame  # one row per model: split, pruned, units, test LL if stored
    units: dict[int, pd.DataFrame]  # split -> per-unit table
    diagnostics: UnitDiagnostics
    written: list[Path]


def is_paper_setting(saved: SavedModel) -> bool:
    """Whether the paper's count (MF, 50 tanh units, boston) is the comparison for ``saved``."""
    config = saved.config
    return (saved.dataset == "boston" and config.method == "mf"
            and tuple(config.hidden) == (50,) and config.activation.value == "tanh")  # fmt: skip


def diagnose_saved(
    saved: SavedModel,
    dataset: RegressionDataset | None,
    out: str | Path | None = None,
    seed: int = 0,
    figure5_units: int | None = None,
    inputs: torch.Tensor | None = None,
) -> PruningReport:
    """Diagnose every model of a saved stack on its own training inputs (standardised).

    The inputs are the UCI ``dataset``'s training rows of each saved split, or, for a model
    trained on other data, ``inputs`` (N, I), already standardised as the model saw them.
    With ``out``, writes ``pruning_counts.csv``, ``units_split_<k>.csv`` and the Figure 2 and
    Figure 5 panels of the first model (``figure2.png``, ``figure5.png``; Figure 5 shows the
    first ``figure5_units`` units, all by default). The paper's count is quoted only for the
    paper's own setting (``is_paper_setting``).
    """
    x_train, data_name = _training_inputs(saved, dataset, inputs)
    diagnostics = diagnose_units(
        saved.model,
        x_train,
        saved.config.prior_std,
        ModelGenerators.for_keys(seed, saved.keys, "eval"),
        samples=25,
    )
    pruned = count_pruned(diagnostics)
    units = diagnostics.output_mean.shape[1]
    stored = saved.metadata.get("test_log_likelihood", {})
    counts = pd.DataFrame(
        {
            "split": list(saved.keys),
            "pruned": pruned.tolist(),
            "units": units,
            "test_log_likelihood": [stored.get(str(k)) for k in saved.keys],
        }
    )
    tables = {k: diagnostics.frame(m) for m, k in enumerate(saved.keys)}
    written: list[Path] = []
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / "pruning_counts.csv", counts.to_csv(index=False))
        written.append(out / "pruning_counts.csv")
        for split, table in tables.items():
            write_atomic(out / f"units_split_{split}.csv", table.to_csv())
            written.append(out / f"units_split_{split}.csv")
        written += _figures(out, saved, diagnostics, pruned, data_name, figure5_units)
    return PruningReport(counts=counts, units=tables, diagnostics=diagnostics, written=written)


def _training_inputs(
    saved: SavedModel, dataset: RegressionDataset | None, inputs: torch.Tensor | None
) -> tuple[torch.Tensor, str]:
    """Each saved model's training inputs (M, N, I) and what they are called in the figures."""
    if dataset is not None:
        if saved.dataset is not None and saved.dataset != dataset.name:
            raise ValueError(
                f"diagnose_saved: the model was trained on {saved.dataset!r}, "
                f"data is {dataset.name!r}"
            )
        x_train = stack_splits(dataset, saved.keys, saved.config.torch_dtype).x_train
        return x_train, dataset.name
    if inputs is not None:
        if inputs.dim() != 2 or inputs.shape[1] != saved.in_features:
            raise ValueError(
                f"diagnose_saved: inputs {tuple(inputs.shape)}, expected (N, {saved.in_features})"
            )
        x_train = inputs.to(saved.config.torch_dtype).expand(len(saved.keys), *inputs.shape)
        return x_train, "the given inputs"
    raise ValueError("diagnose_saved: give the UCI data set or the model's training inputs")


def _figures(
    out: Path,
    saved: SavedModel,
    diagnostics: UnitDiagnostics,
    pruned: torch.Tensor,
    data_name: str,
    figure5_units: int | None,
) -> list[Path]:
    """Figure 2 (an active and a pruned unit) and Figure 5 (the first ``figure5_units`` units)
    of the first saved model, written to ``out``."""
    units = diagnostics.output_mean.shape[1]
    name = f"{saved.config.method.upper()} on {data_name}, model {saved.keys[0]}"
    count = f"{int(pruned[0])} of {units} units pruned"
    if is_paper_setting(saved):
        count += f" (paper: {PAPER_PRUNED} of {PAPER_UNITS})"
    figure2 = plot_units(
        diagnostics,
        representative_units(diagnostics),
        out / "figure2.png",
        title=f"Figure 2: {name}\nactive (left) and pruned unit; {count}",
    )
    figure5 = plot_units(
        diagnostics,
        list(range(units if figure5_units is None else min(figure5_units, units))),
        out / "figure5.png",
        title=f"Figure 5: every hidden unit, {name}. {count}",
    )
    return [figure2, figure5]


def load_estimator(folder: str | Path) -> BayesianRegressor | BayesianClassifier:
    """The estimator saved in ``folder``: a ``BayesianClassifier`` where ``classifier.json`` is,
    a ``BayesianRegressor`` where ``model.json`` holds an estimator's settings; on the CPU.

    Raises:
        ModelFileError: no such folder, a folder holding neither, or a model stack saved by
            ``vbnn uci --save-model`` (diagnosed by ``vbnn diagnose pruning``).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFileError(f"{folder}: no such folder (expected a saved estimator)")
    if (folder / CLASSIFIER_FILE).is_file():
        return BayesianClassifier.load(folder)
    if not (folder / MODEL_FILE).is_file():
        raise ModelFileError(
            f"{folder}: not a saved estimator (neither {CLASSIFIER_FILE}, written by "
            f"BayesianClassifier.save, nor {MODEL_FILE}, written by BayesianRegressor.save)"
        )
    try:
        metadata = json.loads((folder / MODEL_FILE).read_text()).get("metadata", {})
    except (json.JSONDecodeError, AttributeError) as error:
        raise ModelFileError(f"{folder / MODEL_FILE}: not a saved model ({error})") from None
    if "estimator" not in metadata:
        raise ModelFileError(
            f"{folder}: a model stack (vbnn uci --save-model), not a saved BayesianRegressor; "
            "diagnose it with vbnn diagnose pruning"
        )
    return BayesianRegressor.load(folder, device="cpu")


def diagnose_estimator(
    folder: str | Path, table: str | Path, target: str, samples: int = 32, seed: int = 0
) -> DiagnosisReport:
    """``diagnose`` the estimator saved in ``folder`` (``load_estimator``) on the rows of a CSV
    ``table`` (``data.table.read_table``) whose column ``target`` holds y.

    Raises:
        ModelFileError: ``folder`` is not a saved estimator.
        DataError: the table cannot be read (file, line and column named).
        ValueError: the table's input columns do not match the model's inputs in number.
    """
    estimator = load_estimator(folder)
    x, y, columns = read_table(table, target)
    if len(columns) != estimator.n_features_in_:
        raise ValueError(
            f"{table}: {len(columns)} input columns {columns} besides the target {target!r}; "
            f"the model in {folder} was fit on {estimator.n_features_in_}"
        )
    return diagnose(estimator, x, y, samples=samples, seed=seed)


def write_report(
    report: DiagnosisReport, json_path: str | Path | None, figure_path: str | Path | None
) -> list[Path]:
    """Write ``report.to_dict()`` as JSON and ``report.plot()`` as a figure, each where a path
    is given (atomically); returns the paths written."""
    written = []
    if json_path is not None:
        written.append(write_atomic(json_path, json.dumps(report.to_dict(), indent=1) + "\n"))
    if figure_path is not None:
        written.append(save_figure(report.plot(), figure_path))
    return written
