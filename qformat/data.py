"""The plain-text data files: `.hist`, `.edge` and `.stack` (docs/q-format.md,
section 5).

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
from typing import IO, Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Union

from zlib_ng import zlib_ng

from .errors import QFormatError
from .limits import DEFAULT_LIMITS, Limits, exceeded, show
from .files import open_regular

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

SCAN_CHUNK = 1 << 20


def _open(source: Source, name: str | None) -> tuple[IO[bytes], str, list[IO[bytes]]]:
    """``source`` as a buffered binary stream, the name to report, what to close."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            raw: IO[bytes] = os.fdopen(open_regular(path), "rb")
        except OSError as e:
            raise QFormatError(f"cannot read: {e.strerror}", name or path) from None
        return raw, name or path, [raw]
    if name is None:
        label = getattr(source, "name", None)
        name = label if isinstance(label, str) else "<stream>"
    buffered = source if isinstance(source, io.BufferedReader) \
        else io.BufferedReader(source)  # type: ignore[arg-type,type-var]
    return buffered, name, []  # type: ignore[return-value]


def _gzip_ng() -> Any:
    """zlib-ng's gzip module, imported when a file is compressed (it and
    what it imports are a good share of q-syscollect's start)."""
    from zlib_ng import gzip_ng
    return gzip_ng


def _decoded(buffered: IO[bytes]) -> IO[bytes]:
    """The content of ``buffered``, gunzipped where it starts with gzip's magic."""
    if buffered.peek(2)[:2] == GZIP_MAGIC:  # type: ignore[attr-defined]
        return _gzip_ng().GzipFile(fileobj=buffered, mode="rb")  # type: ignore[return-value]
    return buffered


def _read(read: Callable[[int], bytes], size: int, name: str, line: int) -> bytes:
    """``read(size)``, its failures as QFormatError naming the file and line."""
    try:
        return read(size)
    except EOFError:
        raise QFormatError("compressed data ends early (truncated file)", name, line) from None
    except (_gzip_ng().BadGzipFile, zlib_ng.error, zlib.error) as e:  # type: ignore[misc]
        raise QFormatError(f"corrupt compressed data: {e}", name, line) from None
    except OSError as e:
        raise QFormatError(f"cannot read: {e.strerror or e}", name, line) from None


def _scan(stream: IO[bytes], name: str, limits: Limits, records: tuple[str, int] | None) -> None:
    """Count the decompressed bytes and lines of ``stream`` against ``limits``.

    A pass at C speed (decompress, count newlines) before parsing, at
    about a twentieth of parsing's cost per line, so that a file over a cap
    is refused within seconds, not after minutes of parsing what it holds.
    ``records`` is (limit key, cap) for files whose lines are records with a
    cap of their own (distinct stacks).
    """
    size = lines = run = 0
    while True:
        try:
            chunk = _read(stream.read, SCAN_CHUNK, name, lines + 1)
        except QFormatError:
            return  # damage: parsing gets as far and says on which line
        if not chunk:
            return
        size += len(chunk)
        if size > limits.data_size:
            raise exceeded(f"more than {show('data-size', limits.data_size)} of data "
                           "(decompressed)", name, "data-size", limits.data_size)
        n = chunk.count(b"\n")
        lines += n
        if lines > limits.lines:
            raise exceeded(f"more than {limits.lines} lines", name, "lines", limits.lines)
        if records and lines > records[1]:
            raise exceeded(f"more than {records[1]} {records[0]} (one a line)", name,
                           records[0], records[1])
        run = len(chunk) - 1 - chunk.rfind(b"\n") if n else run + len(chunk)
        if run > MAX_LINE:
            raise QFormatError(f"line longer than {MAX_LINE} bytes", name, lines + 1)


