"""``q-view DIR``: the overview of a directory's task sets, then its CPUs.

Several directories or archives of one machine make a table each; of
several machines (q:hostname), one table with a host column.

One row per process, CPUs merged, idle apart (or with ``--per-cpu`` one
row per set); the CPU table from the kernel sets' CPU counters.
``render.overview`` lays them out, or they go out as JSON.

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

from typing import Callable, Iterable, TextIO

from qtools.qformat import Limits

from ..model.viewerrors import ViewError
from ..inputs import hints, runs
from ..inputs.load import (IDLE, KERNEL, SetRemoved, Source, StoredSet, collector_flags,
                           kernel_only_run, label, sets_in)
from ..inputs.select import Selection, pick_run
from ..model.escape import printable, write_json
from ..model.lost import claim, lost_once
from ..render import overviewtable as table
from ..render.overviewtable import CpuRow, Row

MAX_CPUS_LISTED = 4


def process_key(ts: StoredSet) -> tuple[object, ...]:
    """Sets with the same key make one row (of one machine)."""
    if ts.is_kernel:
        return (ts.host, KERNEL)
    prog = ts.set_name.prog if ts.set_name else ts.name
    return (ts.host, prog, ts.pid)  # pid None: the program's aggregates, all CPUs


def idle_weight(ts: StoredSet) -> float | None:
    """The idle task's part of a kernel set, in output units; None where the
    set does not say (written before q:idle-weight existed, or the idle task
    was not sampled)."""
    if not ts.is_kernel:
        return None
    value = ts.info.task.extra.get("q:idle-weight")
    if ts.info.task.samples == 0:
        # a CPU with no kernel sample (q:purpose cpu-stats): none of the idle
        # task's where it was sampled, unknown where it was not
        return 0.0 if value == 0 or value is None and idle_sampled(ts) else None
    if not kernel_only_run(ts):
        return ts.total()  # only pid 0's samples go there
    return value * ts.factor if isinstance(value, int) and value >= 0 else None


def idle_sampled(ts: StoredSet) -> bool:
    """Whether a kernel set's run could sample the idle task, for sets that
    do not say (q:idle-weight): not with -u (user mode only) nor another
    event (-e: a tracepoint's or a counted event's samples need not come
    while the idle task runs)."""
    return not {"u", "e"} & collector_flags(ts)


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
            rows.append(_process_row(group, default, escape))
        except SetRemoved:
            continue  # retention removed a set while the overview was being read
    return [r for row in rows for r in _split_idle(row, groups.get((row.host, KERNEL), []))]


def _split_idle(row: Row, kernel_sets: list[StoredSet]) -> list[Row]:
    """A -k run's kernel row, split into the idle task's part and the rest;
    no idle row where the idle task was not sampled (unknown, not 0)."""
    if row.command not in (KERNEL, IDLE) or not kernel_sets:
        return [row]
    parts = [idle_weight(ts) for ts in kernel_sets]
    if row.command == IDLE:
        return [] if not row.amount and all(p is None for p in parts) else [row]
    if any(p is None for p in parts):
        return [row]
    idle = sum(p for p in parts if p is not None)
    return [row._replace(amount=row.amount - idle),
            row._replace(command=IDLE, pid="0", amount=idle)]


def _process_row(group: list[StoredSet], default_unit: str | None = None,
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
    host = latest.host and escape(latest.host)
    if latest.is_kernel:
        return label_kernel(Row(KERNEL, "-", cpu if cpus else "-", amount, unit, file,
                                slices, {}, run_ids, host), group)
    pid = str(latest.pid) if latest.pid is not None else _pids(group)
    stats = process_stats(list(by_set.values()))
    stats.update(wait_stats(group))
    return Row(escape(latest.comm or latest.name), pid, cpu if cpus else "-", amount,
               unit, file, slices, stats, run_ids, host)


def wait_stats(group: list[StoredSet]) -> dict[str, float]:
    """Off-CPU and wait-for-CPU seconds (q:threads, --off-cpu): each wait is
    in the set of the CPU it began on, so the sets of every CPU and slice add up."""
    out: dict[str, float] = {}
    for t in group:
        th = t.info.threads
        if th is None or not th.off_cpu:
            continue
        for key, value in (("off-cpu-seconds", th.off_cpu_seconds),
                           ("cpu-wait-seconds", th.cpu_wait_seconds)):
            if value is not None:
                out[key] = out.get(key, 0.0) + value
    return out


def label_kernel(row: Row, group: list[StoredSet]) -> Row:
    """A kernel set's row is the idle task's, unless the run took every
    pid's kernel samples there (-k)."""
    if not group[-1].is_kernel or any(kernel_only_run(t) for t in group):
        return row
    return row._replace(command=IDLE, pid="0")


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


#: says a selection spans several runs, where it does; True if it did
NoteRuns = Callable[[list[StoredSet], bool], bool]


