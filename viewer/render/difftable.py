"""``q-view --diff``: a comparison as text, JSON (docs/json.md, "Comparing
two profiles") or two-column folded stacks.

The folded form is what Brendan Gregg's difffolded.pl prints and
flamegraph.pl draws as a difference flame graph: ``stack base_count
new_count``, one line per stack of either side, with the counts of
``--format collapsed`` (process root frame, ``_[k]`` kernel frames). By
default BASE's counts are scaled to NEW's total, as ``difffolded.pl -n``
does; with ``--absolute`` they are left as they are.
"""

from __future__ import annotations

import time
from typing import Any, Callable, TextIO

from ..model.numfmt import DASH, si
from ..profile.compare import BASE, ONLY_BASE, ONLY_NEW, Comparison, Row, Side
from ..model.escape import printable, write_json
from ..model.frames import Frame
from . import collapsed
from .units import legend, share_heading

FORMAT = 1  # of the comparison document: raised only when a field changes meaning


def _points(x: float) -> str:
    text = f"{x:+.2f}"
    return "0.00" if text in ("+0.00", "-0.00") else text


def _change(x: float) -> str:
    text = si(x)
    return text if x <= 0 or text == "0.00" else "+" + text


def _names(rows: tuple[Row, ...]) -> Callable[[Frame], str]:
    """A name two objects share gets its object (``init<libfoo.so>``), as in
    the flat profile."""
    owners: dict[str, set[str]] = {}
    for r in rows:
        owners.setdefault(r.frame.name, set()).add(r.frame.object)
    ambiguous = {name for name, objs in owners.items() if len(objs) > 1}

    def name(frame: Frame) -> str:
        if frame.name in ambiguous and not frame.name.endswith(">"):
            return f"{frame.name}<{frame.object}>"
        return frame.name
    return name


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def describe(side: Side) -> str:
    """``.q (since ..., until ...): 3 task sets, 30.0m seconds of cpu-clock``."""
    sel, s = side.selection, side.profile.samples
    window = [f"{word} {_when(t)}" for word, t in (("since", sel.since), ("until", sel.until))
              if t is not None]
    where = printable(side.input) + (f" ({', '.join(window)})" if window else "")
    sets = len(s.tasks)
    return (f"{where}: {sets} task set{'s' if sets != 1 else ''}, "
            f"{si(side.profile.base)} {s.unit} of {s.event}")


def text(c: Comparison, out: TextIO) -> None:
    n = c.new.profile
    out.write(f"Comparison by {n.samples.by} (change: new - base)\n")
    out.write(f"Base: {describe(c.base)}\n")
    out.write(f"New:  {describe(c.new)}\n")
    out.write(legend(n) + "\n")
    if c.absolute:
        out.write("Times as measured, not normalized; largest change first\n")
        heads = ("self", "inclusive")
    else:
        out.write(f"Shares ({share_heading(n)}) of each side's own total; change in "
                  "percentage points; largest change first\n")
        heads = ("self %", "inclusive %")
    out.write(f"{heads[0]:^23}  {heads[1]:^23}".rstrip() + "\n")
    out.write(f"{'base':>7} {'new':>7} {'change':>7}  {'base':>7} {'new':>7} {'change':>7}  "
              "name\n")
    name = _names(c.rows)
    for r in c.rows:
        if c.absolute:
            cells = [si(r.base_self), si(r.new_self), _change(r.self_change)]
            incl = [si(r.base_inclusive), si(r.new_inclusive), _change(r.inclusive_change)]
        else:
            cells = [f"{r.base_self_share:.2f}", f"{r.new_self_share:.2f}",
                     _points(r.self_points)]
            incl = [f"{r.base_inclusive_share:.2f}", f"{r.new_inclusive_share:.2f}",
                    _points(r.inclusive_points)]
        if not c.has_stacks:
            incl = [DASH] * 3
        mark = " [new]" if r.status == ONLY_NEW else " [gone]" if r.status == ONLY_BASE else ""
        out.write(" ".join(f"{x:>7}" for x in cells) + "  "
                  + " ".join(f"{x:>7}" for x in incl) + f"  {name(r.frame)}{mark}\n")
    if c.left_out:
        what = "percent of the base's total" if c.absolute else "points"
        out.write(f"... {c.left_out} more changed by less than {c.min_percent:g} {what}\n")
    if not c.rows and not c.left_out:
        out.write("(no samples)\n")


def _num(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.9g}")


def _side(side: Side) -> dict[str, Any]:
    p, s = side.profile, side.profile.samples
    return {
        "input": side.input,
        "since": side.selection.since,
        "until": side.selection.until,
        "event": s.event,
        "total": _num(p.total),
        "selection_total": _num(p.base),
        "filters": list(s.filters),
        "lost_samples": s.lost_samples,
        "lost_share": _num(s.lost_share),
        "has_stacks": p.has_stacks,
        "tasks": [{"comm": t.comm, "pid": t.pid, "cpu": t.cpu, "file": t.file,
                   "pids": list(t.pids) if t.pids else None, "directory": t.directory,
                   "command": t.command} for t in s.tasks],
    }


def _row(r: Row, stacks: bool) -> dict[str, Any]:
    def incl(x: float) -> float | None:
        return _num(x) if stacks else None
    return {
        "name": r.frame.name, "object": r.frame.object, "kernel": r.frame.kernel,
        "status": r.status,
        "base_self": _num(r.base_self), "new_self": _num(r.new_self),
        "self_change": _num(r.self_change),
        "base_self_percent": _num(r.base_self_share), "new_self_percent": _num(r.new_self_share),
        "self_points": _num(r.self_points),
        "base_inclusive": incl(r.base_inclusive), "new_inclusive": incl(r.new_inclusive),
        "inclusive_change": incl(r.inclusive_change),
        "base_inclusive_percent": incl(r.base_inclusive_share),
        "new_inclusive_percent": incl(r.new_inclusive_share),
        "inclusive_points": incl(r.inclusive_points),
    }


def document(c: Comparison) -> dict[str, Any]:
    n = c.new.profile.samples
    return {
        "format": FORMAT,
        "comparison": "absolute" if c.absolute else "shares",
        "unit": n.unit,
        "by": n.by,
        "has_stacks": c.has_stacks,
        "min_percent": c.min_percent or None,
        "functions_left_out": {"count": c.left_out},
        BASE: _side(c.base),
        "new": _side(c.new),
        "functions": [_row(r, c.has_stacks) for r in c.rows],
    }


def as_json(c: Comparison, out: TextIO) -> None:
    write_json(document(c), out)


def folded(c: Comparison, out: TextIO) -> None:
    """``stack base_count new_count``, stacks sorted; counts in NEW's count
    unit (nanoseconds for clocks), BASE's scaled to NEW's total unless
    ``--absolute``."""
    base, new = collapsed.folded(c.base.profile), collapsed.folded(c.new.profile)
    per_count = c.new.profile.samples.count_unit or 1.0
    base_total, new_total = sum(base.values()), sum(new.values())
    scale = new_total / base_total if base_total and new_total and not c.absolute else 1.0
    for stack in sorted(base.keys() | new.keys()):
        b = collapsed.count(base.get(stack, 0.0) * scale, per_count)
        n = collapsed.count(new.get(stack, 0.0), per_count)
        out.write(f"{stack} {b} {n}\n")


RENDERERS: dict[str, Callable[[Comparison, TextIO], None]] = {
    "text": text, "json": as_json, "collapsed": folded}
