"""The flat profile, in the original q-view's shape."""

from __future__ import annotations

import math
from typing import TextIO

from ..model.numfmt import DASH, calls, percent, si
from ..model.graph import Function, CallGraph
from ..model.lost import Lost
from .rownames import Namer
from .units import base_note, below, legend, share_heading


def header(profile: CallGraph, out: TextIO) -> None:
    """`Command:` lines, one per distinct command of the merged sets, then
    what the numbers are (for a call graph shown without the flat profile)."""
    _commands(profile, out)
    _notes(profile, out)


def _commands(profile: CallGraph, out: TextIO) -> None:
    commands = list(dict.fromkeys(t.command for t in profile.samples.tasks))
    for command in commands[:MAX_COMMANDS]:
        out.write(f"Command: {command}\n")
    if len(commands) > MAX_COMMANDS:
        out.write(f"Command: ... and {len(commands) - MAX_COMMANDS} more\n")


MAX_COMMANDS = 8  # a whole-machine report names hundreds of programs


def _notes(profile: CallGraph, out: TextIO) -> None:
    out.write(legend(profile) + "\n")
    note = base_note(profile)
    if note:
        out.write(note + "\n")


def _files(profile: CallGraph) -> str:
    files = [t.hist_file or t.file for t in profile.samples.tasks]
    return ", ".join(files) if len(files) <= 4 else f"{len(files)} histogram files"


def _granularity(profile: CallGraph) -> str | None:
    g = profile.samples.granularities
    if not g:
        return None
    text = si(g[0]) if len(g) == 1 else f"{si(g[0])} to {si(g[-1])}"
    return f"Each histogram sample counts as {text} {profile.samples.unit}"


def rows(profile: CallGraph) -> list[Function]:
    """Functions in flat-profile order: most self time first (all of them;
    ``render`` sums those under --min-percent)."""
    fns = [f for f in profile.functions.values() if f.self > 0 or (f.calls or 0) > 0]
    return sorted(fns, key=lambda f: (-f.self, -f.inclusive, f.frame.name, f.frame.object))


def render(profile: CallGraph, out: TextIO) -> None:
    s = profile.samples
    _commands(profile, out)
    out.write(f"Flat profile of {s.event} in {_files(profile)}:\n")
    line = _granularity(profile)
    if line:
        out.write(line + "\n")
    _notes(profile, out)
    if s.lost_samples:
        out.write(Lost(s.lost_samples, s.lost_share).text() + "\n")
    share = share_heading(profile)
    width = max(7, len(share))
    out.write(f"{share:>{width}} {'self':>7} {'cumul':>7} {'calls':>7} {'self/call':>9} "
              f"{'tot/call':>9}  name\n")
    name = Namer(profile)
    cumul = 0.0
    rest: list[Function] = []
    base = profile.base
    for fn in rows(profile):
        if not profile.shown_flat(fn):
            rest.append(fn)
            continue
        cumul += fn.self
        n = fn.calls if fn.calls else None
        self_call = si(fn.self / n) if n else DASH
        tot_call = si(fn.inclusive / n) if n and profile.has_stacks else DASH
        out.write(f"{percent(fn.self, base):{width}.2f} {si(fn.self):>7} {si(cumul):>7} "
                  f"{calls(n):>7} {self_call:>9} {tot_call:>9}  {name(fn.frame)}\n")
    if rest:
        # The rows left out are summed, so the column still adds up and a
        # cost spread over many small rows stays in sight.
        self_rest = math.fsum(f.self for f in rest)
        cumul += self_rest
        out.write(f"{percent(self_rest, base):{width}.2f} {si(self_rest):>7} {si(cumul):>7} "
                  f"{'':>7} {'':>9} {'':>9}  "
                  f"{below(len(rest), ' self each', profile.min_percent)}\n")
    unnamed = _unnamed(profile)
    if unnamed:
        out.write(unnamed + "\n")
    if not profile.total:
        out.write("(no samples)\n")


def _unnamed(profile: CallGraph) -> str | None:
    """How much time sits in single addresses (code with no symbol and no
    unwind entry to group it by), so a reader knows those rows are pieces."""
    s = profile.samples
    if not s.unnamed:
        return None
    frames = {s.frames[i] for i in s.unnamed}
    fns = [profile.functions[f] for f in frames if f in profile.functions
           and profile.functions[f].self > 0]
    if not fns:
        return None
    total = math.fsum(f.self for f in fns)
    rows = "1 row is a single address" if len(fns) == 1 else \
        f"{len(fns)} rows are single addresses"
    return (f"{rows} (no symbol, and no unwind entry to group by function): "
            f"{si(total)} {s.unit}, {percent(total, profile.base):.2f}% in all")
