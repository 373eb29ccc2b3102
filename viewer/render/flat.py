"""The flat profile, in the original q-view's shape."""

from __future__ import annotations

from typing import TextIO

from ..model import Function, Profile
from ..numfmt import DASH, calls, percent, si
from .names import Namer


def header(profile: Profile, out: TextIO) -> None:
    """`Command:` lines, one per distinct command of the merged sets."""
    for command in dict.fromkeys(t.command for t in profile.samples.tasks):
        out.write(f"Command: {command}\n")


def _files(profile: Profile) -> str:
    files = [t.hist_file or t.file for t in profile.samples.tasks]
    return ", ".join(files) if len(files) <= 4 else f"{len(files)} histogram files"


def _granularity(profile: Profile) -> str | None:
    g = profile.samples.granularities
    if not g:
        return None
    text = si(g[0]) if len(g) == 1 else f"{si(g[0])} to {si(g[-1])}"
    return f"Each histogram sample counts as {text} {profile.samples.unit}"


def rows(profile: Profile) -> list[Function]:
    """Functions in flat-profile order: most self time first."""
    fns = [f for f in profile.functions.values()
           if profile.shown(f.frame) and (f.self > 0 or (f.calls or 0) > 0)]
    return sorted(fns, key=lambda f: (-f.self, -f.inclusive, f.frame.name, f.frame.object))


def render(profile: Profile, out: TextIO) -> None:
    s = profile.samples
    header(profile, out)
    out.write(f"Flat profile of {s.event} in {_files(profile)}:\n")
    line = _granularity(profile)
    if line:
        out.write(line + "\n")
    if s.lost_samples:
        out.write(f"Lost samples: {s.lost_samples}\n")
    out.write(f"{'% time':>7} {'self':>7} {'cumul':>7} {'calls':>7} {'self/call':>9} "
              f"{'tot/call':>9}  name\n")
    name = Namer(profile)
    cumul = 0.0
    for fn in rows(profile):
        cumul += fn.self
        n = fn.calls if fn.calls else None
        self_call = si(fn.self / n) if n else DASH
        tot_call = si(fn.inclusive / n) if n and profile.has_stacks else DASH
        out.write(f"{percent(fn.self, profile.total):7.2f} {si(fn.self):>7} {si(cumul):>7} "
                  f"{calls(n):>7} {self_call:>9} {tot_call:>9}  {name(fn.frame)}\n")
    if not profile.total:
        out.write("(no samples)\n")
