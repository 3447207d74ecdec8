"""Subcommands that other packages add to ``vbnn`` through the ``vbnn.commands`` entry points:
one found is parsed and run like a built-in; a packaged one that is missing, or that fails to
import, says what to install or what failed, with the exit status of any other error."""

from __future__ import annotations

import argparse
import sys
import types
from importlib.metadata import EntryPoint

import pytest

from vbnn import cli
from vbnn.cli import main

GROUP = cli.COMMANDS_GROUP


def _installed(monkeypatch: pytest.MonkeyPatch, *entries: EntryPoint) -> None:
    """``vbnn`` sees exactly ``entries`` in its group (whatever this environment installed)."""

    def entry_points(group: str) -> tuple[EntryPoint, ...]:
        assert group == GROUP
        return entries

    monkeypatch.setattr(cli, "entry_points", entry_points)


def _command_module(monkeypatch: pytest.MonkeyPatch, calls: list) -> str:
    """A module with the contract of an entry point's target: DESCRIPTION, add_arguments, run."""
    module = types.ModuleType("vbnn_test_command")
    module.DESCRIPTION = "greet someone"

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--times", type=int, default=1)

    module.add_arguments = add_arguments
    module.run = lambda args: calls.append((args.name, args.times))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module.__name__


def test_an_installed_command_is_parsed_and_run(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    calls: list = []
    target = _command_module(monkeypatch, calls)
    _installed(monkeypatch, EntryPoint("hello", target, GROUP))
    assert main(["hello", "world", "--times", "3"]) == 0
    assert calls == [("world", 3)]
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "greet someone" in capsys.readouterr().out  # listed with the built-in commands


def test_an_installed_command_adds_its_flags_only_when_it_is_parsed(
    monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """``vbnn --help`` and a built-in command do not call an installed command's
    ``add_arguments`` (whose modules may be slow to import); parsing that command calls it once,
    and its ``--help`` lists the flags."""
    calls: list = []
    target = _command_module(monkeypatch, calls)
    added: list = []
    module = sys.modules[target]
    add_arguments = module.add_arguments
    module.add_arguments = lambda parser: (added.append(parser.prog), add_arguments(parser))
    _installed(monkeypatch, EntryPoint("hello", target, GROUP))
    parser = cli.build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    parser.parse_args(["data", "check"])
    assert added == []
    assert parser.parse_args(["hello", "world"]).times == 1
    assert parser.parse_args(["hello", "you", "--times", "2"]).times == 2
    assert added == ["vbnn hello"]  # once, however often the command is parsed
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["hello", "--help"])
    assert "--times" in capsys.readouterr().out


def test_without_the_lab_reproduce_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    _installed(monkeypatch)
    assert main(["reproduce", "overpruning", "--quick", "--out", "anywhere"]) == 2
    error = capsys.readouterr().err
    assert "vbnn reproduce:" in error and "pip install ./lab" in error and "make install" in error
    with pytest.raises(SystemExit) as stopped:
        main(["reproduce", "--help"])
    assert stopped.value.code == 0
    assert "pip install ./lab" in capsys.readouterr().out


def test_a_command_that_fails_to_import_names_its_entry_point_and_the_error(
    monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    _installed(monkeypatch, EntryPoint("reproduce", "no_such_package.cli", GROUP))
    with pytest.raises(SystemExit) as stopped:  # the other commands still work
        main(["data", "check", "--help"])
    assert stopped.value.code == 0
    capsys.readouterr()
    assert main(["reproduce", "overpruning"]) == 2
    error = capsys.readouterr().err
    assert "'reproduce'" in error and "no_such_package.cli" in error
    assert "ModuleNotFoundError" in error and "no_such_package" in error


def test_an_entry_point_may_not_replace_a_built_in_command(monkeypatch: pytest.MonkeyPatch) -> None:
    target = _command_module(monkeypatch, [])
    _installed(monkeypatch, EntryPoint("sweep", target, GROUP))
    with pytest.raises(ValueError, match=r"entry point 'sweep' .*built-in vbnn command"):
        cli.build_parser()
