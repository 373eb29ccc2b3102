"""Writing task sets into `.q` through qformat.

Order matters for readers: data files first, then the `.info` that names
them, so no `.info` is ever visible before its data. A new set claims its
version with its `.hist` (linked under a version no other writer holds);
no `.info` without samples is ever written, except a kernel-cpuN set that
carries only the CPU's statistics, which says so (q:purpose "cpu-stats").
"""

from __future__ import annotations

import os
from collections import abc
from functools import partial
from types import MappingProxyType
from typing import Callable, NamedTuple

from qtools.qformat import (CallCounts, CallStacks, Form, Histogram, Info, MapRange, ObjectRef,
                            QDir, Stored, TaskInfo, dump_info, edge_lines, hist_lines,
                            stack_lines, thread_lines)
from qtools.qformat.info import Threads
from qtools.qformat.cgroup import name_cgroup
from qtools.qformat.info import JitdumpRef

from ..clock import SYSTEM, Clock
from ..machine import procfs
from ..machine.tasks import Mapping
from ..stopping import uninterrupted
from .aggregate import CollectedSet
from .tally import NO_KERNEL, SampleTally
from .objects import ObjectCopier


class RunInfo(NamedTuple):
    """What every `.info` of one run says alike."""

    syscollect_cmdline: list[str]
    event_name: str
    unit_label: str  # "seconds", "cycles" or "events"
    conversion_factor: float
    unwinder: str | None  # "fp", "dwarf", or None when no stacks are kept
    machine: abc.Mapping[str, str] = MappingProxyType({})  # hostname, kernel_release, arch
    kallsyms: str | None = None
    vdso: str | None = None
    compress: bool = False
    run_id: str | None = None  # one per q-syscollect invocation, kept across collector restarts
    run_start: float | None = None  # Unix seconds
    off_cpu: bool = False  # --off-cpu: the .threads files have S/D/W lines
    off_cpu_min_ns: int = 0
    # the idle task is sampled: system-wide, kernel mode, a clock or cycles;
    # a kernel set then says its idle weight even when it is 0
    idle_sampled: bool = True


def _objects(ts: CollectedSet, run: RunInfo, copier: ObjectCopier) -> list[ObjectRef]:
    by_obj: dict[object, list[Mapping]] = {}
    for m in sorted(ts.data.tally.mappings, key=lambda m: m.start):
        by_obj.setdefault(m.obj, []).append(m)
    refs = []
    for obj, maps in by_obj.items():
        ranges = [MapRange(*r) for r in sorted({(m.start, m.end - m.start, m.pgoff)
                                                for m in maps})]
        if obj.path == "[vdso]":  # type: ignore[attr-defined]
            refs.append(ObjectRef("[vdso]", file=run.vdso, maps=ranges))
            continue
        if obj.special:  # type: ignore[attr-defined]
            continue
        copy = copier.known(obj)  # type: ignore[arg-type]
        if copy is None and ts.data.process is not None:
            copy = copier.copy(ts.data.process, maps[0])
        refs.append(ObjectRef(os.path.basename(obj.path), path=obj.path,  # type: ignore
                              file=copy.name if copy else None,
                              build_id=copy.build_id if copy else None, maps=ranges))
    return refs


PURPOSE_CPU_STATS = "cpu-stats"
"""q:purpose of a set written for its q:cpu-stats alone (no samples)."""


