"""The `.threads` file (docs/q-format.md, 5.8): a set's CPU samples by
thread, and with ``--off-cpu`` its threads' off-CPU (``S``, ``D``) and
wait-for-CPU (``W``) time, each by the stack at the switch-out.

A file of its own beside `.hist` and `.stack`, so that a reader that does
not know it shows the CPU profile unchanged.
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator, Mapping, NamedTuple

from .data import Source, Stack, _address, _count, iter_lines, U64_MAX
from .errors import QFormatError
from .limits import DEFAULT_LIMITS, Limits

KINDS = ("cpu", "S", "D", "W")
"""``cpu``: sample weight in the `.hist` unit; ``S``/``D``: nanoseconds off
the CPU after leaving in that state, until woken; ``W``: nanoseconds
runnable but not running."""

THREAD = "thread"
NOT_KEPT = b"-"


class ThreadWeight(NamedTuple):
    """One weight line: ``KIND TID WEIGHT FRAMES``; no frames: ``-``."""

    kind: str
    tid: int
    weight: int
    frames: tuple[int, ...]


class ThreadName(NamedTuple):
    """A ``thread TID NAME`` line."""

    tid: int
    name: str


_SAFE = re.compile(rb"[!-\[\]-~]")


def escape_name(name: str) -> bytes:
    """One field: bytes outside ``!``..``~`` and the backslash as ``\\xHH``."""
    raw = name.encode("utf-8", "surrogateescape")
    return b"".join(bytes([c]) if _SAFE.match(bytes([c])) else b"\\x%02x" % c for c in raw)


def unescape_name(field: bytes, name: str, number: int) -> str:
    out = bytearray()
    i = 0
    while i < len(field):
        if field[i:i + 1] == b"\\":
            digits = field[i + 2:i + 4]
            if field[i + 1:i + 2] != b"x" or not re.fullmatch(rb"[0-9a-fA-F]{2}", digits):
                raise QFormatError("bad escape in a thread name (want \\xHH)", name, number)
            out.append(int(digits, 16))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return out.decode("utf-8", "replace")


def thread_lines(names: Mapping[int, str],
                 weights: Mapping[tuple[str, int, tuple[int, ...]], int] | Iterable[ThreadWeight],
                 cpu_rest: int | None = None) -> Iterator[bytes]:
    """Lines of a `.threads` file: names by tid, then weights by kind,
    heaviest first; zero weights are left out, and so are the `cpu` lines
    of thread ``cpu_rest`` (q:cpu-rest: see ``rest_thread``)."""
    for tid in sorted(names):
        yield b"thread %d %s\n" % (tid, escape_name(names[tid]) or b"\\x00")
    items: Iterable[tuple[str, int, tuple[int, ...], int]]
    if isinstance(weights, Mapping):
        items = ((k, t, f, w) for (k, t, f), w in weights.items())
    else:
        items = ((w.kind, w.tid, w.frames, w.weight) for w in weights)
    for kind, tid, frames, weight in sorted(items, key=lambda x: (KINDS.index(x[0]), -x[3],
                                                                   x[1], x[2])):
        for v in (tid, weight, *frames):
            if not 0 <= v <= U64_MAX:
                raise ValueError(f"{v} is not an unsigned 64-bit value")
        if weight and not (tid == cpu_rest and kind == "cpu"):
            tail = b" ".join(b"0x%x" % f for f in frames) if frames else NOT_KEPT
            yield b"%s %d %d %s\n" % (kind.encode(), tid, weight, tail)


def read_threads(source: Source, limits: Limits = DEFAULT_LIMITS, *,
                 name: str | None = None) -> Iterator[ThreadWeight | ThreadName]:
    """Yield the records of a `.threads` file; every line counts toward the
    ``stacks`` cap. A bad line is a QFormatError naming file and line."""
    for number, line, fname in iter_lines(source, limits, name=name,
                                          records=("stacks", limits.stacks)):
        fields = line.split()
        kind = fields[0].decode("ascii", "replace")
        if kind == THREAD:
            if len(fields) != 3:
                raise QFormatError("a thread line is 'thread TID NAME'", fname, number)
            yield ThreadName(_count(fields[1], "thread id", fname, number),
                             unescape_name(fields[2], fname, number))
            continue
        if kind not in KINDS:
            raise QFormatError(f"unknown line kind {kind[:20]!r} (want thread, cpu, S, D or W)",
                               fname, number)
        if len(fields) < 4:
            raise QFormatError(f"a {kind} line is '{kind} TID WEIGHT FRAMES'", fname, number)
        tid = _count(fields[1], "thread id", fname, number)
        weight = _count(fields[2], "weight", fname, number)
        if len(fields) == 4 and fields[3] == NOT_KEPT:
            frames: tuple[int, ...] = ()
        else:
            frames = tuple(_address(f, "address", fname, number) for f in fields[3:])
        yield ThreadWeight(kind, tid, weight, frames)


def rest_thread(stacks: Mapping[tuple[int, ...], int], remainder: int,
                weights: Mapping[tuple[str, int, tuple[int, ...]], int]) -> int | None:
    """The thread whose `cpu` lines a `.threads` file may leave out
    (``q:cpu-rest``, docs/q-format.md 4.9): the one with the most lines,
    where the `.stack` (``stacks``, and ``remainder`` as ``WEIGHT -``) less
    every other thread's `cpu` lines is exactly its lines, so that a
    reader puts them back as they were (``with_cpu_rest``); None where no
    thread has `cpu` lines or they do not add up so.

    Without it every CPU sample is in the set twice (by stack, and by
    thread and stack): a one-thread process's `.threads` repeats its
    `.stack`, an aggregate's repeats it for the tasks folded past its
    named threads."""
    lines: dict[int, int] = {}
    for (kind, tid, _frames), weight in weights.items():
        if kind == "cpu" and weight:
            lines[tid] = lines.get(tid, 0) + 1
    if not lines:
        return None
    rest = max(lines, key=lambda t: (lines[t], -t))
    left = {frames: w for frames, w in stacks.items() if w}
    if remainder:
        left[()] = remainder
    mine: dict[tuple[int, ...], int] = {}
    for (kind, tid, frames), weight in weights.items():
        if kind != "cpu" or not weight:
            continue
        if tid == rest:
            mine[frames] = weight
        else:
            left[frames] = left.get(frames, 0) - weight
    return rest if {f: w for f, w in left.items() if w} == mine else None


def with_cpu_rest(records: Iterable[ThreadWeight | ThreadName], stacks: Iterable[Stack],
                  tid: int, name: str | None = None) -> Iterator[ThreadWeight | ThreadName]:
    """The records of a `.threads` file written with ``q:cpu-rest`` ``tid``
    and then the `cpu` lines of ``tid`` it left out: the set's `.stack`
    records ``stacks`` less the other threads' `cpu` lines, frames by frames
    (a ``WEIGHT -`` line less the ``-`` ones). A QFormatError naming
    ``name`` where the file has lines of ``tid`` or the others weigh more
    than the `.stack`."""
    left: dict[tuple[int, ...], int] = {}
    cpu: list[ThreadWeight] = []
    rest: list[ThreadWeight | ThreadName] = []  # names, then S, D, W lines
    for rec in records:
        if isinstance(rec, ThreadWeight) and rec.kind == "cpu":
            if rec.tid == tid:
                raise QFormatError(f"cpu lines of thread {tid}, which q:cpu-rest says are "
                                   "left out", name)
            left[rec.frames] = left.get(rec.frames, 0) - rec.weight
            cpu.append(rec)
        elif isinstance(rec, ThreadName):
            yield rec
        else:
            rest.append(rec)
    for st in stacks:
        left[st.frames] = left.get(st.frames, 0) + st.weight
    for frames, weight in left.items():
        if weight < 0:
            raise QFormatError("the cpu lines of the threads other than q:cpu-rest weigh "
                               "more than the .stack has", name)
        if weight:
            cpu.append(ThreadWeight("cpu", tid, weight, frames))
    # in the order thread_lines writes them, as if none had been left out
    yield from sorted(cpu, key=lambda w: (-w.weight, w.tid, w.frames))
    yield from rest
