"""The checkpoints of one CPU's collector: which sets are written when
(``SetBook.plan``), what they take along (waits, thread names, JIT code,
counters, cgroups, rare stacks folded), the processes forgotten once
written, and what is said when `.q` cannot be written."""

from __future__ import annotations

import time
from typing import TextIO

from qtools.qformat import QDir

from .clock import Clock
from .config import Options
from .frames.jittracker import JitTracker
from .machine import synthesize
from .machine.cgroups import CgroupTable
from .machine.host import Host
from .messages import say, tell
from .processes import Processes
from .sets.aggregate import SetBook
from .sets.checkpoint import RunInfo, write_sets
from .sets.kallsymscopy import KallsymsCopy
from .sets.objects import ObjectCopier
from .sets.starts import FunctionStarts
from .waits import Waits

RECOVERED_AFTER = 3
"""Checkpoints written whole, after a write error was said, before the
collector says writing works again (or the run's last one)."""


class WriteErrors:
    """What a collector says when `.q` cannot be written: the first
    error once (the data stays in memory), that writing works again once
    it held for RECOVERED_AFTER checkpoints, and at the last chance
    (``last_chance``) every error."""

    def __init__(self, out: TextIO, path: str, cpu: int) -> None:
        self.out = out
        self.path = path
        self.cpu = cpu
        self.error: str | None = None  # the error said, until writing works again
        self.good_writes = 0  # checkpoints written whole since it was said
        self.last_chance = False  # the run's final checkpoint: no retry follows

    def report(self, e: OSError) -> None:
        """A write or copy failed (MappingNotes and the checkpoints tell it here)."""
        text = f"cannot write to {self.path}: {e.strerror or e}"
        self.good_writes = 0
        if self.last_chance:
            tell(self.out, f"cpu {self.cpu}: {text}")
        elif text != self.error:
            tell(self.out, f"{text}; keeping the data in memory and retrying at the next "
                           "checkpoint")
            self.error = text

    def held(self, final: bool) -> None:
        """A checkpoint reached the disk whole. A disk at the edge of full
        takes one checkpoint and refuses the next: recovery is said once
        it held, so the log gets one pair."""
        if self.error is None:
            return
        self.good_writes += 1
        if self.good_writes >= RECOVERED_AFTER or final:
            say(self.out, f"writing to {self.path} works again")
            self.error = None


class Checkpoints:
    """Writes the changed sets of ``book`` into ``qdir`` (``write``), cuts
    time slices (``rotate``), keeps the sets' task and CPU counters, and
    counts the sets created and given up."""

    def __init__(self, opts: Options, run: RunInfo, qdir: QDir, copier: ObjectCopier,
                 book: SetBook, processes: Processes, waits: Waits, cgroups: CgroupTable,
                 sampled_cgroups: bool, host: Host, jit: JitTracker | None,
                 kallsyms: KallsymsCopy | None, starts: FunctionStarts | None, clock: Clock,
                 out: TextIO, errors: WriteErrors) -> None:
        self.opts = opts
        self.run_info = run
        self.qdir = qdir
        self.copier = copier
        self.book = book
        self.processes = processes
        self.waits = waits
        self.cgroups = cgroups
        self.sampled_cgroups = sampled_cgroups
        self.host = host
        self.jit = jit
        self.kallsyms = kallsyms
        self.starts = starts
        self.clock = clock
        self.out = out
        self.errors = errors
        self.sets_created = 0
        self.given_up = 0  # sets dropped without ever being written
        self.unwritten = 0  # sets the last checkpoint could not write

    def write(self, read_until: int, final: bool = False, complete: bool = False) -> bool:
        """Write every changed set; True if everything reached the disk.

        ``read_until``: when the last drain read the rings (0: none yet),
        up to which waits still going are counted. ``final`` closes every
        set: the end of the run, or of a time slice. ``complete`` writes an
        idle CPU's kernel set too, which a periodic checkpoint leaves for
        later when nothing else changed (Book.plan).
        """
        self._update_stats()
        self.waits.take(read_until or time.monotonic_ns())
        self.waits.name_threads()
        if self.jit is not None:
            self.jit.resolve_pending(final_all=final)
        kallsyms = self.kallsyms.current(self.copier) if self.kallsyms is not None else None
        starts = self.starts
        sets, folded = self.book.plan(
            final, complete,
            None if starts is None else lambda ts: starts.for_set(
                kallsyms, ts.data.tally.mappings, ts.data.tally.kernel_from, ts.data.process),
            None if starts is None else lambda ts: starts.object_lines(
                kallsyms, ts.data.tally.mappings, ts.data.tally.kernel_from))
        self.processes.expire(final)
        if self.sampled_cgroups:
            self.cgroups.complete((ts.stats.cgroup_weights for ts in sets),
                                  lambda: synthesize.cgroups(self.host, 0))
        for ts in sets:
            ts.stats.cgroup = self.cgroups.choose(ts.stats.cgroup_weights) or ts.stats.cgroup
        for proc in folded:
            if proc.ended:
                self.processes.forget(proc)
        run = self.run_info
        if self.kallsyms is not None:
            run = run._replace(kallsyms=kallsyms)
        if final and self.opts.compress:
            run = run._replace(compress=True)
        fresh = [ts for ts in sets if ts.writer.version is None]
        jit = self.jit
        written, errors = write_sets(self.qdir, sets, run, self.copier, self.book.lost,
                                     (lambda t: jit.refs(t.data.process, t.data.pids, self.qdir))
                                     if jit else None, self.clock)
        self.sets_created += sum(ts.writer.version is not None for ts in fresh)
        self.unwritten = len(sets) - len(written)
        for ts in written:
            done = self.book.written(ts)
            if done is not None and done.ended:
                self.processes.forget(done)
        if self.book.dropped:
            tell(self.out, f"cpu {self.opts.cpu}: gave up {self.book.dropped} closed sets "
                           f"that could not be written to {self.qdir.path}")
            self.given_up += self.book.dropped
            self.book.dropped = 0
        if errors:
            self.errors.report(errors[0])
            return False
        self.errors.held(final)
        return True

    def rotate(self, read_until: int) -> bool:
        """Close this time slice: write every set as closed, start new ones."""
        ok = self.write(read_until, final=True)
        self.book.start_slice()
        self.start_counters()
        for ts in self.book.by_process.values():  # the new slice counts from the last look
            stats = ts.stats
            stats.counters_start = stats.counters_last or stats.counters_start
            stats.counters_last = None
        return ok

    def give_up_unwritten(self) -> None:
        """After the run's last checkpoint: what it could not write is lost."""
        self.given_up += self.unwritten
        self.unwritten = 0

    def start_counters(self) -> None:
        """The CPU's counters as collection (or a slice) starts (with ``cpu_stats``)."""
        if self.opts.cpu_stats:
            self.book.kernel_set().stats.counters_start = self.host.cpu_counters(self.opts.cpu)

    def _update_stats(self) -> None:
        """Counters of live tasks and of the CPU, for the sets about to be written."""
        for proc, ts in self.book.by_process.items():
            if not proc.ended and ts.writer.promoted and ts.stats.counters_start is not None:
                ts.stats.counters_last = self.host.task_counters(proc.pid) or ts.stats.counters_last
        if not self.opts.cpu_stats:
            return
        kernel = self.book.kernel_set()
        now = self.host.cpu_counters(self.opts.cpu)
        if kernel.stats.counters_start is None:
            kernel.stats.counters_start = now
        kernel.stats.counters_last = now
        kernel.writer.idle_dirty = True  # time passing: written as the idle weight is
