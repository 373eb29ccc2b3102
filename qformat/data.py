"""The plain-text data files: `.hist`, `.edge` and `.stack` (DESIGN 3.3).

Readers stream: they yield one record at a time from a file that may be
gzip-compressed (told by its magic bytes, not its name), validate every
line, and raise QFormatError naming the file and line. Memory stays bounded
by the longest line (capped), whatever the size of the file.

Writers are pure: they turn records into lines of bytes; `store` puts the
lines into a file atomically.
"""

from __future__ import annotations

import io
import os
import re
import zlib
from typing import IO, Iterable, Iterator, Mapping, NamedTuple, Union

from zlib_ng import gzip_ng, zlib_ng

from .errors import QFormatError
from .store import open_regular

MAX_LINE = 1 << 20
"""Longest accepted line: a stack of a few thousand frames fits easily."""

U64_MAX = (1 << 64) - 1
GZIP_MAGIC = b"\x1f\x8b"

Source = Union[str, "os.PathLike[str]", IO[bytes]]


class Arc(NamedTuple):
    """`.edge` record: a sampled call from a call site to a callee entry."""

    caller: int
    callee: int
    calls: int  # sampled call branches (not `count`: that is a tuple method)


class Stack(NamedTuple):
    """`.stack` record: weight of one distinct stack, innermost frame first.

    No frames: the remainder line ``WEIGHT -``, the weight of the stacks a
    collector did not keep (beyond its cap), so that the weights still sum
    to the histogram's total.
    """

    weight: int
    frames: tuple[int, ...]


# ---------------------------------------------------------------- reading

def _open(source: Source) -> tuple[IO[bytes], str, list[IO[bytes]]]:
    """Open ``source`` as a binary stream, decompressing gzip transparently.

    Returns the stream, the name to report and what to close afterwards.
    """
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        try:
            raw: IO[bytes] = os.fdopen(open_regular(name), "rb")
        except OSError as e:
            raise QFormatError(f"cannot read: {e.strerror}", name) from None
        owned = [raw]
    else:
        raw, owned = source, []
        label = getattr(source, "name", None)
        name = label if isinstance(label, str) else "<stream>"
    buffered = raw if isinstance(raw, io.BufferedReader) \
        else io.BufferedReader(raw)  # type: ignore[arg-type,type-var]
    if buffered.peek(2)[:2] == GZIP_MAGIC:
        gz: IO[bytes] = gzip_ng.GzipFile(fileobj=buffered, mode="rb")  # type: ignore[assignment]
        return gz, name, [gz, *owned]
    return buffered, name, owned  # type: ignore[return-value]


def iter_lines(source: Source) -> Iterator[tuple[int, bytes, str]]:
    """Yield (line number, stripped line, file name) of the non-blank lines."""
    stream, name, to_close = _open(source)
    number = 0
    try:
        while True:
            try:
                line = stream.readline(MAX_LINE + 1)
            except EOFError:
                raise QFormatError("compressed data ends early (truncated file)", name,
                                   number + 1) from None
            except (gzip_ng.BadGzipFile, zlib_ng.error, zlib.error) as e:  # type: ignore[misc]
                raise QFormatError(f"corrupt compressed data: {e}", name, number + 1) from None
            except OSError as e:
                raise QFormatError(f"cannot read: {e.strerror or e}", name, number + 1) from None
            if not line:
                return
            number += 1
            if len(line) > MAX_LINE:
                raise QFormatError(f"line longer than {MAX_LINE} bytes", name, number)
            line = line.strip()
            if line:
                yield number, line, name
    finally:
        for f in to_close:
            f.close()


_HEX = re.compile(rb"0[xX][0-9a-fA-F]{1,16}\Z")
_DEC = re.compile(rb"\d{1,20}\Z")
_HIST = re.compile(rb"0[xX]([0-9a-fA-F]{1,16})[ \t]+(\d{1,20})\Z")
_EDGE = re.compile(rb"0[xX]([0-9a-fA-F]{1,16})[ \t]+0[xX]([0-9a-fA-F]{1,16})[ \t]+(\d{1,20})\Z")


def _address(field: bytes, what: str, name: str, number: int) -> int:
    if not _HEX.match(field):
        raise QFormatError(f"bad {what} {_show(field)} (want 0xHEX, at most 64 bits)", name, number)
    return int(field[2:], 16)


def _count(field: bytes, what: str, name: str, number: int) -> int:
    if field.startswith(b"-") and _DEC.match(field[1:]):
        raise QFormatError(f"negative {what} {_show(field)}", name, number)
    if not _DEC.match(field) or int(field) > U64_MAX:
        raise QFormatError(f"bad {what} {_show(field)} (want a decimal integer)", name, number)
    return int(field)


def _show(field: bytes) -> str:
    text = field[:40].decode("ascii", "backslashreplace")
    return repr(text + ("..." if len(field) > 40 else ""))


