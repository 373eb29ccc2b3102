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

from ..model import Frame, CallGraph, printable


def _clean(frame: Frame) -> str:
    # ';' separates frames, so it may not appear inside a name (line breaks
    # cannot: frames are made with their control characters escaped).
    name = printable(frame.name).replace(";", ":")
    return name + "_[k]" if frame.kernel else name


def render(profile: CallGraph, out: TextIO) -> None:
    s = profile.samples
    per_count = s.count_unit or 1.0
    names = [_clean(f) for f in s.frames]
    folded: dict[str, float] = {}
    for stack, w in s.stacks.items():
        text = ";".join(names[f] for f in reversed(stack))
        folded[text] = folded.get(text, 0.0) + w
    for text in sorted(folded):
        if folded[text] > 0:
            # a stack that was sampled weighs at least 1 (a sample count
            # estimated from the mean period may round to 0)
            out.write(f"{text} {max(1, round(folded[text] / per_count))}\n")
