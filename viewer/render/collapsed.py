"""``--format collapsed``: folded stacks for flamegraph.pl and speedscope.

One line per distinct stack, ``frame;frame;...;frame N``: the process
first (see processes.py), then the outermost function down to the sampled
one, kernel frames marked ``_[k]`` as flamegraph.pl's scripts mark them.
N is a positive integer: the event count (nanoseconds of CPU time for
cpu-clock and task-clock, events for count events), or with ``--weight
samples`` the number of samples. Each set's counts are converted with its
own factor (processes.py): merged sets whose counts differ in size (cycles
at different clock rates) show nanoseconds; sets in different units keep
their own counts, with a warning. No frame holds ``;`` (written ``:``) or a
line break (control characters are escaped as ``\\xNN``).
"""

from __future__ import annotations

from typing import TextIO

from ..model.escape import printable
from ..model.frames import Frame
from ..model.graph import CallGraph


def _clean(frame: Frame) -> str:
    # ';' separates frames, so it may not appear inside a name (line breaks
    # cannot: frames are made with their control characters escaped).
    name = printable(frame.name).replace(";", ":")
    return name + "_[k]" if frame.kernel else name


def folded(profile: CallGraph) -> dict[str, float]:
    """Each distinct folded stack's weight, in the profile's unit (a count
    is ``weight / samples.count_unit``); stacks that weigh nothing left out."""
    names = [_clean(f) for f in profile.samples.frames]
    stacks: dict[str, float] = {}
    for stack, w in profile.samples.stacks.items():
        text = ";".join(names[f] for f in reversed(stack))
        stacks[text] = stacks.get(text, 0.0) + w
    return {text: w for text, w in stacks.items() if w > 0}


def count(weight: float, per_count: float) -> int:
    """A stack that was sampled weighs at least 1 (a sample count estimated
    from the mean period may round to 0)."""
    return max(1, round(weight / per_count)) if weight > 0 else 0


def render(profile: CallGraph, out: TextIO) -> None:
    per_count = profile.samples.count_unit or 1.0
    stacks = folded(profile)
    for text in sorted(stacks):
        out.write(f"{text} {count(stacks[text], per_count)}\n")