def _diagnose(line: bytes, kinds: tuple[str, ...], name: str, number: int) -> QFormatError:
    """Explain why ``line`` did not match, field by field."""
    fields = line.split()
    if len(fields) != len(kinds):
        return QFormatError(f"expected {len(kinds)} fields, found {len(fields)}", name, number)
    for field, kind in zip(fields, kinds):
        if kind in ("address", "call site", "callee"):
            _address(field, kind, name, number)
        else:
            _count(field, kind, name, number)
    return QFormatError("malformed line", name, number)


def read_hist(source: Source) -> Iterator[tuple[int, int]]:
    """Yield (address, count) from a `.hist` file."""
    for number, line, name in iter_lines(source):
        m = _HIST.match(line)
        if not m:
            raise _diagnose(line, ("address", "count"), name, number)
        count = int(m[2])
        if count > U64_MAX:
            raise QFormatError("count larger than 64 bits", name, number)
        yield int(m[1], 16), count


def read_edges(source: Source) -> Iterator[Arc]:
    """Yield Arc(caller, callee, count) from a `.edge` file."""
    for number, line, name in iter_lines(source):
        m = _EDGE.match(line)
        if not m:
            raise _diagnose(line, ("call site", "callee", "count"), name, number)
        count = int(m[3])
        if count > U64_MAX:
            raise QFormatError("count larger than 64 bits", name, number)
        yield Arc(int(m[1], 16), int(m[2], 16), count)


REMAINDER = b"-"
"""The frames field of a `.stack` remainder line (``WEIGHT -``)."""
_STACK = re.compile(rb"(\d{1,20})((?:[ \t]+0[xX][0-9a-fA-F]{1,16})+)\Z")


def read_stacks(source: Source) -> Iterator[Stack]:
    """Yield Stack(weight, frames) from a `.stack` file."""
    for number, line, name in iter_lines(source):
        # One regex checks the whole line (stack files are the big ones: this
        # halves the reading time); a line it rejects is gone through field
        # by field to say what is wrong with it.
        m = _STACK.match(line)
        if m is None:
            fields = line.split()
            if len(fields) == 2 and fields[1] == REMAINDER:
                yield Stack(_count(fields[0], "weight", name, number), ())
                continue
            if len(fields) < 2:
                raise QFormatError("a stack line needs a weight and at least one address",
                                   name, number)
            weight = _count(fields[0], "weight", name, number)
            yield Stack(weight, tuple(_address(f, "address", name, number) for f in fields[1:]))
            continue
        weight = int(m[1])
        if weight > U64_MAX:
            raise QFormatError(f"bad weight {_show(m[1])} (want a decimal integer)", name,
                               number)
        yield Stack(weight, tuple([int(f, 16) for f in m[2].split()]))


# ---------------------------------------------------------------- writing

def hist_lines(hist: Mapping[int, int] | Iterable[tuple[int, int]]) -> Iterator[bytes]:
    """Lines of a `.hist` file, sorted by address; zero counts are left out."""
    items = hist.items() if isinstance(hist, Mapping) else hist
    for address, count in sorted(items):
        _check_u64(address, count)
        if count:
            yield b"0x%x %d\n" % (address, count)


def edge_lines(arcs: Mapping[tuple[int, int], int] | Iterable[Arc]) -> Iterator[bytes]:
    """Lines of a `.edge` file, sorted by call site then callee."""
    items: Iterable[tuple[int, int, int]]
    if isinstance(arcs, Mapping):
        items = ((a, b, n) for (a, b), n in arcs.items())
    else:
        items = arcs
    for caller, callee, count in sorted(items):
        _check_u64(caller, callee, count)
        if count:
            yield b"0x%x 0x%x %d\n" % (caller, callee, count)


def stack_lines(stacks: Mapping[tuple[int, ...], int] | Iterable[Stack],
                remainder: int = 0) -> Iterator[bytes]:
    """Lines of a `.stack` file, heaviest stack first; a ``remainder``
    weight (stacks not kept) goes last as ``WEIGHT -``."""
    items: Iterable[tuple[int, tuple[int, ...]]]
    if isinstance(stacks, Mapping):
        items = ((w, f) for f, w in stacks.items())
    else:
        items = stacks
    for weight, frames in sorted(items, key=lambda s: (-s[0], s[1])):
        if not frames:
            raise ValueError("a stack needs at least one frame")
        _check_u64(weight, *frames)
        if weight:
            yield b"%d %s\n" % (weight, b" ".join(b"0x%x" % f for f in frames))
    _check_u64(remainder)
    if remainder:
        yield b"%d %s\n" % (remainder, REMAINDER)


def _check_u64(*values: int) -> None:
    for v in values:
        if not 0 <= v <= U64_MAX:
            raise ValueError(f"{v} is not an unsigned 64-bit value")
