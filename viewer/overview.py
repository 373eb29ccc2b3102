"""``q-view DIR``: the overview of a directory's task sets, then its CPUs.

Rows come from ``overview_rows`` (one per process, or with ``--per-cpu``
one per set, made here), the CPU table from the kernel sets' CPU
counters; ``render.overview`` lays them out, or they go out as JSON.
"""

from __future__ import annotations

import json
from typing import Callable, TextIO

from qtools.qformat import Limits

from . import hints, overview_rows, runs
from .load import Selection, SetRemoved, StoredSet, pick_run, sets_in
from .model import printable
from .render import overview

#: says a selection spans several runs, where it does; True if it did
NoteRuns = Callable[[list[StoredSet], bool], bool]


def show(directory: str, selection: Selection, run: str | None, limits: Limits,
         per_cpu: bool, as_json: bool, out: TextIO, note_runs: NoteRuns,
         height: int | None = None) -> None:
    """The overview of ``directory``; with ``height``, what fits that many lines."""
    found = sets_in(directory, all_versions=selection.windowed,
                    written_since=selection.written_since, objects=False, limits=limits)
    if selection.windowed:
        found = [ts for ts in found if selection.in_window(ts)]
    if run is not None and found:
        found = pick_run(found, run, [directory], selection, selection.windowed, objects=False,
                         limits=limits)
    elif note_runs(found, True) and height is not None:
        height -= 1  # in --watch the note is on the screen
    groups: dict[object, list[StoredSet]] = {}
    for ts in found:  # a set's slices in the window make one row
        groups.setdefault(ts.set_name or ts.name, []).append(ts)
    escape = _same if as_json else printable
    if per_cpu:
        rows = []
        for group in groups.values():
            try:
                rows.append(overview_rows.label_kernel(set_row(group, escape), group))
            except SetRemoved:
                continue  # retention removed it while the overview was being read
    else:
        rows = overview_rows.process_rows(found, escape)
    idle = overview_rows.idle_seconds(found)
    cpus = [c for group in groups.values() if group[-1].is_kernel
            if (c := cpu_row(group, idle)) is not None]
    if as_json:
        json.dump({"directory": directory, "sets": [r.__dict__ for r in rows],
                   "cpus": [c.__dict__ for c in cpus]}, out, indent=1)
        out.write("\n")
        return
    if not rows:
        if not selection.windowed and hints.sets_below(directory):
            raise hints.no_sets(directory)  # the user meant the directory below
        what = f" in {selection.describe()}" if selection.windowed else ""
        out.write(f"No task sets (*.info#N) in {directory}{what}.\n")
        return
    window = selection.describe() if selection.windowed else None
    overview.render(rows, directory, out, cpus, window, height)


def _same(text: str) -> str:
    return text


def set_row(group: list[StoredSet], escape: Callable[[str], str]) -> overview.Row:
    """The ``--per-cpu`` row of one set: its slices in the window."""
    ts = group[-1]  # the latest slice names the row
    pids = {p for t in group for p in (t.info.task.pids or [])}
    pid = str(ts.pid) if ts.pid is not None else (f"{len(pids)} pids" if pids else "-")
    cpu = str(ts.cpu) if ts.cpu is not None else "-"
    stats: dict[str, float] = {}
    for t in group:
        for key, value in (t.info.task.task_stats or {}).items():
            if isinstance(value, (int, float)):
                name = key.removeprefix("q:")
                stats[name] = stats.get(name, 0) + value
    run_ids = list(dict.fromkeys(runs.run_of(t).id for t in group))
    return overview.Row(escape(ts.comm or ts.name), pid, cpu, sum(t.total() for t in group),
                        ts.unit, escape(ts.name), len(group), stats,
                        [escape(r) if r else None for r in run_ids])


def cpu_row(group: list[StoredSet], idle: dict[int, float]) -> overview.CpuRow | None:
    """Busy share (weighted by each slice's length), sampled idle share and
    latest clock of a CPU."""
    seconds = busy = 0.0
    mhz = None
    for ts in group:
        cs = ts.info.task.cpu_stats or {}
        if isinstance(cs.get("q:busy"), (int, float)) and isinstance(cs.get("q:seconds"), (int, float)):
            seconds += cs["q:seconds"]
            busy += cs["q:busy"] * cs["q:seconds"]
        if isinstance(cs.get("q:frequency-mhz"), (int, float)):
            mhz = float(cs["q:frequency-mhz"])
    if not seconds and mhz is None or group[-1].cpu is None:
        return None
    cpu = group[-1].cpu
    idle_share = idle[cpu] / seconds if seconds and cpu in idle else None
    return overview.CpuRow(cpu, busy / seconds if seconds else None, mhz, idle_share)
