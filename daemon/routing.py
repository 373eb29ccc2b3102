"""One drain of a collector's rings: records read, decoded, sorted by
time and handed to their handlers (``routes.Handlers``, named here), with
the samples whose stack the unwinder recalls counted in the drain."""

from __future__ import annotations

import operator
import time

from .config import Options
from .decode.drain import decode_drain, dispatch
from .decode.records import Lost, Sample
from .decode.routes import Handlers
from .drainloop import QUIET_RECORDS_PER_SECOND
from .frames import UserFrames
from .kernel import abi
from .kernel.source import EventSource
from .machine.cgroups import CgroupTable
from .machine.tasks import TaskTable
from .samplepath import KERNEL_MODES, Recalled, SamplePath
from .sets.aggregate import SetBook
from .waits import Waits

_ORDER = operator.attrgetter("order")


class Router:
    """Drains ``source`` (``step``) into the collector's parts: samples to
    ``samples``, the task side-band to ``table``, cgroups to ``cgroups``,
    the scheduler's records to ``waits``; counts what was lost or damaged."""

    def __init__(self, opts: Options, source: EventSource, book: SetBook, table: TaskTable,
                 cgroups: CgroupTable, samples: SamplePath, user_frames: UserFrames,
                 waits: Waits) -> None:
        self.source = source
        self.layout = source.layout
        self.book = book
        self.table = table
        self.samples = samples
        self.user_frames = user_frames
        self.waits = waits
        self.off_cpu = opts.off_cpu
        self.quick = opts.stacks and not opts.kernel_only  # samples may be recalled
        self.handlers = Handlers(
            sample=samples.sample, mmap=table.on_mmap, comm=table.on_comm, task=table.on_task,
            lost=self.on_lost, switch=waits.on_switch, cgroup=cgroups.on_cgroup,
            sched_switch=waits.on_sched_switch, sched_waking=waits.on_sched_waking)
        self._routes = dispatch(self.handlers)  # record class -> handler
        self.read_until = 0  # ns (CLOCK_MONOTONIC, as the records' times): see step
        self.lost = 0
        self.tick_lost = 0  # since the last take_tick
        self.damaged = 0  # records that could not be decoded
        self.busy_records = 0  # records of the last drain other than the idle task's samples
        self.sideband_seen = False  # ... and whether a few of them were not samples

    def take_tick(self) -> int:
        """Records lost since the last call (-v says them each second)."""
        n, self.tick_lost = self.tick_lost, 0
        return n

    def step(self) -> int:
        """Drain what the source holds; returns the number of records.

        Each record goes to its kind's handler, in time order; the idle
        task's samples, told apart undecoded, go to ``SamplePath.idle``
        first."""
        # Every record of an event before this moment is in a ring now: the
        # horizon up to which a checkpoint may count waits still going
        # (counting to the checkpoint's own time would count a wait whose
        # end is still unread past that end).
        self.read_until = time.monotonic_ns()
        raw = self.source.read()
        # most of an idle machine's samples, taken apart undecoded (SamplePath.idle)
        decoded, idle_seen, damaged = decode_drain(raw, self.layout)
        self.damaged += damaged
        samples = self.samples
        if idle_seen:
            samples.idle(idle_seen)
        decoded.sort(key=_ORDER)  # by the time each was taken
        self.busy_records = len(decoded)
        self.sideband_seen = len(decoded) <= QUIET_RECORDS_PER_SECOND * 8 and \
            any(type(rec) is not Sample for rec in decoded)  # asked only of a quiet drain
        route = self._routes.get
        sample, recalled = samples.sample, samples.recalled
        # A sample whose walk the unwinder remembers, of a set that has
        # described its process and noted that stack's mappings, is counted
        # by what the set keeps of it (``SamplePath.recalled``); such samples
        # are handed over before the next record of any other kind, so each
        # set sees its samples in the order they came, alike ones at once.
        recall = self.user_frames.recall
        procs, by_process = self.table.procs, self.book.by_process
        quick = self.quick
        pending: dict[Recalled, list[int]] = {}
        for rec in decoded:
            if rec.__class__ is Sample:
                s: Sample = rec  # type: ignore[assignment]
                if quick and not s.callchain and not s.branches and s.pid \
                        and s.misc & abi.MISC_CPUMODE_MASK not in KERNEL_MODES:
                    proc = procs.get(s.pid)
                    ts = by_process.get(proc) if proc is not None else None
                    if proc is not None and ts is not None and ts.data.tally.samples:
                        user = recall(proc, s)
                        if user and ts.noted.holds(user, proc.maps_version):
                            key: Recalled = (ts, s.tid, s.cgroup, s.ip, user)
                            seen = pending.get(key)
                            if seen is None:
                                pending[key] = [1, s.period or 1]
                            else:
                                seen[0] += 1
                                seen[1] += s.period or 1
                            continue
                if pending:
                    recalled(pending)
                sample(s)
                continue
            if pending:
                recalled(pending)
            handler = route(type(rec))
            if handler is not None:  # None: decoded only (throttling, unknown types)
                handler(rec)
        if pending:
            recalled(pending)
        self.waits.take_accrued()  # now, while their processes' sets are still here
        self.source.release()
        return len(raw)

    def on_lost(self, rec: Lost) -> None:
        self.lost += rec.lost
        self.tick_lost += rec.lost
        self.book.lost = self.lost
        if self.off_cpu:  # switch records among them: say so (q:switch-records-lost)
            for ts in self.book.open_sets():
                ts.data.tally.switch_lost += rec.lost