def show(sources: list[Source], selection: Selection, run: str | None, limits: Limits,
         per_cpu: bool, as_json: bool, out: TextIO, note_runs: NoteRuns,
         height: int | None = None, group: str = "process") -> None:
    """The overview of ``sources``: a table each, or one table with a host
    column where they hold sets of several machines; with ``height``, what
    fits that many lines."""
    gathered = []
    seen: set[str | None] = set()
    for source in sources:
        found, height = _gather(source, selection, run, limits, note_runs, height, seen)
        gathered.append((source, found))
    if selection.host is not None:  # only the inputs that hold the machine's sets
        if selection.host not in seen:
            known = ", ".join(sorted(h for h in seen if h)) or "none recorded"
            raise ViewError(f"no task sets of host {selection.host}; hosts there: {known}",
                            label(sources[0]) if len(sources) == 1 else None)
        gathered = [(source, found) for source, found in gathered if found] or gathered
    hosts = {ts.host for _source, found in gathered for ts in found}
    if len(hosts) <= 1:
        for source, found in gathered:
            _show(label(source), found, source, selection, per_cpu, as_json, out, height, group)
        return
    every = [ts for _source, found in gathered for ts in found]
    _show(", ".join(label(s) for s, _found in gathered), every, None, selection, per_cpu,
          as_json, out, height, group)


def _gather(source: Source, selection: Selection, run: str | None, limits: Limits,
            note_runs: NoteRuns, height: int | None,
            hosts: set[str | None]) -> tuple[list[StoredSet], int | None]:
    """The sets of ``source`` the overview shows, and the lines left; adds
    the machines ``source`` holds sets of to ``hosts``."""
    found = sets_in(source, all_versions=selection.windowed,
                    written_since=selection.written_since, objects=False, limits=limits)
    hosts.update(ts.host for ts in found)
    found = [ts for ts in found if selection.on_host(ts) and selection.in_unit(ts)]
    if selection.windowed:
        found = [ts for ts in found if selection.in_window(ts)]
    if run is not None and found:
        found = pick_run(found, run, [source], selection, selection.windowed, objects=False,
                         limits=limits)
    elif note_runs(found, True) and height is not None:
        height -= 1  # in --watch the note is on the screen
    return found, height


def _show(directory: str, found: list[StoredSet], source: Source | None, selection: Selection,
          per_cpu: bool, as_json: bool, out: TextIO, height: int | None,
          grouping: str = "process") -> None:
    """One overview table of ``found``, named ``directory``; ``source``: the
    one directory it came from (for the hint when it holds no sets)."""
    groups: dict[tuple[str | None, object], list[StoredSet]] = {}
    for ts in found:  # a set's slices in the window make one row (of one machine)
        groups.setdefault((ts.host, ts.set_name or ts.name), []).append(ts)
    escape = _same if as_json else printable
    if grouping == "unit":
        rows = unit_rows(found, escape)
    elif per_cpu:
        rows = []
        for group in groups.values():
            try:
                rows.append(label_kernel(set_row(group, escape), group))
            except SetRemoved:
                continue  # retention removed it while the overview was being read
    else:
        rows = process_rows(found, escape)
    cpus = []
    for host in dict.fromkeys(ts.host for ts in found):
        idle = idle_seconds(ts for ts in found if ts.host == host)
        cpus += [c for key, group in groups.items() if key[0] == host and group[-1].is_kernel
                 if (c := cpu_row(group, idle, lost_on(found, host, group[-1].cpu)))
                 is not None]
    lost = lost_once(claim(ts.info.task) for ts in found)
    if as_json:
        write_json({"directory": directory, "sets": [r._asdict() for r in rows],
                    "cpus": [c._asdict() for c in cpus], "lost_samples": lost.records,
                    "lost_share": lost.share}, out)
        return
    if not rows:
        if isinstance(source, str) and not selection.windowed and hints.sets_below(source):
            raise hints.no_sets(source)  # the user meant the directory below
        what = f" in {selection.describe()}" if selection.windowed else ""
        out.write(f"No task sets (*.info#N) in {directory}{what}.\n")
        return
    window = selection.describe() if selection.windowed else None
    table.render(rows, directory, out, cpus, window, height, group_heading(grouping),
                 lost.text() if lost.records else None)


def lost_on(found: list[StoredSet], host: str | None, cpu: int | None) -> int:
    """The records lost on one CPU of one machine, each once."""
    return lost_once(claim(ts.info.task) for ts in found
                     if ts.host == host and ts.cpu == cpu).records


def _same(text: str) -> str:
    return text


def _pids(group: list[StoredSet]) -> str:
    """An aggregate's pid column: how many pids its sets list, with a "+"
    where they folded more than they list (q:pids-not-listed)."""
    pids = {p for t in group for p in (t.info.task.pids or [])}
    more = any(t.info.task.extra.get("q:pids-not-listed") for t in group)
    return f"{len(pids)}{'+' if more else ''} pids" if pids else "-"


