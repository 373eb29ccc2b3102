"""``--format json``: the stable machine contract (extend it, never break it;
docs/json.md is its schema, ``FORMAT`` its version).

Times are in the profile's unit (seconds, usually); ``calls`` is null where
no call counts were collected, ``inclusive`` and arc times null where there
are no call stacks.
"""

from __future__ import annotations

from typing import Any, TextIO

from ..model.escape import write_json
from ..model.graph import Function, CallGraph
from .qualitytext import RULE

FORMAT = 1  # docs/json.md: raised only when a field changes meaning or goes away


def _num(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.9g}")


def _functions(profile: CallGraph, every: bool) -> list[Function]:
    """Most self time first; under --min-percent (and without ``every``) only
    those whose self time reaches the limit, as in the flat profile."""
    return sorted((f for f in profile.functions.values() if every or profile.shown_flat(f)),
                  key=lambda f: (-f.self, -f.inclusive, f.frame.name, f.frame.object))


def document(profile: CallGraph, with_stacks: bool = False) -> dict[str, Any]:
    s = profile.samples
    stacks = profile.has_stacks
    fns = _functions(profile, with_stacks)
    listed = {f.frame for f in fns}
    arcs = sorted((a for a in profile.arcs.values()
                   if a.caller in listed and a.callee in listed),
                  key=lambda a: (-a.total, a.caller.name, a.callee.name))
    left_out = [f for f in profile.functions.values() if f.frame not in listed]
    q = s.quality
    doc: dict[str, Any] = {
        "format": FORMAT,
        "event": s.event,
        "unit": s.unit,
        "total": _num(profile.total),
        "count_unit": _num(s.count_unit),
        "selection_total": _num(profile.base),
        "filters": list(s.filters),
        "by": s.by,
        "min_percent": profile.min_percent or None,
        "functions_left_out": {"count": len(left_out),
                               "self": _num(sum(f.self for f in left_out))},
        "lost_samples": s.lost_samples,
        "lost_share": _num(s.lost_share),
        "granularity": _num(s.granularities[0]) if len(s.granularities) == 1 else None,
        "has_stacks": stacks,
        "tasks": [{"comm": t.comm, "pid": t.pid, "cpu": t.cpu, "file": t.file,
                   "pids": list(t.pids) if t.pids else None, "directory": t.directory,
                   "command": t.command, "host": t.host, "unit": t.unit,
                   "container": t.container} for t in s.tasks],
        "functions": [{"name": f.frame.name, "object": f.frame.object, "self": _num(f.self),
                       "inclusive": _num(f.inclusive) if stacks else None,
                       "calls": _num(f.calls), "recursive_calls": _num(f.recursive_calls),
                       "kernel": f.frame.kernel, "cycle": f.cycle,
                       **({"function": f.frame.function} if s.by == "line" else {}),
                       **({"inlined": True} if f.frame.inlined else {})}
                      for f in fns],
        "arcs": [{"caller": a.caller.name, "callee": a.callee.name,
                  "self": _num(a.self) if stacks else None,
                  "children": _num(a.children) if stacks else None,
                  "calls": _num(a.calls), "caller_object": a.caller.object,
                  "callee_object": a.callee.object,
                  **({"programs": list(a.programs)} if s.stack_programs is not None
                     and a.programs is not None else {})} for a in arcs],
        "cycles": [{"number": c.number, "self": _num(c.self), "inclusive": _num(c.inclusive),
                    "calls": _num(c.calls),
                    "members": [{"name": m.name, "object": m.object} for m in c.members]}
                   for c in profile.cycles],
        "stack_quality": None if not stacks else {
            "rule": RULE,
            "user_stacks": _num(q.overall.stacks),
            "rooted": _num(q.overall.rooted),
            "share": _num(q.overall.share),
            "not_kept": _num(q.unkept),  # weight whose stacks the collector folded
            "moved_to_function_start": _num(q.moved),  # ... whose addresses it folded
            "objects": [{"object": obj, "user_stacks": _num(c.stacks), "rooted": _num(c.rooted),
                         "share": _num(c.share)}
                        for obj, c in sorted(q.by_object.items(),
                                             key=lambda kv: (-kv[1].stacks, kv[0]))],
            "python": [{"process": key, "user_stacks": _num(p.stacks), "python": _num(p.python),
                        "python_rooted": _num(p.python_rooted), "share": _num(p.share),
                        "jit": list(p.sources)}
                       for key, p in sorted(q.by_process.items(),
                                            key=lambda kv: (-kv[1].stacks, kv[0]))
                       if p.python or p.sources],
        },
    }
    if with_stacks:
        doc["stacks"] = _stacks(profile, fns)
    return doc


def _stacks(profile: CallGraph, fns: list[Function]) -> list[dict[str, Any]]:
    """Every distinct stack with its weight, outermost frame first, frames as
    indexes into ``functions``: enough to rebuild a flame graph or a diff."""
    s = profile.samples
    index = {f.frame: i for i, f in enumerate(fns)}
    rows = sorted(((-w, [index[s.frames[f]] for f in reversed(stack)])
                   for stack, w in s.stacks.items() if w > 0))
    return [{"frames": frames, "weight": _num(-neg)} for neg, frames in rows]


def render(profile: CallGraph, out: TextIO, stacks: bool = False) -> None:
    write_json(document(profile, stacks), out)
