"""Command line: ``vbnn uci``, ``vbnn compare``, ``vbnn demo``, ``vbnn data download|check``,
``vbnn sweep``, ``vbnn diagnose pruning|report``, and ``vbnn reproduce`` where the papers'
reproductions (the lab beside the library) are installed."""

# The docstring above is ``vbnn --help``'s description. This module builds the parser from light
# modules only: each job (``cli_handlers``, ``comparison.command``, ``regression.sweep_command``) is
# imported when its subcommand runs, and an installed command adds its flags when it is parsed,
# so ``vbnn --help`` loads none of pandas, scikit-learn, SciPy, Optuna or matplotlib.

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib.metadata import entry_points
from typing import Any

from vbnn.comparison import arguments as compare_arguments
from vbnn.core.contracts import Activation
from vbnn.core.defaults import EARLY_STOPPING_ITERATIONS, ESTIMATOR_ITERATIONS, UCI_ITERATIONS
from vbnn.data import DATASETS, DataError
from vbnn.data.download import DEFAULT_BASE_URL
from vbnn.data.splits import parse_splits
from vbnn.layers.registry import FAMILIES
from vbnn.methods.registry import METHODS
from vbnn.regression.full_batch import NonFiniteLossError
from vbnn.regression.methods import add_runtime_arguments, check_method, method_names
from vbnn.regression.presets import GD_POSTERIOR_STD
from vbnn.regression.runs import TABLE1_METHODS, SGLDConfig, VIConfig
from vbnn.sweeps import arguments as sweep_arguments
from vbnn.sweeps.executors import SweepError

EMBEDDED = "diabetes"
# the group of entry points whose modules add subcommands to ``vbnn``
COMMANDS_GROUP = "vbnn.commands"
# subcommands that another package of this repository provides: name -> (help line, how to
# install it), so that the command without that package says what to install
PACKAGED_COMMANDS = {
    "reproduce": (
        "regenerate a paper's tables and figures",
        "the papers' reproductions are the vbnn-lab package, which is not installed: from the "
        "repository's root, pip install ./lab (or make install)",
    ),
}


def parse_methods(text: str) -> list[str]:
    """``all`` (Table 1's six), or comma-separated methods: es, map, sgld, or a family name,
    which VI fits (mf, gd, fc, vd-layer, ...), or a method of ``vbnn.methods`` that trains a
    network (ivon, ensemble, laplace, swag, ...: an MLP a split through ``vbnn.compare``)."""
    names = list(TABLE1_METHODS) if text == "all" else [n.strip() for n in text.split(",")]
    known = method_names()
    networks = [name for name, method in METHODS.items() if method.network and name not in known]
    for name in names:
        if name in FAMILIES and name not in known:  # a family the engine cannot train: why
            try:
                check_method(name)
            except ValueError as error:
                raise argparse.ArgumentTypeError(f"--method {text!r}: {error}") from None
    unknown = [name for name in names if name not in known and name not in networks]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"--method {text!r}: {', '.join(unknown)} unknown; choose from "
            f"{', '.join([*known, *networks])} or 'all'"
        )
    return names


def _add_training_flags(parser: argparse.ArgumentParser) -> None:
    defaults, sgld = VIConfig(), SGLDConfig()
    parser.add_argument("--splits", type=parse_splits, default=None, help="e.g. 0-19 (all)")
    parser.add_argument(
        "--iterations",
        type=int,
        default=None,
        help=f"{UCI_ITERATIONS}; ES {EARLY_STOPPING_ITERATIONS}",
    )
    preset_note = "default: the data set's tuned preset, else"
    parser.add_argument("--learning-rate", type=float, default=None,
                        help=f"Adam step ({preset_note} {defaults.learning_rate})")  # fmt: skip
    parser.add_argument("--prior-std", type=float, default=None,
                        help=f"prior std ({preset_note} {defaults.prior_std})")  # fmt: skip
    parser.add_argument(
        "--posterior-std",
        type=float,
        default=None,
        help="VI: the weights' posterior std at the start (MF, FC); GD keeps it fixed "
        f"({preset_note} {defaults.posterior_std}; GD {GD_POSTERIOR_STD})",
    )
    parser.add_argument("--noise-std", type=float, default=None, help="fix the noise std")
    parser.add_argument("--kl-weight", type=float, default=None, help=f"VI ({defaults.kl_weight})")
    parser.add_argument("--hidden", type=int, nargs="+", default=list(defaults.hidden))
    parser.add_argument(
        "--activation", choices=[a.value for a in Activation], default=defaults.activation.value
    )
    parser.add_argument("--test-samples", type=int, default=None,
                        help=f"VI: predictive samples ({defaults.test_samples})")  # fmt: skip
    parser.add_argument("--step-size", type=float, default=None,
                        help=f"SGLD: eta, eps_0 = eta / N ({preset_note} "
                        f"{sgld.step_size})")  # fmt: skip
    parser.add_argument(
        "--correlation-learning-rate",
        type=float,
        default=None,
        help="VI: Adam rate of the correlation parameters (FC's off-diagonal Cholesky entries, "
        "the low-rank factor; default: the learning rate)",
    )
    add_runtime_arguments(parser)
    parser.add_argument("--burn-in", type=int, default=None, help="SGLD (a fifth of the steps)")
    parser.add_argument("--thinning", type=int, default=None, help="SGLD (100 samples kept)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--chunk-size", type=int, default=None, help="models per batch (auto)")
    parser.add_argument("--data-dir", default=None, help="overrides $VBNN_DATA_DIR")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _run(target: str) -> Callable[[argparse.Namespace], None]:
    """The handler ``"module:function"``, imported only when its subcommand runs: the jobs load
    pandas, scikit-learn, SciPy or Optuna, which building the parser (``vbnn --help``) does not."""
    module, function = target.split(":")

    def handler(args: argparse.Namespace) -> None:
        getattr(importlib.import_module(module), function)(args)

    return handler


