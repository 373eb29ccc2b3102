"""Names from a `.q` on their way to a terminal: the one escaping function.

Every name q-view shows came from someone else: a task's comm and command
line, a thread's name (prctl), a file name, an ELF symbol or DWARF file
name (any bytes but NUL), a JIT map, an archive's `.info`. They must
neither send escape sequences to the terminal nor break a report's lines.

Two layers, one function (``printable``):

- Names are escaped where they enter a text report (frames, task
  summaries, the stack-quality keys, the overview's rows, messages): there
  a newline in a name is still told from the line ends around it.
- Every text q-view writes goes through ``EscapedOutput``, which escapes
  whatever control character still reaches it, line by line (cli.main
  wraps standard output, standard error and ``-o FILE`` in it). An output
  added later that forgets the first layer can misplace a line break at
  worst; it cannot reach the terminal with an escape sequence.

JSON is exact instead: names go into it unescaped, and ``write_json``
writes every control character (and every non-ASCII one) as a ``\\uXXXX``
escape, which the second layer leaves as it is. The binary exports (pprof,
OpenTelemetry) are data for other tools, written as bytes around this
stream: they hold names as the `.q` gives them.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any, TextIO, cast


def printable(text: str) -> str:
    """``text`` with its unprintable characters escaped: ``\\x1b``, ``\\x0a``,
    ``\\x9b`` (C1 controls), ``\\u202e`` (any other character Unicode does
    not call printable: format characters, separators, lone surrogates).
    Idempotent on what it returns: escaping twice changes nothing more."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else
                   f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}" for c in text)


_ASCII_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")


def printable_lines(text: str) -> str:
    """``text`` with each line ``printable``: its newlines kept as line ends."""
    if text.isascii() and _ASCII_CONTROL.search(text) is None:
        return text  # what nearly every write is: one search, no copy
    return "\n".join(map(printable, text.split("\n")))


def write_json(document: Any, out: TextIO) -> None:
    """``document`` as JSON, indented, in one write: ``json.dumps`` escapes
    every control character of a name (and, ensure_ascii, every non-ASCII
    one) as ``\\uXXXX``, so the names stay exact and the text is plain
    ASCII that ``EscapedOutput`` passes on unchanged."""
    out.write(json.dumps(document, indent=1, ensure_ascii=True) + "\n")


class EscapedOutput(io.TextIOBase):
    """A text stream over ``raw`` that writes nothing a terminal acts on:
    each write's lines go through ``printable`` (module docstring)."""

    def __init__(self, raw: TextIO) -> None:
        super().__init__()
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(printable_lines(text))
        return len(text)

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        if not self.raw.closed:  # the stream is its opener's, who may have closed it
            self.raw.flush()

    def isatty(self) -> bool:
        return self.raw.isatty()


def escaped(stream: TextIO) -> TextIO:
    """``stream`` behind ``EscapedOutput`` (once: an escaped stream is kept)."""
    return stream if isinstance(stream, EscapedOutput) else cast(TextIO, EscapedOutput(stream))


def unescaped(stream: TextIO) -> TextIO:
    """The stream under ``EscapedOutput``, for the two writers that must not
    be escaped: --watch's own screen control, and the binary exports."""
    return stream.raw if isinstance(stream, EscapedOutput) else stream
