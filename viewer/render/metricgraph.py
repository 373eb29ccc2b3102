"""``--metrics cpu,off-cpu,wall --graph``: the call graph with several
metrics side by side, as the Studio analyzer's callers-callees view shows
them. Each entry is a function with each metric's self and inclusive time;
above it its callers, below it its callees, each line with the time of
each metric attributed along that call (the callee's self time and its
self plus children time on behalf of that caller: ``Arc.self`` and
``Arc.total``). A metric that has no such function or call shows ``-``.

Every metric has a call graph of its own (``--event``); they are joined by
frame here. Cycles are not entries of their own: each function's inclusive
time already counts a stack once however often it recurs.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, TextIO

from ..model.escape import write_json
from ..model.numfmt import DASH, si
from ..model.graph import Arc, CallGraph
from ..model.frames import Frame
from .metrics import rows, total, units
from .rownames import ambiguous_names, plain_name

SEPARATOR = "-" * 47
Pair = tuple[float, float]  # (self, inclusive) of one metric


def _width(metric: str) -> int:
    return max(9, len(metric) + 5)


def _cells(metrics: list[str], values: dict[str, Pair]) -> str:
    out = ""
    for m in metrics:
        w = _width(m)
        pair = values.get(m)
        out += (f" {si(pair[0]):>{w}} {si(pair[1]):>{w}}" if pair is not None
                else f" {DASH:>{w}} {DASH:>{w}}")
    return out


def arc_values(graphs: dict[str, CallGraph], caller: Frame, callee: Frame) -> dict[str, Pair]:
    """Metric -> (self, inclusive) attributed along caller -> callee, for the
    metrics that have the call."""
    found: dict[str, Pair] = {}
    for metric, g in graphs.items():
        arc = g.arcs.get((caller, callee))
        if arc is not None:
            found[metric] = (arc.self, arc.total)
    return found


def _arcs(graphs: dict[str, CallGraph], frame: Frame, callers: bool) -> list[tuple[Frame, Frame]]:
    """The (caller, callee) pairs into (or out of) ``frame`` in any metric."""
    pairs: dict[tuple[Frame, Frame], None] = {}
    for g in graphs.values():
        arcs: Iterable[Arc] = g.callers(frame) if callers else g.callees(frame)
        for a in arcs:
            pairs[(a.caller, a.callee)] = None
    return list(pairs)


def _weight(metrics: list[str], values: dict[str, Pair]) -> tuple[float, ...]:
    """What orders lines: each metric's inclusive time in turn (none: 0)."""
    return tuple(values.get(m, (0.0, 0.0))[1] for m in metrics)


def render_text(graphs: dict[str, CallGraph], out: TextIO) -> None:
    metrics = list(graphs)
    first = graphs[metrics[0]]
    out.write("Call graph by " + ", ".join(metrics) + f" ({units(graphs)}; each function's "
              "self and inclusive time, on its callers' and callees' lines the time "
              "attributed along that call)\n\n")
    if not any(g.has_stacks for g in graphs.values()):
        out.write("(no call-stack data: the task sets have only histograms)\n")
        return
    order = [(f, v) for f, v in rows(graphs) if first.shown(f)]
    index = {frame: i for i, (frame, _v) in enumerate(order, 1)}
    ambiguous = ambiguous_names(f for g in graphs.values() for f in g.functions)

    def ref(frame: Frame) -> str:
        name = plain_name(frame, ambiguous)
        return f"{name} [{index[frame]}]" if frame in index else name

    head = "".join(f" {m + ' self':>{_width(m)}} {m + ' incl':>{_width(m)}}" for m in metrics)
    out.write(f"{'index':<6}{head}  name\n")
    totals = "".join(f" {si(total(g)):>{_width(m)}} {'':>{_width(m)}}"
                     for m, g in graphs.items())
    out.write(f"{'':<6}{totals}  [total]\n")
    for frame, values in order:
        if any(g.functions[frame].spontaneous > 0 for g in graphs.values()
               if frame in g.functions):
            out.write(f"{'':<6}{_blank(metrics)}      <spontaneous>\n")
        _lines(graphs, metrics, frame, True, ref, out)
        out.write(f"{'[' + str(index[frame]) + ']':<6}{_cells(metrics, values)}  "
                  f"{ref(frame)}\n")
        _lines(graphs, metrics, frame, False, ref, out)
        out.write(SEPARATOR + "\n")
    left = len(rows(graphs)) - len(order)
    if left:
        out.write(f"({left} function{'s' if left > 1 else ''} below {first.min_percent:g}% "
                  f"of {metrics[0]} inclusive each)\n")


