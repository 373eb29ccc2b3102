"""``--format collapsed``: folded stacks for flamegraph.pl and speedscope.

One line per distinct stack, outermost frame first, frames joined by ``;``,
then a space and an integer weight: the event count (nanoseconds for
cpu-clock), which both tools expect as a whole number.
"""

from __future__ import annotations

from typing import TextIO

from ..model import Profile


def _clean(name: str) -> str:
    # ';' separates frames, so it may not appear inside a name (line breaks
    # cannot: frames are made with their control characters escaped).
    return name.replace(";", ":")


def render(profile: Profile, out: TextIO) -> None:
    s = profile.samples
    per_count = s.count_unit or 1.0
    folded: dict[str, float] = {}
    for stack, w in s.stacks.items():
        text = ";".join(_clean(s.frames[f].name) for f in reversed(stack))
        folded[text] = folded.get(text, 0.0) + w
    for text in sorted(folded):
        value = round(folded[text] / per_count)
        if value > 0:
            out.write(f"{text} {value}\n")
