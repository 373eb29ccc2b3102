"""argparse's help laid out for the terminal without the imports argparse
makes to find its width: shutil, and through it bz2 and lzma, about 2 ms
of every start of every tool, for help that is rarely printed; and the
option types the tools share."""

from __future__ import annotations

import argparse
import math
import os
import sys


def columns() -> int:
    """The terminal's width as shutil.get_terminal_size gives it: $COLUMNS,
    else standard output's terminal, else 80."""
    try:
        width = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        width = 0
    if width > 0:
        return width
    try:
        width = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        width = 0
    return width or 80


class HelpFormatter(argparse.HelpFormatter):
    """argparse's own, at the width ``columns`` finds."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         columns() - 2 if width is None else width)


class RawDescriptionHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The description and epilog as written (line breaks kept)."""


def positive_float(text: str) -> float:
    """An option's number of seconds: finite and above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {text!r}")
    return value


def positive_int(text: str) -> int:
    """An option's count: a whole number above 0."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {text!r}")
    return value
