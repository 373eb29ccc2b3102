"""The call-graph table, in gprof's shape.

One entry per function (and per cycle as a whole), most inclusive time
first, numbered in that order. Above an entry its callers, below it its
callees; ``<spontaneous>`` where the function was the outermost frame of
a stack. Times on caller and callee lines are the attributed times of the
arc: the callee's self and children time spent on behalf of that caller.
"""

from __future__ import annotations

import math
from typing import Iterable, TextIO, Union

from ..model.numfmt import DASH, calls, percent, si
from ..model.graph import Arc, Cycle, Function, CallGraph
from ..model.frames import Frame
from .rownames import Namer
from .units import below, is_time

SEPARATOR = "-" * 47
Entry = Union[Function, Cycle]


def _called(n: float | None, of: float | None = None, recursive: float | None = None) -> str:
    if n is None or (not n and not recursive and of is None):
        return DASH
    text = calls(n) if n else "0"
    if recursive:
        text += "+" + calls(recursive)
    if of is not None:
        text += "/" + (calls(of) if of else "0")
    return text


def _line(index: str, pct: str, self_: str, children: str, called: str, name: str) -> str:
    return f"{index:<6}{pct:>6} {self_:>8} {children:>9} {called:>12}  {name}".rstrip() + "\n"


def entries(profile: CallGraph) -> list[Entry]:
    """Entries in table order; under --min-percent only those whose inclusive
    time reaches the limit."""
    fns: list[Entry] = [f for f in profile.functions.values()
                        if profile.shown(f.frame) and _has_entry(f)]
    cycles: list[Entry] = [c for c in profile.cycles if c.inclusive >= profile.limit]

    def key(e: Entry) -> tuple[float, int, str]:
        if isinstance(e, Cycle):
            return (-e.inclusive, 0, e.name)
        return (-e.inclusive, 1, e.frame.name + "\0" + e.frame.object)
    return sorted(fns + cycles, key=key)


def _has_entry(fn: Function) -> bool:
    return fn.inclusive > 0 or bool(fn.calls)


def _left_out(profile: CallGraph, shown: int) -> int:
    """How many entries --min-percent left out of the ``shown`` (counted,
    not sorted again: a crafted profile has a million)."""
    if not profile.min_percent:
        return 0
    return sum(1 for f in profile.functions.values() if _has_entry(f)) + len(profile.cycles) \
        - shown


def render(profile: CallGraph, out: TextIO) -> None:
    out.write("call-graph table:\n\n")
    if not profile.has_stacks:
        out.write("(no call-stack data: the task sets have only histograms)\n")
        return
    order = entries(profile)
    index: dict[object, int] = {}
    for i, e in enumerate(order, 1):
        index[e.frame if isinstance(e, Function) else ("cycle", e.number)] = i
    name = Namer(profile)

    def ref(frame: Frame) -> str:
        i = index.get(frame)
        return f"{name(frame)} [{i}]" if i else name(frame)

    heading = "%time" if is_time(profile) else "%" + profile.samples.unit[:5]
    out.write(_line("index", heading, "self", "children", "called", "name"))
    for e in order:
        if isinstance(e, Cycle):
            _cycle_entry(profile, e, index, ref, out)
        else:
            _function_entry(profile, e, index[e.frame], ref, out)
        out.write(SEPARATOR + "\n")
    left = _left_out(profile, len(order))
    if left:
        out.write(below(left, " inclusive each", profile.min_percent) + "\n")


def _other(arcs: Iterable[Arc], what: str, out: TextIO, min_percent: float) -> None:
    """One line for the callers (or callees) below --min-percent, summed: what
    they account for stays visible."""
    dropped = list(arcs)
    if dropped:
        out.write(_line("", "", si(math.fsum(a.self for a in dropped)),
                        si(math.fsum(a.children for a in dropped)), "",
                        f"    (other) {len(dropped)} {what if len(dropped) > 1 else what[:-1]} "
                        f"below {min_percent:g}%"))


def _arc_line(arc: Arc, frame: Frame, of: float | None, ref: object, out: TextIO,
              same: bool = False, programs: bool = False) -> None:
    called = _called(arc.calls, None if same else of)
    where = f" (in {', '.join(arc.programs)})" if programs and arc.programs else ""
    out.write(_line("", "", si(arc.self), si(arc.children), called,
                    "    " + ref(frame) + where))  # type: ignore[operator]


def _several_programs(arcs: list[Arc]) -> bool:
    """Whether a function's callers come from more than one program: then
    each caller's line says which (a whole machine's call graph merges
    them)."""
    seen: set[str] = set()
    for arc in arcs:
        seen.update(arc.programs or ())
    return len(seen) > 1


def _function_entry(profile: CallGraph, fn: Function, i: int, ref: object,
                    out: TextIO) -> None:
    callers = [a for a in profile.callers(fn.frame) if profile.shown(a.caller)]
    callees = [a for a in profile.callees(fn.frame) if profile.shown(a.callee)]
    if fn.spontaneous > 0:
        out.write(_line("", "", "", "", "", "    <spontaneous>"))
    _other((a for a in profile.callers(fn.frame) if not profile.shown(a.caller)), "callers",
           out, profile.min_percent)
    programs = _several_programs(callers)
    for arc in sorted(callers, key=lambda a: (a.total, a.caller.name)):
        _arc_line(arc, arc.caller, fn.calls, ref, out, same=arc.caller == fn.frame,
                  programs=programs)
    out.write(_line(f"[{i}]", f"{percent(fn.inclusive, profile.base):.1f}", si(fn.self),
                    si(fn.children), _called(fn.calls, None, fn.recursive_calls),
                    ref(fn.frame)))  # type: ignore[operator]
    for arc in sorted(callees, key=lambda a: (-a.total, a.callee.name)):
        callee = profile.functions[arc.callee]
        _arc_line(arc, arc.callee, callee.calls, ref, out, same=arc.callee == fn.frame)
    _other((a for a in profile.callees(fn.frame) if not profile.shown(a.callee)), "callees",
           out, profile.min_percent)


def _cycle_entry(profile: CallGraph, cycle: Cycle, index: dict[object, int], ref: object,
                 out: TextIO) -> None:
    i = index[("cycle", cycle.number)]
    _other((a for a in cycle.callers.values() if not profile.shown(a.caller)), "callers",
           out, profile.min_percent)
    for arc in sorted(cycle.callers.values(), key=lambda a: (a.total, a.caller.name)):
        if profile.shown(arc.caller):
            _arc_line(arc, arc.caller, cycle.calls, ref, out)
    out.write(_line(f"[{i}]", f"{percent(cycle.inclusive, profile.base):.1f}", si(cycle.self),
                    si(cycle.children), _called(cycle.calls, None, cycle.internal_calls),
                    f"<cycle {cycle.number} as a whole> [{i}]"))
    for member in cycle.members:  # a shown cycle shows all its members
        fn = profile.functions[member]
        out.write(_line("", "", si(fn.self), si(fn.children),
                        _called(fn.calls, None, fn.recursive_calls),
                        "    " + ref(member)))  # type: ignore[operator]
