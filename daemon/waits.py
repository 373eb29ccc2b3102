"""Off-CPU and wait-for-CPU time in one CPU's collector (--off-cpu): the
handlers of the scheduler's records, feeding ``sets.offcpu.OffCpu``, whose
waits go into their processes' sets (docs/q-format.md 4.9)."""

from __future__ import annotations

from typing import Callable, Protocol

from .config import Options
from .decode.records import Sample, SchedSwitch, SchedWaking, Switch
from .machine.tasks import Process
from .processes import Processes
from .sets.aggregate import SetBook
from .sets.offcpu import OffCpu


class SwitchStacks(Protocol):
    """How a switch's stack is unwound, once its wait proves long enough:
    ``samplepath.SamplePath``."""

    def stack_at(self, proc: Process, s: Sample) -> tuple[int, ...]: ...


class Waits:
    """The handlers of switches and wake-ups, and the waits they make,
    taken into the sets of ``book`` at each drain and checkpoint."""

    def __init__(self, opts: Options, book: SetBook, processes: Processes,
                 stacks: SwitchStacks) -> None:
        self.off_cpu = opts.off_cpu
        self.kernel_only = opts.kernel_only
        self.with_stacks = opts.stacks
        self.book = book
        self.processes = processes
        self.stacks = stacks
        self.offcpu = OffCpu(min_stack_ns=opts.off_cpu_min_ns)
        self.switches = 0  # SWITCH records (none yet: no event asks for them)

    def on_switch(self, rec: Switch) -> None:
        """A switch-in (its sample_id names the thread coming in) ends that
        thread's wait, whichever CPU it comes back on (--off-cpu)."""
        self.switches += 1
        if not rec.out and rec.sid is not None:
            self.offcpu.switch_in(rec.sid.tid, rec.sid.time)

    def on_sched_switch(self, rec: SchedSwitch) -> None:
        """A switch on any CPU ends the wait of the thread coming in; one on
        this CPU (with its stack) starts the wait of the thread leaving."""
        self.offcpu.switch_in(rec.next_tid, rec.time)
        s = rec.sample
        if s is None or s.pid == 0 or rec.prev_tid == 0 or self.kernel_only:
            return
        proc = self.processes.process(s.pid, s.time)
        self.book.process_set(proc).data.tally.switches += 1
        frames = self._switch_frames(proc, s) if self.with_stacks else ()
        self.offcpu.switch_out(rec.prev_tid, rec.prev_state, rec.time, proc, frames)

    def _switch_frames(self, proc: Process, s: Sample) -> Callable[[], tuple[int, ...]]:
        """The stack at a switch-out, unwound only if the wait turns out to
        be at least --off-cpu-min long (most are far shorter): the cost of
        a switch is then copying its user stack, not unwinding it."""
        # the ring's bytes are reused: registers and stack copied out of it
        s = s._replace(stack=bytes(s.stack), regs=tuple(s.regs), raw=b"")
        memo: list[tuple[int, ...]] = []

        def frames() -> tuple[int, ...]:
            if not memo:
                memo.append(self.stacks.stack_at(proc, s))
            return memo[0]
        return frames

    def on_sched_waking(self, rec: SchedWaking) -> None:
        self.offcpu.wake(rec.tid, rec.time)

    def take_accrued(self) -> None:
        """At the end of a drain: the waits that ended in it, into their
        processes' sets now, while those sets are still here."""
        if self.offcpu.accrued:
            self.take(None)

    def take(self, now: int | None) -> None:
        """Waits that ended, and those still going counted up to ``now``,
        into their process's set (docs/q-format.md 4.9)."""
        if not self.off_cpu:
            return
        if now is not None:
            self.offcpu.checkpoint(now)
        for (proc, kind, tid, frames), ns in self.offcpu.take().items():
            assert isinstance(proc, Process)
            ts = self.book.by_process.get(proc)
            if ts is None:
                if proc.ended:
                    continue  # its set is written and gone; a thread exits running
                ts = self.book.process_set(proc)
            ts.data.tally.add_thread(kind, tid, frames, ns)
            ts.writer.dirty = True

    def name_threads(self) -> None:
        """Each thread a set's `.threads` names, by the name its process
        gave it."""
        for proc, ts in self.book.by_process.items():
            names = ts.data.tally.thread_names
            for tid in ts.data.tally.thread_ids() - names.keys():
                t = proc.threads.get(tid)
                if t is not None:
                    names[tid] = t.name
