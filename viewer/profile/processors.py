"""Call-graph processors: CallGraph -> CallGraph (pyinstrument's shape).

``threshold`` sets the share below which report rows are summed rather
than shown: each table judges by the column it is sorted by (self in the
flat profile, inclusive in the call graph); totals stay as they were.
"""

from __future__ import annotations

from ..model.graph import CallGraph


def threshold(profile: CallGraph, min_percent: float) -> CallGraph:
    if min_percent <= 0 or not profile.total:
        return profile
    return CallGraph(profile.samples, profile.total, profile.functions, profile.arcs,
                     profile.cycles, min_percent)