def build_info(ts: CollectedSet, run: RunInfo, copier: ObjectCopier, version: int,
               cpu_lost: int, perf_map: Stored | None = None,
               jitdumps: list[JitdumpRef] | None = None, clock: Clock = SYSTEM) -> Info:
    data, stats = ts.data, ts.stats
    proc, prof, name = data.process, data.tally, data.name
    lost_end = stats.lost_at_end if stats.lost_at_end is not None else cpu_lost
    ended = stats.end_time is not None
    cpu_stats = _prefixed(procfs.cpu_summary(stats.counters_start, stats.counters_last)) \
        if name.is_kernel and stats.counters_start and stats.counters_last else None
    task = TaskInfo(
        syscollect_cmdline=run.syscollect_cmdline,
        cmdline=proc.cmdline if proc and proc.cmdline else None,
        comm=proc.comm if proc else name.prog,
        exe=proc.exe if proc else None,
        pid=proc.pid if proc else None,
        pids=list(data.pids) if name.is_aggregate else None,
        cpu=name.cpu,
        hostname=run.machine.get("hostname"),
        kernel_release=run.machine.get("kernel_release"),
        arch=run.machine.get("arch"),
        run_id=run.run_id,
        run_start=run.run_start,
        start_time=stats.start.wall,
        end_time=stats.end_time if ended else clock.wall_after(stats.start),
        samples=prof.samples,
        lost_samples=max(0, lost_end - stats.lost_at_start),
        task_stats=_prefixed(stats.task_stats()) if proc or name.is_aggregate else None,
        cpu_stats=cpu_stats,
        state="closed" if ts.writer.finished else "open",
    )
    if task.lost_samples:  # which of its CPU's losses in the slice (docs/q-format.md 4.1)
        task.lost_from = max(0, stats.lost_at_start - stats.slice.lost)
        task.slice_start = stats.slice.start
    if stats.cgroup is not None:  # docs/q-format.md 4.1
        named = name_cgroup(stats.cgroup)
        task.cgroup, task.unit, task.container = named.path, named.unit, named.container
    if data.pids_dropped:
        task.extra["q:pids-not-listed"] = data.pids_dropped
    if prof.kernel_from != NO_KERNEL:
        task.kernel_from = prof.kernel_from  # docs/q-format.md 4.1
    if name.is_kernel and (prof.samples or run.idle_sampled):
        task.extra["q:idle-weight"] = stats.idle_weight  # docs/q-format.md 4.1
    task.clock_step = stats.clock_step if ended else clock.step(stats.start)
    if prof.folded_samples:
        task.samples_folded = prof.folded_samples
        task.stacks_folded = prof.folded_stacks.estimate() if prof.folded_stacks else 0
    if prof.min_share:  # rare stacks were folded into the remainder as they aged (5.3)
        task.extra["q:min-stack-share"] = prof.min_share
        if prof.moved_weight:  # ... and rare addresses' weight went to their function's start
            task.extra["q:hist-moved"] = prof.moved_weight
        if prof.object_lines:  # ... or, kept by function, to their object's line (5.2)
            task.extra["q:other-functions"] = sorted(prof.object_lines)
    if not prof.samples and cpu_stats:
        task.purpose = PURPOSE_CPU_STATS
    total = prof.total
    granularity = (total / prof.samples * run.conversion_factor) if prof.samples else 0.0
    info = Info(task=task)
    info.histogram = Histogram(name.file("hist", version), event_name=run.event_name,
                               x_unit_label="address", y_unit_label=run.unit_label,
                               y_unit_conversion_factor=run.conversion_factor,
                               y_granularity=granularity)
    if run.unwinder and (prof.stacks or prof.folded_weight):
        info.call_stacks = CallStacks(name.file("stack", version), unwinder=run.unwinder)
    if prof.has_thread_lines:  # docs/q-format.md 4.9
        info.threads = Threads(name.file("threads", version), off_cpu=1 if run.off_cpu else None,
                               time_unit_label="seconds" if run.off_cpu else None,
                               time_conversion_factor=1e-09 if run.off_cpu else None,
                               min_stack_ns=run.off_cpu_min_ns if run.off_cpu else None,
                               switches=prof.switches if run.off_cpu else None,
                               switch_records_lost=prof.switch_lost or None,
                               off_cpu_seconds=_wait_seconds(prof, ("S", "D"))
                               if run.off_cpu else None,
                               cpu_wait_seconds=_wait_seconds(prof, ("W",))
                               if run.off_cpu else None)
        if info.call_stacks is not None:  # one thread's cpu lines: the .stack less the others'
            info.threads.cpu_rest = prof.cpu_rest()
    if prof.arcs:
        info.call_counts = CallCounts(name.file("edge", version), conversion_factor=1.0)
    info.kallsyms = run.kallsyms
    info.vdso = run.vdso
    if perf_map:
        info.perf_maps.append(perf_map.name)
        if perf_map.truncated:  # its first --max-map-size bytes only
            info.extra_forms.append(Form("q:perf-map-truncated", [perf_map.name]))
    info.jitdumps = list(jitdumps or [])
    info.objects = _objects(ts, run, copier)
    return info


