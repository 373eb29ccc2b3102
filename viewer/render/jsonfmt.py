"""``--format json``: the stable machine contract of DESIGN 5 (extend, don't break).

Times are in the profile's unit (seconds, usually); ``calls`` is null where
no call counts were collected, ``inclusive`` and arc times null where there
are no call stacks.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from ..build import ROOT_FRAMES
from ..model import Profile


def _num(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.9g}")


def document(profile: Profile) -> dict[str, Any]:
    s = profile.samples
    stacks = profile.has_stacks
    fns = sorted((f for f in profile.functions.values() if profile.shown(f.frame)),
                 key=lambda f: (-f.self, -f.inclusive, f.frame.name, f.frame.object))
    arcs = sorted((a for a in profile.arcs.values()
                   if profile.shown(a.caller) and profile.shown(a.callee)),
                  key=lambda a: (-a.total, a.caller.name, a.callee.name))
    q = s.quality
    return {
        "event": s.event,
        "unit": s.unit,
        "total": _num(profile.total),
        "lost_samples": s.lost_samples,
        "granularity": _num(s.granularities[0]) if len(s.granularities) == 1 else None,
        "has_stacks": stacks,
        "tasks": [{"comm": t.comm, "pid": t.pid, "cpu": t.cpu, "file": t.file,
                   "pids": list(t.pids) if t.pids else None, "directory": t.directory,
                   "command": t.command} for t in s.tasks],
        "functions": [{"name": f.frame.name, "object": f.frame.object, "self": _num(f.self),
                       "inclusive": _num(f.inclusive) if stacks else None,
                       "calls": _num(f.calls), "recursive_calls": _num(f.recursive_calls),
                       "kernel": f.frame.kernel, "cycle": f.cycle} for f in fns],
        "arcs": [{"caller": a.caller.name, "callee": a.callee.name,
                  "self": _num(a.self) if stacks else None,
                  "children": _num(a.children) if stacks else None,
                  "calls": _num(a.calls), "caller_object": a.caller.object,
                  "callee_object": a.callee.object} for a in arcs],
        "cycles": [{"number": c.number, "self": _num(c.self), "inclusive": _num(c.inclusive),
                    "calls": _num(c.calls),
                    "members": [{"name": m.name, "object": m.object} for m in c.members]}
                   for c in profile.cycles],
        "stack_quality": None if not stacks else {
            "roots": sorted(ROOT_FRAMES),
            "user_stacks": _num(q.overall.stacks),
            "rooted": _num(q.overall.rooted),
            "share": _num(q.overall.share),
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


def render(profile: Profile, out: TextIO) -> None:
    json.dump(document(profile), out, indent=1)
    out.write("\n")
