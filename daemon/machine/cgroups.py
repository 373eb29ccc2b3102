"""Which cgroup each id names, from CGROUP records.

Samples carry a cgroup id (PERF_SAMPLE_CGROUP: the cgroup2 directory's
inode number); CGROUP records (attr.cgroup) name the cgroups made after
the events opened, and those that existed before come as CGROUP records
synthesized from the host's cgroup2 tree (synthesize.cgroups), as perf
does: the table changes only by records.

A set's cgroup is the one of its samples with the most weight, chosen at
each checkpoint: runtimes and ``systemd-run --scope`` move a task into
its cgroup after fork, so where a task was first seen is often not where
it runs; a set whose task moved once is named after where it spent most.
"""

from __future__ import annotations

from typing import Callable, Iterable

from ..decode.records import Cgroup

MAX_CGROUPS = 1 << 16  # ids remembered; past it the oldest go first
MAX_SET_CGROUPS = 64  # distinct cgroups weighed per set; later ones are not counted


class CgroupTable:
    """cgroup id -> path, changed by CGROUP records."""

    def __init__(self, limit: int = MAX_CGROUPS) -> None:
        self.paths: dict[int, str] = {}
        self.limit = limit
        self.missed: set[int] = set()  # ids no record and no look at the host named

    def complete(self, weights: Iterable[dict[int, int]],
                 look: Callable[[], Iterable[Cgroup]]) -> None:
        """Name the ids of ``weights`` no record named, from one more look
        at the host (``look``): a cgroup made while the events were being
        opened, or, collecting one command's tasks, made by a task outside
        them (its CGROUP record goes to no event of ours). An id the look
        does not find either (removed meanwhile) is not looked for again."""
        unknown = {cid for w in weights for cid in w
                   if cid not in self.paths and cid not in self.missed}
        if not unknown:
            return
        for rec in look():
            self.on_cgroup(rec)
        if len(self.missed) > self.limit:
            self.missed.clear()
        self.missed |= unknown - self.paths.keys()

    def on_cgroup(self, rec: Cgroup) -> None:
        """The handler of CGROUP records (routes.Handlers.cgroup)."""
        self.paths.pop(rec.id, None)  # a re-made id moves to the young end
        self.paths[rec.id] = rec.path
        while len(self.paths) > self.limit:
            del self.paths[next(iter(self.paths))]

    def apply(self, rec: Cgroup) -> None:
        self.on_cgroup(rec)

    def choose(self, weights: dict[int, int]) -> str | None:
        """The path of the known cgroup with the most weight (ties: the
        smaller id, so every checkpoint chooses alike)."""
        best = None
        for cid, weight in weights.items():
            if cid in self.paths and (best is None or (weight, -cid) > (best[0], -best[1])):
                best = (weight, cid)
        return self.paths[best[1]] if best else None


def weigh(weights: dict[int, int], cgroup: int, weight: int) -> None:
    """Count a sample's ``weight`` for its ``cgroup`` in a set's ``weights``."""
    if cgroup in weights:
        weights[cgroup] += weight
    elif len(weights) < MAX_SET_CGROUPS:
        weights[cgroup] = weight