def _wait_seconds(prof: SampleTally, kinds: tuple[str, ...]) -> float:
    return round(prof.wait_ns(kinds) * 1e-9, 6)


def _prefixed(stats: dict[str, float] | None) -> dict[str, float] | None:
    return {f"q:{k}": v for k, v in stats.items()} if stats else None


def worth_writing(info: Info) -> bool:
    """A set with samples, or one that carries only its CPU's statistics."""
    return bool(info.task.samples) or info.task.purpose == PURPOSE_CPU_STATS or \
        info.threads is not None


def perf_map_copy(ts: CollectedSet, copier: ObjectCopier) -> Stored | None:
    """The copy of the task's JIT symbol map (/tmp/perf-PID.map), if it has
    one its own user wrote (``ObjectCopier.perf_map``; a set written for
    the last time takes what the map grew by since its last copy)."""
    proc = ts.data.process
    return copier.perf_map(proc, closing=ts.writer.finished) if proc is not None else None


def write_sets(qdir: QDir, sets: list[CollectedSet], run: RunInfo, copier: ObjectCopier,
               cpu_lost: int,
               jitdumps: Callable[[CollectedSet], list[JitdumpRef]] | None = None,
               clock: Clock = SYSTEM) -> tuple[list[CollectedSet], list[OSError]]:
    """Write ``sets``; return those that reached the disk and the errors met.

    A set whose write fails keeps its data in memory and stays dirty, so the
    next checkpoint tries again.
    """
    staged: list[tuple[CollectedSet, Info]] = []
    skipped: list[CollectedSet] = []
    errors: list[OSError] = []
    for ts in sets:
        name, w = ts.data.name, ts.writer
        try:
            if not ts.data.tally.samples and not ts.data.tally.waits and not name.is_kernel:
                skipped.append(ts)  # nothing to show: no need to copy its perf map either
                continue
            perf_map = perf_map_copy(ts, copier)
            jit = jitdumps(ts) if jitdumps else None
            info = build_info(ts, run, copier, w.version or 0, cpu_lost, perf_map, jit, clock)
            if not worth_writing(info):
                skipped.append(ts)
                continue
            prof = ts.data.tally
            hist = hist_lines(prof.hist)
            with uninterrupted():  # a stop waits: the files of one set must agree
                if w.version is None:
                    data = b"".join(hist)  # the claim: a set's files appear under a free version
                    if run.compress:
                        from zlib_ng import gzip_ng  # only when compressing: not at start
                        data = gzip_ng.compress(data, mtime=0)
                    w.version = qdir.claim_version(name, partial(_same, data), type_="hist")
                    info = build_info(ts, run, copier, w.version, cpu_lost, perf_map, jit,
                                      clock)
                else:
                    qdir.atomic_write(info.histogram.file, hist,  # type: ignore[union-attr]
                                      compress=run.compress, sync=False)
                if info.call_stacks:
                    qdir.atomic_write(info.call_stacks.file,
                                      stack_lines(prof.stacks, prof.folded_weight),
                                      compress=run.compress, sync=False)
                if info.call_counts:
                    qdir.atomic_write(info.call_counts.file, edge_lines(prof.arcs),
                                      compress=run.compress, sync=False)
                if info.threads:
                    qdir.atomic_write(info.threads.file,
                                      thread_lines(prof.thread_names,
                                                   prof.written_thread_lines(
                                                       info.threads.cpu_rest),
                                                   info.threads.cpu_rest),
                                      compress=run.compress, sync=False)
            staged.append((ts, info))
        except OSError as e:
            errors.append(e)
    if not staged:
        return skipped, errors
    written = list(skipped)
    try:
        qdir.sync()
        for ts, info in staged:
            qdir.atomic_write(ts.data.name.file("info", ts.writer.version),
                              dump_info(info).encode(), sync=False)
            written.append(ts)
        qdir.sync()
    except OSError as e:
        errors.append(e)
    return written, errors


def _same(data: bytes, _version: int) -> bytes:
    """The same bytes whatever version they are claimed under."""
    return data
