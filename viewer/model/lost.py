"""Lost samples counted once (docs/q-format.md 4.1, q:lost-samples).

A CPU's ring that overflows loses records, and the kernel cannot say
whose: each set that was open on that CPU meanwhile counts them, so the
sets of one CPU repeat one loss. A set says which of its CPU's losses in
its time slice it saw: numbers ``q:lost-from`` up to ``q:lost-from`` +
``q:lost-samples`` of the slice named by ``q:slice-start``. The loss of a
selection is the union of those numbers per (host, run, CPU, slice): each
lost record once, and only those lost while a selected set was open.

Sets written before those keys say only how many: the largest count of
each CPU's sets that shared time stands for them (a slice's kernel set
spans it, so a whole slice's selection still counts its CPU's loss once).

The share is what the lost records could have been of the selection had
they all been its own: count / (count + the selection's samples). It is
an upper bound: they may as well have been another process's.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from qtools.qformat import TaskInfo


class LostClaim(NamedTuple):
    """What one set says of its CPU's lost records."""

    host: str | None
    run: str | None
    cpu: int | None
    slice_start: float | None
    lost_from: int | None  # None: written before q:lost-from
    lost: int
    samples: int | None  # None: the set does not say (q:samples)
    start: float | None
    end: float | None


def claim(task: TaskInfo) -> LostClaim:
    """The claim of a set's ``q:info``."""
    lost = task.lost_samples or 0
    return LostClaim(task.hostname, task.run_id, task.cpu, task.slice_start,
                     task.lost_from if task.slice_start is not None else None, lost,
                     task.samples, task.start_time, task.end_time)


class Lost(NamedTuple):
    """The lost records of a selection, each once, and the share of its
    samples they could have been (None where it has neither)."""

    records: int
    share: float | None

    def text(self) -> str:
        """The report line: ``Lost samples: N (up to X% ...)``."""
        share = "" if self.share is None else \
            f" (up to {100 * self.share:.1f}% of the samples of the CPUs and times selected)"
        return f"Lost samples: {self.records}{share}"


def lost_once(claims: Iterable[LostClaim]) -> Lost:
    """The records lost on the CPUs and in the times of ``claims``' sets,
    each counted once (see the module's comment); no share where a set
    does not say how many samples it has."""
    samples: int | None = 0
    ranges: dict[tuple[object, ...], list[tuple[int, int]]] = {}
    older: dict[tuple[object, ...], list[LostClaim]] = {}
    for c in claims:
        samples = None if samples is None or c.samples is None else samples + c.samples
        if c.lost <= 0:
            continue
        if c.lost_from is not None:
            key = (c.host, c.run, c.cpu, c.slice_start)
            ranges.setdefault(key, []).append((c.lost_from, c.lost_from + c.lost))
        else:
            older.setdefault((c.host, c.run, c.cpu), []).append(c)
    count = sum(_union(r) for r in ranges.values()) + sum(_largest_at_once(g)
                                                         for g in older.values())
    if samples is None or not count and not samples:
        return Lost(count, None)
    return Lost(count, count / (count + samples))


def _union(spans: list[tuple[int, int]]) -> int:
    """How many numbers the half-open ranges ``spans`` hold together."""
    total, reach = 0, None
    for lo, hi in sorted(spans):
        if reach is None or lo >= reach:
            total += hi - lo
            reach = hi
        elif hi > reach:
            total += hi - reach
            reach = hi
    return total


def _largest_at_once(claims: list[LostClaim]) -> int:
    """Older sets of one CPU: the largest count of each group of sets whose
    times overlap (one slice's, or one collector's), added over the groups.
    A set that does not say when it ran joins the others' largest."""
    timed = sorted((c.start, c.end, c.lost) for c in claims
                   if c.start is not None and c.end is not None)
    untimed = max((c.lost for c in claims if c.start is None or c.end is None), default=0)
    total, largest, until = 0, 0, None
    for start, end, lost in timed:
        if until is None or start >= until:
            total += largest
            largest, until = 0, end
        largest = max(largest, lost)
        until = max(until, end)
    total += largest
    return max(total, untimed)