class _CommandParser(argparse.ArgumentParser):
    """A subcommand's parser that can add its flags when it first parses, not when it is built.

    Args:
        add_arguments: adds the flags (an installed command's ``add_arguments``, whose modules
            may be slow to import); None: the flags were added already.
    """

    def __init__(
        self,
        *args: Any,
        add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._add_arguments = add_arguments

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._add_arguments is not None:
            add_arguments, self._add_arguments = self._add_arguments, None
            add_arguments(self)
        return super().parse_known_args(args, namespace)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vbnn", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_CommandParser)

    uci = commands.add_parser("uci", help="train and evaluate on a UCI data set's splits")
    uci.add_argument("--dataset", required=True, choices=[*DATASETS, EMBEDDED])
    uci.add_argument(
        "--method",
        type=parse_methods,
        default=["mf"],
        help="es,map,mf,gd,fc,sgld or all (Table 1); any other family name (vd-layer, ...) "
        "is fitted by VI; ivon, ensemble, laplace, swag, ... train an MLP a split (vbnn compare)",
    )
    _add_training_flags(uci)
    uci.add_argument("--save-model", default=None, metavar="DIR", help="save the trained stacks")
    uci.set_defaults(handler=_run("vbnn.cli_handlers:command_uci"))

    fit = commands.add_parser("fit", help="fit a BayesianRegressor to your own CSV table")
    fit.add_argument("--data", default=None, metavar="FILE", help="CSV table with a header")
    fit.add_argument("--csv", default=None, help=argparse.SUPPRESS)  # the old spelling: an error
    fit.add_argument("--target", required=True, metavar="COLUMN", help="the column to predict")
    fit.add_argument("--family", choices=list(FAMILIES), default="mf")
    fit.add_argument("--hidden", type=int, nargs="*", default=[50], help="hidden widths")
    fit.add_argument("--iterations", type=int, default=ESTIMATOR_ITERATIONS)
    fit.add_argument("--test-fraction", type=float, default=0.2, help="rows held out (seeded)")
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("--save", default=None, metavar="DIR", help="save the fitted estimator")
    fit.set_defaults(handler=_run("vbnn.cli_handlers:command_fit"))

    compare = commands.add_parser("compare", help="which family for my data? families x folds",
                                  description=compare_arguments.DESCRIPTION)  # fmt: skip
    compare_arguments.add_arguments(compare)
    compare.set_defaults(handler=_run("vbnn.comparison.command:run"))

    demo = commands.add_parser("demo", help="all six methods on boston's 20 splits")
    _add_training_flags(demo)
    demo.set_defaults(handler=_run("vbnn.cli_handlers:command_demo"))

    data = commands.add_parser("data", help="download or check the UCI files")
    data_commands = data.add_subparsers(dest="data_command", required=True)
    fetch = data_commands.add_parser("download", help="fetch, verify checksums, write atomically")
    fetch.add_argument(
        "names", nargs="*", metavar="NAME", help="UCI names or cifar10, cifar100 (default: all UCI)"
    )
    fetch.add_argument("--base-url", default=DEFAULT_BASE_URL)
    fetch.add_argument("--data-dir", default=None)
    fetch.set_defaults(handler=_run("vbnn.cli_handlers:command_download"))
    status = data_commands.add_parser("check", help="which sets are present and verified")
    status.add_argument("--data-dir", default=None)
    status.set_defaults(handler=_run("vbnn.cli_handlers:command_check"))

    diagnose = commands.add_parser("diagnose", help="diagnostics of a saved model")
    diagnoses = diagnose.add_subparsers(dest="diagnosis", required=True)
    pruning = diagnoses.add_parser("pruning", help="over-pruned hidden units (Figures 2, 5)")
    pruning.add_argument("--model", required=True, metavar="DIR", help="from uci --save-model")
    pruning.add_argument("--data-dir", default=None, help="overrides $VBNN_DATA_DIR")
    pruning.add_argument("--out", default=None, metavar="DIR", help="write CSVs and figures")
    pruning.add_argument("--units", action="store_true", help="print the per-unit tables")
    pruning.add_argument("--data", default=None, metavar="FILE", help="training table (own data)")
    pruning.add_argument("--csv", default=None, help=argparse.SUPPRESS)  # old spelling: an error
    pruning.add_argument("--target", default=None, metavar="COLUMN", help="its target column")
    pruning.set_defaults(handler=_run("vbnn.cli_handlers:command_diagnose_pruning"))
    report = diagnoses.add_parser(
        "report", help="vbnn.diagnose of a saved BayesianRegressor or BayesianClassifier"
    )
    report.add_argument("--model", required=True, metavar="DIR", help="from the estimator's save")
    report.add_argument("--data", required=True, metavar="CSV", help="table to diagnose on")
    report.add_argument("--target", required=True, metavar="COLUMN", help="its target column")
    report.add_argument("--samples", type=int, default=32, help="weight samples (ensemble)")
    report.add_argument("--markdown", action="store_true", help="print the report as markdown")
    report.add_argument("--json", default=None, metavar="FILE", help="write the report as JSON")
    report.add_argument("--figure", default=None, metavar="FILE", help="write the report's plot")
    report.set_defaults(handler=_run("vbnn.cli_handlers:command_diagnose_report"))

    sweep = commands.add_parser("sweep", help=sweep_arguments.DESCRIPTION,
                                description=sweep_arguments.DESCRIPTION)  # fmt: skip
    sweep_arguments.add_arguments(sweep)
    sweep.set_defaults(handler=_run("vbnn.regression.sweep_command:run"))
    _add_installed_commands(commands)
    return parser


def _add_installed_commands(commands: argparse._SubParsersAction) -> None:
    """A subcommand for every entry point of ``COMMANDS_GROUP``; one that fails to import, or a
    ``PACKAGED_COMMANDS`` name that no package provides, becomes a subcommand that says why it
    cannot run and what to install.

    An entry point of the group names a module (``reproduce = "package.module"``) that defines
    ``DESCRIPTION: str`` (the help line), ``add_arguments(parser: argparse.ArgumentParser) ->
    None`` (its flags) and ``run(args: argparse.Namespace) -> None`` (the job); the entry
    point's name is the subcommand's.

    Raises:
        ValueError: an entry point is named like a built-in command (the entry point named).
    """
    found = {entry.name: entry for entry in entry_points(group=COMMANDS_GROUP)}
    for name in sorted(found.keys() | PACKAGED_COMMANDS.keys()):
        help_line, install = PACKAGED_COMMANDS.get(name) or (f"from {found[name].value}", "")
        unavailable = "not installed"
        if name in commands.choices:
            raise ValueError(f"entry point {name!r} of {COMMANDS_GROUP!r} ({found[name].value}) "
                             "names a built-in vbnn command")  # fmt: skip
        try:
            module = found[name].load() if name in found else None
        except ImportError as error:
            module, unavailable = None, "failed to import"
            install = (f"entry point {name!r} of {COMMANDS_GROUP!r} ({found[name].value}) "
                       f"failed to import: {type(error).__name__}: {error}")  # fmt: skip
        if module is None:
            missing = commands.add_parser(name, help=f"{help_line} ({unavailable})",
                                          description=install)  # fmt: skip
            missing.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
            missing.set_defaults(handler=_not_installed(name, install))
            continue
        # its flags when it parses: ``vbnn --help`` need not import what they import
        command = commands.add_parser(name, help=module.DESCRIPTION, description=module.DESCRIPTION,
                                      add_arguments=module.add_arguments)  # fmt: skip
        command.set_defaults(handler=module.run)


def _not_installed(name: str, install: str) -> Callable[[argparse.Namespace], None]:
    """The handler of a subcommand whose package is missing: an error saying what to install."""

    def handler(args: argparse.Namespace) -> None:
        raise ValueError(f"vbnn {name}: {install}")

    return handler


@contextmanager
def _progress_lines_to_stderr() -> Iterator[None]:
    """The library's progress lines (``logging`` at INFO under ``vbnn``: a reference chain's
    tuning stages and checkpoints) on stderr while a command runs."""
    logger, handler = logging.getLogger("vbnn"), logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("vbnn: %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with _progress_lines_to_stderr():
            args.handler(args)
    except (ConnectionError, DataError, FileNotFoundError, NonFiniteLossError, ValueError) as error:
        print(f"vbnn: error: {error}", file=sys.stderr)
        return 2
    except SweepError as error:  # the finished units are stored; a re-run retries the rest
        print(f"vbnn: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
