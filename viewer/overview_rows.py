"""The overview's rows: one per process, CPUs merged; idle apart.

A process that ran on two CPUs has a set on each; both carry the same
process-wide counters (``q:task-stats``) over their own spans. One row per
process adds the samples of its sets and shows the counters once: summed
over the time slices of each CPU's set, the largest of the CPUs (the set
that started first spans the others). Aggregates of short-lived processes
are merged the same way, their counters added where their pids differ.

The ``kernel-cpuN`` sets hold what pid 0 (the idle task) ran: the idle
loop and the interrupts taken in it, which perf calls swapper. They make
one row of their own, ``idle``, apart from the kernel work that every
process's row already holds. A collection made with ``q-syscollect -k``
puts every pid's kernel samples there: those sets say how much of their
weight was the idle task's (``q:idle-weight``), which makes the ``idle``
row, and the rest is the ``kernel`` row.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

from . import runs
from .load import SetRemoved, StoredSet
from .model import printable
from .render.overview import Row

IDLE = "idle"
KERNEL = "kernel"
MAX_CPUS_LISTED = 4


def kernel_only_run(ts: StoredSet) -> bool:
    """Whether the set was collected with ``q-syscollect -k``."""
    args = ts.info.task.syscollect_cmdline or []
    for arg in args[1:]:
        if arg == "--":
            break
        if arg.startswith("-") and not arg.startswith("--") and arg[1:].isalpha() \
                and "k" in arg[1:]:
            return True
    return False


def process_key(ts: StoredSet) -> tuple[object, ...]:
    """Sets with the same key make one row."""
    if ts.is_kernel:
        return (KERNEL,)
    prog = ts.set_name.prog if ts.set_name else ts.name
    return (prog, ts.pid)  # pid None: the program's aggregates, all CPUs


def idle_weight(ts: StoredSet) -> float | None:
    """The idle task's part of a kernel set, in output units; None where the
    set does not say (written before q:idle-weight existed)."""
    if not ts.is_kernel:
        return None
    if not kernel_only_run(ts):
        return ts.total()  # only pid 0's samples go there
    value = ts.info.task.extra.get("q:idle-weight")
    return value * ts.factor if isinstance(value, int) and value >= 0 else None


def process_rows(found: Iterable[StoredSet], escape: Callable[[str], str] = printable) -> list[Row]:
    groups: dict[tuple[object, ...], list[StoredSet]] = {}
    for ts in found:
        groups.setdefault(process_key(ts), []).append(ts)
    # A set without a histogram (just claimed, no samples yet) has no unit
    # of its own: it takes the directory's, so the shares still add up.
    units = [ts.unit for group in groups.values() for ts in group if ts.info.histogram]
    default = max(set(units), key=units.count) if units else None
    rows = []
    for group in groups.values():
        try:
            rows.append(_row(group, default, escape))
        except SetRemoved:
            continue  # retention removed a set while the overview was being read
    return [r for row in rows for r in _split_idle(row, groups.get((KERNEL,), []))]


def _split_idle(row: Row, kernel_sets: list[StoredSet]) -> list[Row]:
    """A -k run's kernel row, split into the idle task's part and the rest."""
    if row.command != KERNEL or not kernel_sets:
        return [row]
    parts = [idle_weight(ts) for ts in kernel_sets]
    if any(p is None for p in parts):
        return [row]
    idle = sum(p for p in parts if p is not None)
    return [dataclasses.replace(row, amount=row.amount - idle),
            dataclasses.replace(row, command=IDLE, pid="0", amount=idle)]


def _row(group: list[StoredSet], default_unit: str | None = None,
         escape: Callable[[str], str] = printable) -> Row:
    latest = max(group, key=lambda t: t.info.task.end_time or 0.0)
    cpus = sorted({t.cpu for t in group if t.cpu is not None})
    cpu = ",".join(map(str, cpus)) if len(cpus) <= MAX_CPUS_LISTED else f"{len(cpus)} cpus"
    by_set: dict[object, list[StoredSet]] = {}
    for t in group:
        by_set.setdefault(t.set_name or t.name, []).append(t)
    files = sorted(by_set, key=str)
    more = len(files) - 1
    file = escape(latest.name) + (f" (+{more} set{'s' if more > 1 else ''})" if more else "")
    run_ids = [escape(r) if r else None
               for r in dict.fromkeys(runs.run_of(t).id for t in group)]
    slices = max(len(v) for v in by_set.values())
    amount = sum(t.total() for t in group)
    unit = next((t.unit for t in group if t.info.histogram), default_unit or latest.unit)
    if latest.is_kernel:
        return label_kernel(Row(KERNEL, "-", cpu if cpus else "-", amount, unit, file,
                                slices, {}, run_ids), group)
    pids = {p for t in group for p in (t.info.task.pids or [])}
    pid = str(latest.pid) if latest.pid is not None else (f"{len(pids)} pids" if pids else "-")
    return Row(escape(latest.comm or latest.name), pid, cpu if cpus else "-", amount,
               unit, file, slices, process_stats(list(by_set.values())), run_ids)


def label_kernel(row: Row, group: list[StoredSet]) -> Row:
    """A kernel set's row is the idle task's, unless the run took every
    pid's kernel samples there (-k)."""
    if not group[-1].is_kernel or any(kernel_only_run(t) for t in group):
        return row
    return dataclasses.replace(row, command=IDLE, pid="0")


def process_stats(per_set: list[list[StoredSet]]) -> dict[str, float]:
    """The counters of one process (or of one program's aggregates) once.

    ``per_set``: the slices of each of its sets (one set per CPU)."""
    sums = [_summed(slices) for slices in per_set]
    if len(sums) == 1:
        return sums[0]
    pid_sets = [{p for t in slices for p in (t.info.task.pids or [])} for slices in per_set]
    disjoint = all(pid_sets) and sum(map(len, pid_sets)) == len(set().union(*pid_sets))
    out: dict[str, float] = {}
    for stats in sums:
        for key, value in stats.items():
            # aggregates of different processes add up; a process's own sets
            # repeat the same counters, so the widest span counts
            out[key] = out.get(key, 0) + value if disjoint else max(out.get(key, 0), value)
    return out


def _summed(slices: list[StoredSet]) -> dict[str, float]:
    stats: dict[str, float] = {}
    for t in slices:
        for key, value in (t.info.task.task_stats or {}).items():
            if isinstance(value, (int, float)):
                name = key.removeprefix("q:")
                stats[name] = stats.get(name, 0) + value
    return stats


def idle_seconds(found: Iterable[StoredSet]) -> dict[int, float]:
    """Idle time sampled on each CPU, where the kernel sets tell it."""
    out: dict[int, float] = {}
    for ts in found:
        idle = idle_weight(ts) if ts.cpu is not None else None
        if idle is not None and ts.cpu is not None:
            out[ts.cpu] = out.get(ts.cpu, 0.0) + idle
    return out
