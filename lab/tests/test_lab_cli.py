"""``vbnn reproduce``: the lab declares its subcommand in the ``vbnn.commands`` entry-point group,
the module it names keeps vbnn's command contract, and the installed ``vbnn`` lists every
reproduction with its description."""

from __future__ import annotations

import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from vbnn.cli import COMMANDS_GROUP, main
from vbnn_lab import REPRODUCTIONS, cli, load

LAB = Path(__file__).resolve().parents[1]


def test_the_lab_declares_reproduce_with_vbnns_command_contract() -> None:
    project = tomllib.loads((LAB / "pyproject.toml").read_text())["project"]
    assert project["entry-points"][COMMANDS_GROUP] == {"reproduce": cli.__name__}
    assert isinstance(cli.DESCRIPTION, str) and callable(cli.add_arguments) and callable(cli.run)
    assert any(requirement.startswith("vbnn[jax]") for requirement in project["dependencies"])


def test_vbnn_reproduce_lists_every_reproduction(capsys: pytest.CaptureFixture[str]) -> None:
    installed = [e.value for e in entry_points(group=COMMANDS_GROUP) if e.name == "reproduce"]
    assert installed == [cli.__name__], "the lab is not installed: pip install -e ./lab"
    with pytest.raises(SystemExit) as stopped:
        main(["reproduce", "--help"])
    assert stopped.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps the help lines
    for name in REPRODUCTIONS:
        assert name in shown and " ".join(load(name).DESCRIPTION.split()) in shown, name
