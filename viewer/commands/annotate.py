"""``q-view --annotate NAME``: one function's instructions with their share of
its samples, source lines between them, as ``perf annotate --stdio`` shows.

The sets' samples are taken as locations (``locations.locate``), before
any report: only the leaves (self time) of the function named count, each
at its link-time address, so the sets of several processes (a library
mapped at different places) add up instruction by instruction. Where the
function is in several objects, the one with the most samples is shown
(the others are named). The code comes from the object copy
(``naming.disasm``), the lines from its DWARF (``naming.lines``), the
source text from the files the line table names, where ``sources`` allows
reading them.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import TextIO

from qtools.qformat import ObjectRef

from ..model.viewerrors import ViewError
from ..inputs.load import StoredSet
from ..profile.build import located
from ..naming.disasm import DisasmProblem, Instruction, disassemble, read_code
from ..naming.lines import ObjectLines
from ..naming.symbols import Symbols, Warn
from ..profile.group import one_unit
from ..model.options import Options
from ..model.escape import printable
from ..profile.pipeline import symbolizer
from ..naming.sources import Roots, SourceFiles
HOTTEST = 3  # source lines marked as the hottest


@dataclass
class Target:
    """The samples of the function in one object (by the copy's content)."""

    name: str
    object: str
    directory: str
    ref: ObjectRef
    copy: str
    start: int  # link-time
    weights: dict[int, float] = field(default_factory=dict)  # link-time address -> weight
    counts: dict[int, int] = field(default_factory=dict)  # link-time address -> samples' events

    @property
    def total(self) -> float:
        return sum(self.weights.values())


def gather(sets: list[StoredSet], symbols: Symbols, name: str, warn: Warn) -> list[Target]:
    """The function's self samples per object, most first."""
    targets: dict[tuple[int | str, int], Target] = {}
    for sl in located(sets, symbols, warn):
        leaves: dict[int, int] = dict(sl.spread)
        for stack, count in sl.stacks.items():
            leaves[stack[0]] = leaves.get(stack[0], 0) + count
        factor = sl.factor
        for lid, count in leaves.items():
            loc = sl.location(lid)
            if loc.kernel or loc.copy is None or loc.object is None:
                continue
            sym = sl.space.lookup(loc.address, loc.is_return)
            if sym.name != name and f"{sym.name}<{sym.object}>" != name:
                continue
            if sym.start is None:
                continue
            mapping = sl.space.mapping(loc.address, loc.is_return)
            if mapping is None:
                continue
            key = (loc.crc if loc.crc is not None else loc.copy, sym.start)
            t = targets.get(key)
            if t is None:
                t = targets[key] = Target(sym.name, sym.object, sl.stored.directory,
                                          mapping[1], loc.copy, sym.start)
            t.weights[sym.offset] = t.weights.get(sym.offset, 0.0) + count * factor
            t.counts[sym.offset] = t.counts.get(sym.offset, 0) + count
    return sorted(targets.values(), key=lambda t: -t.total)


@dataclass(frozen=True)
class Row:
    """A line of the annotation: an instruction or a source line."""

    percent: float | None  # None: no samples column
    text: str
    hot: bool = False


def rows_of(t: Target, code: list[Instruction], lines: ObjectLines | None,
            source: SourceFiles) -> list[Row]:
    total = t.total or 1.0
    where = {i.address: lines.lookup(i.address) if lines else None for i in code}
    weights = _per_instruction(t.weights, code)
    per_line: dict[tuple[str, int], float] = {}
    for i in code:
        w = weights.get(i.address, 0.0)
        line = where[i.address]
        if line is not None and w:
            per_line[line] = per_line.get(line, 0.0) + w
    hottest = {k for k, _ in sorted(per_line.items(), key=lambda kv: -kv[1])[:HOTTEST]}
    rows: list[Row] = []
    last = None
    for i in code:
        line = where[i.address]
        if line is not None and line != last:
            text = source.line(line[0], line[1])
            tag = f"{printable(os.path.basename(line[0]))}:{line[1]}"
            share = per_line.get(line, 0.0) / total * 100
            shown = printable(text.rstrip().expandtabs()) if text is not None else ""
            rows.append(Row(share if line in per_line else None, f"{tag:<20} {shown}",
                            line in hottest))
        last = line
        w = weights.get(i.address, 0.0)
        rows.append(Row(w / total * 100, f"  {i.address:8x}:   {printable(i.text)}"))
    return rows


def _per_instruction(weights: dict[int, float], code: list[Instruction]) -> dict[int, float]:
    """Weights by the start of the instruction holding their address (a
    sample's pc is one, but a hand-made or foreign histogram may not be)."""
    starts = [i.address for i in code]
    out: dict[int, float] = {}
    for address, w in weights.items():
        k = bisect_right(starts, address) - 1
        if k >= 0:
            out[starts[k]] = out.get(starts[k], 0.0) + w
    return out


def _range(symbols: Symbols, t: Target) -> tuple[int, int, str] | None:
    """The function's link-time [start, end) and a path reading its copy."""
    obj = symbols.object(t.directory, t.ref, t.copy)
    if obj is None:
        return None
    table = obj.table
    i = bisect_right(table.starts, t.start) - 1
    if i >= 0 and table.starts[i] == t.start:
        return t.start, table.ends[i], ""
    fdes = obj.fdes
    if fdes is not None:
        j = bisect_right(fdes.starts, t.start) - 1
        if j >= 0 and fdes.starts[j] == t.start:
            return t.start, fdes.ends[j], ""
    return None


def show(sets: list[StoredSet], name: str, opts: Options, out: TextIO, warn: Warn) -> int:
    """``--annotate NAME``: the exit status."""
    unit = one_unit(sets)
    with symbolizer(opts.symbols, opts.limits, warn, sets) as symbols:
        return _show(sets, name, unit, symbols, opts, out, warn)


def _show(sets: list[StoredSet], name: str, unit: str, symbols: Symbols, opts: Options,
          out: TextIO, warn: Warn) -> int:
    targets = gather(sets, symbols, name, warn)
    if not targets:
        raise ViewError(f"--annotate {name}: no samples in a function of that "
                        "name in the sets selected")
    t = targets[0]
    moved = [ts for ts in sets if ts.info.task.extra.get("q:hist-moved")]
    if moved:
        warn(f"{moved[0].path}: the collector counted the samples of rare "
             "instructions at their function's first instruction (--min-stack-share); "
             "that instruction's count includes them")
    for other in targets[1:]:
        warn(f"{name} in {other.object} too ({f'{other.total:.6g}'} {unit}); "
             f"showing the one in {t.object}")
    span = _range(symbols, t)
    if span is None:
        raise ViewError(f"--annotate {name}: its extent in {t.object} is unknown")
    obj = symbols.object(t.directory, t.ref, t.copy)
    with symbols._verified(t.directory, t.copy) as path:
        if path is None:
            raise ViewError(f"--annotate {name}: no readable copy of {t.object}")
        try:
            machine, code = read_code(path, obj.segments, span[0], span[1])  # type: ignore
            instructions = disassemble(machine, code, span[0])
        except DisasmProblem as e:
            raise ViewError(f"{os.path.join(t.directory, t.copy)}: {e}") from None
    lines = symbols.lines(t.directory, t.ref, t.copy)
    if lines is None:
        warn(f"{t.object}: no line table (DWARF) for it or a debug file; "
             "disassembly alone")
    sources = SourceFiles(Roots(list(opts.symbols.source_roots)),
                          lambda: symbols.lines_named_here(t.directory, t.ref, t.copy),
                          warn, symbols.debuginfod, t.ref.build_id)
    rows = rows_of(t, instructions, lines, sources)
    sources.report(t.object)
    events = ",".join(dict.fromkeys(ts.event for ts in sets))
    _print(t, rows, events, unit, out)
    return 0


def _print(t: Target, rows: list[Row], event: str, unit: str, out: TextIO) -> None:
    title = (f" Percent |  Source code & Disassembly of {printable(t.object)} for {event} "
             f"({t.total:.6g} {unit}, percent: local period)")
    out.write(title + "\n" + "-" * len(title) + "\n")
    hot = [r for r in rows if r.hot]
    if hot:
        out.write(" Hottest source lines:\n")
        seen: set[str] = set()
        for r in sorted(hot, key=lambda r: -(r.percent or 0.0)):
            tag = r.text.split(" ", 1)[0]
            if tag not in seen:
                seen.add(tag)
                out.write(f" {r.percent or 0.0:7.2f}   {tag}\n")
        out.write("\n")
    out.write(f"         :  {t.start:016x} <{printable(t.name)}>:\n")
    for row in rows:
        mark = "*" if row.hot else " "
        pct = f"{row.percent:7.2f}" if row.percent is not None else " " * 7
        out.write(f"{mark}{pct} : {row.text}\n")
