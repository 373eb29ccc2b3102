"""Off-CPU and wait-for-CPU time in one CPU's collector (--off-cpu): the
handlers of the scheduler's records, feeding ``sets.offcpu.OffCpu``, whose
waits go into their processes' sets (docs/q-format.md 4.9)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .decode.records import Sample, SchedSwitch, SchedWaking, split_callchain
from .machine.tasks import Process
from .sets.offcpu import OffCpu

if TYPE_CHECKING:
    from .collector import CpuCollector


class Waits:
    """The ``on_sched_switch`` and ``on_sched_waking`` of a collector."""

    def __init__(self, collector: CpuCollector, min_stack_ns: int) -> None:
        self.c = collector
        self.offcpu = OffCpu(min_stack_ns=min_stack_ns)

    def on_sched_switch(self, rec: SchedSwitch) -> None:
        """A switch on any CPU ends the wait of the thread coming in; one on
        this CPU (with its stack) starts the wait of the thread leaving."""
        self.offcpu.switch_in(rec.next_tid, rec.time)
        s = rec.sample
        if s is None or s.pid == 0 or rec.prev_tid == 0 or self.c.opts.kernel_only:
            return
        proc = self.c.processes.process(s.pid, s.time)
        self.c.book.process_set(proc).data.tally.switches += 1
        frames = self._switch_frames(proc, s) if self.c.opts.stacks else ()
        self.offcpu.switch_out(rec.prev_tid, rec.prev_state, rec.time, proc, frames)

    def _switch_frames(self, proc: Process, s: Sample) -> Callable[[], tuple[int, ...]]:
        """The stack at a switch-out, unwound only if the wait turns out to
        be at least --off-cpu-min long (most are far shorter): the cost of
        a switch is then copying its user stack, not unwinding it."""
        # the ring's bytes are reused: registers and stack copied out of it
        s = s._replace(stack=bytes(s.stack), regs=tuple(s.regs), raw=b"")
        memo: list[tuple[int, ...]] = []

        def frames() -> tuple[int, ...]:
            if memo:
                return memo[0]
            kernel, fp_user = split_callchain(s.callchain) if s.callchain else ([], [])
            user = self.c.user_frames.frames(proc, s, fp_user)
            stack = (tuple(kernel) + tuple(user)) or (s.ip,)
            ts = self.c.book.by_process.get(proc)
            if ts is not None:
                ts.data.tally.note_kernel(min(min(kernel), s.ip) if kernel else s.ip)
                self.c.mappings.note(proc, ts, user)
            memo.append(stack)
            return stack
        return frames

    def on_sched_waking(self, rec: SchedWaking) -> None:
        self.offcpu.wake(rec.tid, rec.time)

    def take(self, now: int | None) -> None:
        """Waits that ended, and those still going counted up to ``now``,
        into their process's set (docs/q-format.md 4.9)."""
        if not self.c.opts.off_cpu:
            return
        if now is not None:
            self.offcpu.checkpoint(now)
        for (proc, kind, tid, frames), ns in self.offcpu.take().items():
            assert isinstance(proc, Process)
            ts = self.c.book.by_process.get(proc)
            if ts is None:
                if proc.ended:
                    continue  # its set is written and gone; a thread exits running
                ts = self.c.book.process_set(proc)
            ts.data.tally.add_thread(kind, tid, frames, ns)
            ts.writer.dirty = True

    def name_threads(self) -> None:
        for proc, ts in self.c.book.by_process.items():
            names = ts.data.tally.thread_names
            for tid in ts.data.tally.thread_ids() - names.keys():
                t = proc.threads.get(tid)
                if t is not None:
                    names[tid] = t.name
