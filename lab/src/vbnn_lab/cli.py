"""``vbnn reproduce NAME``: the papers' reproductions as a subcommand of the ``vbnn`` command.

vbnn's command line reads the ``vbnn.commands`` entry-point group (``lab/pyproject.toml``
declares ``reproduce = "vbnn_lab.cli"``) and, for each entry, adds a subcommand of that name
built from the module it names: ``DESCRIPTION`` (its help line), ``add_arguments(parser)``
(its flags) and ``run(args)`` (the job). Here the flags are one sub-subcommand per
reproduction in ``REPRODUCTIONS``, each with the flags its module adds.
"""

from __future__ import annotations

import argparse

from vbnn_lab import REPRODUCTIONS, load

DESCRIPTION = "regenerate a paper's tables and figures"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One subcommand per reproduction (``overpruning``, ``depth``, ...), with its own flags."""
    papers = parser.add_subparsers(dest="reproduction", required=True)
    for name in REPRODUCTIONS:
        module = load(name)
        paper = papers.add_parser(name, help=module.DESCRIPTION, description=module.DESCRIPTION)
        module.add_arguments(paper)


def run(args: argparse.Namespace) -> None:
    """Runs the reproduction named by ``args.reproduction`` with the parsed flags."""
    load(args.reproduction).run(args)
