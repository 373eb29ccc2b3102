"""One CPU's collector: drain records, keep the task table, aggregate, checkpoint.

The loop knows nothing of syscalls: records come from an ``EventSource``
(the kernel, or a replay in tests), files go out through qformat.
``CpuCollector`` makes the parts, each owning its state, and is what
the loop in time (drainloop.py) and the collector process drive:

- ``Router`` (routing.py): one drain, its records to their handlers;
- ``SamplePath`` (samplepath.py): kernel or user, the set, the stack, the tally;
- ``Processes`` (processes.py): the task table, seeded, synthesized, ended;
- ``Waits`` (waits.py): --off-cpu's switches and wake-ups;
- ``Checkpoints`` (checkpoints.py): writing the sets, slices, write errors.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

from qtools.qformat import QDir

from . import drainloop
from .checkpoints import Checkpoints, WriteErrors
from .clock import SYSTEM, Clock
from .config import Options
from .decode.routes import Handlers
from .drainloop import Flags
from .frames import FramePointerFrames, UserFrames
from .frames.jittracker import JitTracker
from .kernel import abi
from .kernel.source import EventSource
from .machine import synthesize
from .machine.cgroups import CgroupTable
from .machine.host import Host
from .machine.tasks import TaskTable
from .messages import Tally, say
from .processes import Processes
from .routing import Router
from .samplepath import SamplePath
from .sets.aggregate import SetBook
from .sets.checkpoint import RunInfo
from .sets.kallsymscopy import KallsymsCopy
from .sets.mappings import MappingNotes
from .sets.objects import ObjectCopier
from .sets.starts import FunctionStarts
from .waits import Waits

__all__ = ["CpuCollector", "Flags", "Options"]


class CpuCollector:
    def __init__(self, opts: Options, run: RunInfo, source: EventSource, qdir: QDir,
                 copier: ObjectCopier, user_frames: UserFrames | None = None,
                 out: TextIO | None = None, kallsyms: KallsymsCopy | None = None,
                 clock: Clock = SYSTEM, host: Host | None = None) -> None:
        self.opts = opts
        self.source = source
        self.copier = copier
        self.clock = clock
        self.out = out or sys.stderr
        # the machine's processes, files and counters: the copier's unless told
        self.host = host if host is not None else copier.host
        frames = user_frames or FramePointerFrames()
        jit: JitTracker | None = getattr(frames, "jit", None)
        if jit is not None:
            jit.out = self.out
            jit.host = self.host
        self.book = SetBook(opts.cpu, opts.min_samples, opts.max_stacks, clock,
                            opts.min_stack_share)
        self.processes = Processes(self.host, self.book, copier, jit)
        self.cgroups = CgroupTable()
        # Without PERF_SAMPLE_CGROUP (a kernel before 5.7) a set's cgroup is
        # read from /proc/PID/cgroup at its first sample (so after each exec).
        self.sampled_cgroups = bool(source.layout.sample_type & abi.SAMPLE_CGROUP)
        self.write_errors = WriteErrors(self.out, qdir.path, opts.cpu)
        mappings = MappingNotes(self.table, self.host, copier, self.write_errors.report)
        self.sampler = SamplePath(opts, self.book, self.processes, frames, mappings, self.host,
                                  self.sampled_cgroups, jit)
        self.waits = Waits(opts, self.book, self.processes, self.sampler)
        self.router = Router(opts, source, self.book, self.table, self.cgroups, self.sampler,
                             frames, self.waits)
        tables = getattr(frames, "tables", None)  # DWARF stacks' CFI
        starts = FunctionStarts(
            qdir, copier.limits.kallsyms_size, None if tables is None else tables.loaded,
            None if tables is None else tables.cfi_for) if opts.min_stack_share else None
        self.checkpoints = Checkpoints(opts, run, qdir, copier, self.book, self.processes,
                                       self.waits, self.cgroups, self.sampled_cgroups,
                                       self.host, jit, kallsyms, starts, clock, self.out,
                                       self.write_errors)

    @property
    def table(self) -> TaskTable:
        return self.processes.table

    @property
    def handlers(self) -> Handlers:
        """The handler of each kind of record its drains hand on."""
        return self.router.handlers

    # what it counted (tests, the summary) and what the loop asks of a drain
    @property
    def samples(self) -> int:
        return self.sampler.samples

    @property
    def lost(self) -> int:
        return self.router.lost

    @property
    def damaged(self) -> int:
        return self.router.damaged

    @property
    def switches(self) -> int:
        return self.waits.switches

    @property
    def busy_records(self) -> int:
        return self.router.busy_records

    @property
    def sideband_seen(self) -> bool:
        return self.router.sideband_seen

    def seed(self, snapshot: synthesize.Snapshot | None = None) -> None:
        """Install the tasks that exist before collection starts, as records
        synthesized from the host: ``snapshot``, which the supervisor took
        once for all its collectors just before forking them, or the host
        as it is now."""
        if snapshot is None:
            snapshot = synthesize.snapshot(self.host, time.monotonic_ns(),
                                           with_cgroups=self.sampled_cgroups)
        if self.sampled_cgroups:
            for rec in snapshot.cgroups:
                self.cgroups.apply(rec)
        self.processes.seed(snapshot.processes)

    def step(self) -> int:
        """Drain what the source holds; returns the number of records."""
        return self.router.step()

    def checkpoint(self, final: bool = False, complete: bool = False) -> bool:
        """Write every changed set; True if everything reached the disk
        (``Checkpoints.write``)."""
        return self.checkpoints.write(self.router.read_until, final, complete)

    def rotate(self) -> bool:
        """Close this time slice: write every set as closed, start new ones."""
        return self.checkpoints.rotate(self.router.read_until)

    def start_counters(self) -> None:
        """The CPU's counters as collection starts (with ``cpu_stats``)."""
        self.checkpoints.start_counters()

    def finish(self) -> bool:
        """The last drain and the final checkpoint; True if all was written."""
        self.step()
        self.write_errors.last_chance = True
        ok = self.checkpoint(final=True)
        self.checkpoints.give_up_unwritten()  # the last chance to write them has passed
        return ok

    def run(self, flags: Flags, clock: Callable[[], float] = time.monotonic,
            drain_interval: float = 0.5, heartbeat: Callable[[], None] | None = None,
            quiet_interval: float | None = None) -> bool:
        """Collect until ``flags.stop``; then write a final checkpoint
        (``drainloop.run``)."""
        return drainloop.run(self, flags, clock, drain_interval, heartbeat, quiet_interval)

    def say(self, text: str) -> None:
        say(self.out, text)

    def tally(self) -> Tally:
        return Tally(self.samples, self.lost, self.damaged, self.checkpoints.sets_created,
                     self.checkpoints.given_up)

    def say_tick(self, seconds: float) -> None:
        """-v: what the last ``seconds`` collected."""
        damaged = f"; {self.damaged} damaged records so far" if self.damaged else ""
        self.say(f"collected {self.sampler.take_tick()} samples ({self.router.take_tick()} "
                 f"lost) in {seconds:.5f} seconds{damaged}")
