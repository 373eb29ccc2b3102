"""The processes of one CPU's collector: its task table, the processes
the host showed before collection (seeded), those first seen in a
sample (synthesized from the host, or a stub), and those that ended
(kept a while for their last samples, then forgotten)."""

from __future__ import annotations

import time
from collections import deque
from typing import Iterable

from .frames.jittracker import JitTracker
from .machine import synthesize
from .machine.host import Host
from .machine.tasks import Process, TaskTable
from .sets.aggregate import SetBook
from .sets.objects import ObjectCopier

# The kernel's pid of a task sampled in its last moments of exit, after its
# pid was released (perf_event_pid gives -1, a u32 in the record): a process
# of its own, named for what it does.
EXITING_PID, EXITING = 0xFFFFFFFF, "exiting"
MAX_LINGERING = 4096
"""Ended processes without samples kept until the next checkpoint at most:
a process's samples after its EXIT come within milliseconds of it."""


class Processes:
    """The task table of one collector and what it does as processes
    start and end: the table changes by records alone (``table``); the
    sets of ``book`` learn when their process ended."""

    def __init__(self, host: Host, book: SetBook, copier: ObjectCopier,
                 jit: JitTracker | None) -> None:
        self.host = host
        self.book = book
        self.copier = copier
        self.jit = jit
        self.table = TaskTable(on_end=self._ended, owner=host.owner)
        self._procs = self.table.procs  # process() runs for every sample
        self._lingering: deque[Process] = deque()  # ended without samples (_linger)
        self._lingered: list[Process] = []  # ... lingering at the last checkpoint

    def seed(self, processes: Iterable[synthesize.Seen]) -> None:
        """Install the processes that exist before collection starts."""
        for seen in processes:
            self._install(seen)

    def process(self, pid: int, when: int) -> Process:
        """The process of a sample of ``pid`` taken at ``when``: the table's,
        else what the host shows of it, else a stub."""
        proc = self._procs.get(pid)
        if proc is not None:
            return proc
        # Time 0: the records about it still on their way from other CPUs'
        # rings, older than now, apply over what the host shows.
        proc = self._synthesize(pid, 0)
        if proc is not None:
            return proc
        # Gone already, or its records are still in another CPU's ring: a
        # stub, completed in place when they arrive.
        comm = EXITING if pid == EXITING_PID else self.host.comm(pid) or "unknown"
        stub = Process(pid, comm, since=when, stub=True)
        self._procs[pid] = stub
        return stub

    def _synthesize(self, pid: int, now: int) -> Process | None:
        """Apply what the host shows of ``pid`` as records; its process, or None if gone."""
        seen = synthesize.seen(self.host, pid, now)
        return self._install(seen) if seen is not None else None

    def _install(self, seen: synthesize.Seen) -> Process | None:
        for rec in seen.records:
            self.table.apply(rec)
        proc = self.table.get(seen.pid)
        if proc is not None:
            proc.maps_loaded_at = time.monotonic()
            # What records cannot carry, read while it surely ran: an early
            # end would otherwise leave its set without a command line.
            proc.ppid, proc.cmdline, proc.exe = seen.ppid, seen.cmdline, seen.exe
        return proc

    def _ended(self, proc: Process) -> None:
        """The task table's word that ``proc`` ended (its EXIT, or an exec)."""
        if self.jit is not None:
            self.jit.process_ended(proc)  # its JIT records are all written by now
        ts = self.book.by_process.get(proc)
        if ts is not None and ts.stats.counters_start is not None:
            # Until its parent reaps it, an exited task's final counters are
            # still in /proc; a pid already reused shows smaller ones: ignored.
            final = self.host.task_counters(proc.pid)
            seen = ts.stats.counters_last or ts.stats.counters_start
            if final and final.get("user-seconds", 0) >= seen.get("user-seconds", 0):
                ts.stats.counters_last = final
        if not self.book.process_ended(proc):
            self._linger(proc)

    def _linger(self, proc: Process) -> None:
        """Keep an ended process without samples a while before forgetting
        it: kernels since 6.x write a task's EXIT before its last work (the
        unmapping of its memory in exit_mmap), whose samples follow it, and
        a process forgotten at its EXIT made them a stub named "unknown"
        (a tenth of a fork-heavy load's processes). Forgotten at the next
        checkpoint but one (``expire``), or once MAX_LINGERING others have
        ended since."""
        lingering = self._lingering
        lingering.append(proc)
        if len(lingering) > MAX_LINGERING:
            self._forget_unsampled(lingering.popleft())

    def expire(self, final: bool) -> None:
        """At a checkpoint: forget those that lingered since the checkpoint
        before (the latest ones may still have samples in the rings), or
        all of them at the end (``final``)."""
        expired, self._lingered = self._lingered, list(self._lingering)
        self._lingering.clear()
        if final:
            expired, self._lingered = expired + self._lingered, []
        for proc in expired:
            self._forget_unsampled(proc)

    def _forget_unsampled(self, proc: Process) -> None:
        """Forget a lingering process, unless samples came after its end:
        then its set has it, and the set's write forgets it."""
        if proc not in self.book.by_process:
            self.forget(proc)

    def forget(self, proc: Process) -> None:
        """An ended process whose sets are written (or that had none): what
        is kept about it goes, so memory follows the live processes."""
        self.table.forget(proc)
        self.copier.forget(proc)
