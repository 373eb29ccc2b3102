"""Both tools' --help fits the terminal as argparse's own would ($COLUMNS,
else the terminal, else 80 columns), found without importing shutil."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from qtools.daemon import cli as daemon_cli
from qtools.viewer.commands import view as viewer_cli


@pytest.mark.parametrize("parser", [daemon_cli.parser, viewer_cli.parser])
@pytest.mark.parametrize("columns", [50, 100, 160])
def test_help_is_laid_out_as_argparse_would(monkeypatch, parser, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    ours = parser()
    theirs = parser()
    theirs.formatter_class = argparse.RawDescriptionHelpFormatter \
        if issubclass(ours.formatter_class, argparse.RawDescriptionHelpFormatter) \
        else argparse.HelpFormatter
    assert ours.formatter_class is not theirs.formatter_class
    assert ours.format_help() == theirs.format_help()


@pytest.mark.parametrize("parser", [daemon_cli.parser, viewer_cli.parser])
def test_help_is_laid_out_for_the_width_it_finds(monkeypatch, parser):
    """(So that the comparison above is one of layouts that follow $COLUMNS.)"""
    helps = {}
    for columns in (50, 160):
        monkeypatch.setenv("COLUMNS", str(columns))
        helps[columns] = parser().format_help()
    assert helps[50] != helps[160]
    assert len(helps[50].splitlines()) > len(helps[160].splitlines())  # narrower: more lines
    assert max(map(len, helps[160].splitlines())) > 100  # the width is used


def test_without_a_terminal_or_columns_help_is_80_wide(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    out = subprocess.run([sys.executable, "-m", "qtools.viewer.commands.view", "--help"],
                         capture_output=True, text=True, check=True,
                         env={k: v for k, v in __import__("os").environ.items()
                              if k != "COLUMNS"}).stdout
    assert 70 <= max(map(len, out.splitlines())) <= 80


@pytest.mark.parametrize("module", ["qtools.daemon.cli", "qtools.viewer.commands.view"])
def test_a_tool_builds_its_parser_without_shutil(module):
    """shutil (with bz2 and lzma) is what argparse imports for the width."""
    code = (f"import sys, {module} as m; m.parser(); "
            "print(sorted({'shutil', 'bz2', 'lzma'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