def _blank(metrics: list[str]) -> str:
    return "".join(f" {'':>{_width(m)}} {'':>{_width(m)}}" for m in metrics)


def _lines(graphs: dict[str, CallGraph], metrics: list[str], frame: Frame, callers: bool,
           ref: Callable[[Frame], str], out: TextIO) -> None:
    """The callers (ascending: the heaviest next to the entry, as gprof) or
    the callees (descending) of ``frame``; those below --min-percent summed."""
    first = graphs[metrics[0]]
    shown: list[tuple[Frame, dict[str, Pair]]] = []
    hidden: list[tuple[Frame, dict[str, Pair]]] = []
    for pair in _arcs(graphs, frame, callers):
        other = pair[0] if callers else pair[1]
        (shown if first.shown(other) else hidden).append((other, arc_values(graphs, *pair)))
    if callers:
        shown.sort(key=lambda ov: (_weight(metrics, ov[1]), ov[0].name))
    else:
        shown.sort(key=lambda ov: (tuple(-w for w in _weight(metrics, ov[1])), ov[0].name))
    for other, values in shown:
        out.write(f"{'':<6}{_cells(metrics, values)}      {ref(other)}\n")
    if hidden:
        summed = {m: (math.fsum(v[m][0] for _o, v in hidden if m in v),
                      math.fsum(v[m][1] for _o, v in hidden if m in v))
                  for m in metrics if any(m in v for _o, v in hidden)}
        what = "callers" if callers else "callees"
        out.write(f"{'':<6}{_cells(metrics, summed)}      (other) {len(hidden)} "
                  f"{what if len(hidden) > 1 else what[:-1]} below {first.min_percent:g}%\n")


def json_arcs(graphs: dict[str, CallGraph]) -> list[dict[str, Any]]:
    """Every call of any metric, with each metric's attributed self and
    inclusive time (a metric without the call leaves its key out)."""
    metrics = list(graphs)
    pairs = dict.fromkeys(p for g in graphs.values() for p in g.arcs)
    listed = [(pair, arc_values(graphs, *pair)) for pair in pairs]
    listed.sort(key=lambda pv: (tuple(-w for w in _weight(metrics, pv[1])),
                                pv[0][0].name, pv[0][1].name))
    return [{"caller": caller.name, "caller_object": caller.object,
             "callee": callee.name, "callee_object": callee.object,
             **{m: {"self": _num(v[0]), "inclusive": _num(v[1])} for m, v in values.items()}}
            for (caller, callee), values in listed]


def _num(x: float) -> float:
    return float(f"{x:.9g}")


def render_json(graphs: dict[str, CallGraph], out: TextIO, with_arcs: bool = False) -> None:
    """The functions of every metric; ``with_arcs`` (--graph): and every call,
    with the time of each metric attributed along it."""
    data: dict[str, Any] = {
        "format": 1, "metrics": [{"event": m, "unit": g.samples.unit, "total": total(g)}
                                 for m, g in graphs.items()],
        "functions": [{"name": f.name, "object": f.object,
                       **{m: {"self": v[0], "inclusive": v[1]} for m, v in vals.items()}}
                      for f, vals in rows(graphs)]}
    if with_arcs:
        data["arcs"] = json_arcs(graphs)
    write_json(data, out)
