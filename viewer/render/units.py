"""What the numbers of a report are: the legend of SI prefixes, the name of
the share column, and what percentages are of."""

from __future__ import annotations

from ..model.numfmt import percent, si
from ..model.graph import CallGraph

SECONDS = "seconds"


def is_time(profile: CallGraph) -> bool:
    return profile.samples.unit == SECONDS


def legend(profile: CallGraph) -> str:
    """One line that makes the prefixes unmistakable: ``2.01m`` in a seconds
    column is two milliseconds, not two minutes."""
    if is_time(profile):
        return "times in seconds; m = 1e-3, u = 1e-6, n = 1e-9"
    return (f"counts in {profile.samples.unit}; k = 1e3, M = 1e6, G = 1e9, "
            "m = 1e-3")


def share_heading(profile: CallGraph) -> str:
    """``% time`` for clocks, ``% events`` (``% cycles``) for counts."""
    return "% time" if is_time(profile) else f"% {profile.samples.unit}"


def base_note(profile: CallGraph) -> str | None:
    """Where filters took stacks away, say that shares are still of the whole."""
    s = profile.samples
    if s.whole is None:
        return None
    return (f"Percentages are of the whole selection ({si(s.whole)} {s.unit}); "
            f"{' '.join(s.filters)} keeps {si(s.total)} ({percent(s.total, s.whole):.1f}%)")


def below(count: int, what: str, min_percent: float) -> str:
    return f"... {count} more below {min_percent:g}%{what}"