def iter_lines(source: Source, limits: Limits = DEFAULT_LIMITS, *, name: str | None = None,
               records: tuple[str, int] | None = None) -> Iterator[tuple[int, bytes, str]]:
    """Yield (line number, stripped line, file name) of the non-blank lines.

    ``name`` is the file to name in errors (default: the path, or the
    stream's name). A seekable source is first scanned against ``limits``
    (see ``_scan``); the lines are counted again as they are parsed, so a
    source that cannot be scanned, or that grew in between, is held to the
    same caps.
    """
    raw, name, to_close = _open(source, name)
    try:
        if raw.seekable():
            _scan(_decoded(raw), name, limits, records)
            raw.seek(0)
        stream = _decoded(raw)
        number = size = 0
        while True:
            line = _read(stream.readline, MAX_LINE + 1, name, number + 1)
            if not line:
                return
            number += 1
            size += len(line)
            if len(line) > MAX_LINE:
                raise QFormatError(f"line longer than {MAX_LINE} bytes", name, number)
            if size > limits.data_size:
                raise exceeded(f"more than {show('data-size', limits.data_size)} of data "
                               "(decompressed)", name, "data-size", limits.data_size)
            if number > limits.lines:
                raise exceeded(f"more than {limits.lines} lines", name, "lines", limits.lines)
            if records and number > records[1]:
                raise exceeded(f"more than {records[1]} {records[0]} (one a line)", name,
                               records[0], records[1])
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


def read_hist(source: Source, limits: Limits = DEFAULT_LIMITS, *,
              name: str | None = None) -> Iterator[tuple[int, int]]:
    """Yield (address, count) from a `.hist` file."""
    for number, line, where in iter_lines(source, limits, name=name):
        m = _HIST.match(line)
        if not m:
            raise _diagnose(line, ("address", "count"), where, number)
        count = int(m[2])
        if count > U64_MAX:
            raise QFormatError("count larger than 64 bits", where, number)
        yield int(m[1], 16), count


def read_edges(source: Source, limits: Limits = DEFAULT_LIMITS, *,
               name: str | None = None) -> Iterator[Arc]:
    """Yield Arc(caller, callee, count) from a `.edge` file."""
    for number, line, where in iter_lines(source, limits, name=name):
        m = _EDGE.match(line)
        if not m:
            raise _diagnose(line, ("call site", "callee", "count"), where, number)
        count = int(m[3])
        if count > U64_MAX:
            raise QFormatError("count larger than 64 bits", where, number)
        yield Arc(int(m[1], 16), int(m[2], 16), count)


REMAINDER = b"-"
"""The frames field of a `.stack` remainder line (``WEIGHT -``)."""
_STACK = re.compile(rb"(\d{1,20})((?:[ \t]+0[xX][0-9a-fA-F]{1,16})+)\Z")


def read_stacks(source: Source, limits: Limits = DEFAULT_LIMITS, *,
                name: str | None = None) -> Iterator[Stack]:
    """Yield Stack(weight, frames) from a `.stack` file.

    The remainder line ``WEIGHT -`` yields a Stack without frames. Every
    line counts toward the ``stacks`` cap.
    """
    for number, line, where in iter_lines(source, limits, name=name,
                                          records=("stacks", limits.stacks)):
        # One regex checks the whole line (stack files are the big ones: this
        # halves the reading time); a line it rejects is gone through field
        # by field to say what is wrong with it.
        m = _STACK.match(line)
        if m is None:
            fields = line.split()
            if len(fields) == 2 and fields[1] == REMAINDER:
                yield Stack(_count(fields[0], "weight", where, number), ())
                continue
            if len(fields) < 2:
                raise QFormatError("a stack line needs a weight and at least one address",
                                   where, number)
            weight = _count(fields[0], "weight", where, number)
            yield Stack(weight, tuple(_address(f, "address", where, number) for f in fields[1:]))
            continue
        weight = int(m[1])
        if weight > U64_MAX:
            raise QFormatError(f"bad weight {_show(m[1])} (want a decimal integer)", where,
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