def set_row(group: list[StoredSet], escape: Callable[[str], str]) -> Row:
    """The ``--per-cpu`` row of one set: its slices in the window."""
    ts = group[-1]  # the latest slice names the row
    pid = str(ts.pid) if ts.pid is not None else _pids(group)
    cpu = str(ts.cpu) if ts.cpu is not None else "-"
    stats: dict[str, float] = {}
    for t in group:
        for key, value in (t.info.task.task_stats or {}).items():
            if isinstance(value, (int, float)):
                name = key.removeprefix("q:")
                stats[name] = stats.get(name, 0) + value
    stats.update(wait_stats(group))
    run_ids = list(dict.fromkeys(runs.run_of(t).id for t in group))
    return Row(escape(ts.comm or ts.name), pid, cpu, sum(t.total() for t in group),
               ts.unit, escape(ts.name), len(group), stats,
               [escape(r) if r else None for r in run_ids], ts.host and escape(ts.host))


def cpu_row(group: list[StoredSet], idle: dict[int, float], lost: int = 0) -> CpuRow | None:
    """How a CPU spent its time over its kernel sets' spans, from the
    kernel's counters (q:cpu-stats, each slice weighted by its length):
    busy (less steal), steal, iowait and the idle rest add up to 1; where a
    slice does not say steal or iowait (older releases), busy holds steal
    and idle iowait. Besides: the share of that time sampled in the idle
    task, its records lost (each once), and its latest clock."""
    seconds = busy = 0.0
    parts: dict[str, float | None] = {"q:steal": 0.0, "q:iowait": 0.0}
    mhz = None
    for ts in group:
        cs = ts.info.task.cpu_stats or {}
        if _share(cs.get("q:busy")) and isinstance(cs.get("q:seconds"), (int, float)) \
                and cs["q:seconds"] > 0:
            weight = cs["q:seconds"]
            seconds += weight
            busy += cs["q:busy"] * weight
            for key, sum_ in parts.items():
                value = cs.get(key)
                parts[key] = sum_ + value * weight if sum_ is not None and _share(value) \
                    else None  # unknown in one slice: unknown
        if isinstance(cs.get("q:frequency-mhz"), (int, float)):
            mhz = float(cs["q:frequency-mhz"])
    if not seconds and mhz is None or group[-1].cpu is None:
        return None
    cpu = group[-1].cpu
    if not seconds:
        return CpuRow(cpu, None, mhz, None, group[-1].host, lost=lost)
    sampled_idle = _round(idle[cpu] / seconds) if cpu in idle else None
    steal, iowait = (None if (part := parts[k]) is None else part / seconds
                     for k in ("q:steal", "q:iowait"))
    busy /= seconds
    return CpuRow(cpu, _round(busy - (steal or 0.0)), mhz,
                  _round(max(0.0, 1.0 - busy - (iowait or 0.0))), group[-1].host,
                  _round(steal), _round(iowait), sampled_idle, lost)


def _round(share: float | None) -> float | None:
    """A share as the JSON gives it: to a millionth (the counters' shares
    are written to four decimals)."""
    return None if share is None else round(share, 6)


def _share(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1


GROUPS = ("process", "unit")
"""What a row of the overview is (``--group``): a process, or a service or
container (the unit its samples ran in, q:unit)."""
NO_UNIT = "-"  # sets that record no cgroup (older collections, or a kernel without it)


def group_heading(group: str) -> str:
    return "unit" if group == "unit" else "command"


def unit_label(ts: StoredSet) -> str:
    """The row of a set in ``--group unit``: its unit; a container that no
    unit names (the cgroupfs driver's) by its id's first 12 digits, as
    ``docker ps`` shows it; else its cgroup path."""
    if ts.service:
        return ts.service
    if ts.container:
        return f"container {ts.container[:12]}"
    return ts.cgroup or NO_UNIT


def unit_rows(found: Iterable[StoredSet], escape: Callable[[str], str] = printable) -> list[Row]:
    """One row per unit (of one machine): the process rows of its sets,
    added up; the kernel and idle rows as ``process_rows`` makes them."""
    by_unit: dict[tuple[str | None, str], list[StoredSet]] = {}
    kernel = []
    for ts in found:
        if ts.is_kernel:
            kernel.append(ts)
        else:
            by_unit.setdefault((ts.host, unit_label(ts)), []).append(ts)
    rows = process_rows(kernel, escape)
    for (host, name), sets in by_unit.items():
        parts = process_rows(sets, escape)
        if not parts:
            continue
        stats: dict[str, float] = {}
        for part in parts:
            for key, value in part.stats.items():
                stats[key] = stats.get(key, 0) + value
        cpus = sorted({c for t in sets if t.cpu is not None for c in [t.cpu]})
        cpu = ",".join(map(str, cpus)) if len(cpus) <= MAX_CPUS_LISTED else f"{len(cpus)} cpus"
        comms = sorted({p.command for p in parts})
        shown = ", ".join(comms[:3]) + (f" (+{len(comms) - 3})" if len(comms) > 3 else "")
        runs_ = list(dict.fromkeys(r for p in parts for r in p.runs))
        rows.append(Row(escape(name), f"{len(parts)} proc" + ("s" if len(parts) > 1 else ""),
                        cpu or "-", sum(p.amount for p in parts), parts[0].unit, shown,
                        max(p.slices for p in parts), stats, runs_, host and escape(host)))
    return rows
