"""Off-CPU and wait-for-CPU time per thread, from scheduler events.

One CPU's collector sees the switches on its own CPU with their stacks
(``sched:sched_switch``) and, like the fork and mmap side-band, the
switch-ins and wake-ups of every CPU. It accounts the threads that switched
out on its own CPU: a wait is counted once, by the CPU it began on, so a
thread that sleeps on one CPU and runs again on another is still matched
and nothing is shared between collectors (docs/q-format.md, 4.9).

Pure: times are the records' nanoseconds; ``OffCpu.take`` hands out what
accrued, per (set key, kind, tid, stack), for the tally to add.
"""

from __future__ import annotations

from typing import Callable, Hashable, Union

TASK_RUNNING = 0x0
TASK_INTERRUPTIBLE = 0x1
TASK_UNINTERRUPTIBLE = 0x2
TASK_DEAD = 0x10 | 0x20  # EXIT_DEAD, EXIT_ZOMBIE
STATE_MASK = 0xff  # the report bits sched_switch's print format looks at

Frames = tuple[int, ...]
LazyFrames = Union[Frames, Callable[[], Frames]]  # unwound when first needed
Key = tuple[Hashable, str, int, Frames]  # set key, kind (S, D, W), tid, stack


def off_kind(prev_state: int) -> str | None:
    """The kind a switch-out in ``prev_state`` starts: ``W`` (preempted,
    runnable), ``D``, ``S`` (every other sleep), or None (the task died)."""
    state = prev_state & STATE_MASK
    if state == TASK_RUNNING:
        return "W"
    if state & TASK_DEAD and not state & (TASK_INTERRUPTIBLE | TASK_UNINTERRUPTIBLE):
        return None
    if state & TASK_UNINTERRUPTIBLE:
        return "D"
    return "S"


class Pending:
    """A thread that switched out on this CPU and has not run since."""

    __slots__ = ("set_key", "kind", "since", "frames", "total")

    def __init__(self, set_key: Hashable, kind: str, since: int, frames: LazyFrames) -> None:
        self.set_key = set_key
        self.kind = kind  # S, D or W: what the time since ``since`` counts as
        self.since = since  # ns: the switch-out, the wake-up, or the last checkpoint
        self.frames = frames
        self.total = 0  # ns counted so far: a wait's stack is kept once it reaches min_stack_ns


class OffCpu:
    """The waits of threads that switched out on this collector's CPU."""

    def __init__(self, min_stack_ns: int = 0, max_pending: int = 1 << 16) -> None:
        self.min_stack_ns = min_stack_ns  # shorter waits are counted without their stack
        self.max_pending = max_pending  # threads tracked at once (each holds its stack copy)
        self.pending: dict[int, Pending] = {}
        self.accrued: dict[Key, int] = {}
        self.switches = 0
        self.dropped = 0
        # Ends seen before their start: each CPU's ring is read in turn, so a
        # batch may hold another CPU's switch-in (or wake-up) of a thread whose
        # switch-out on this CPU comes only in the next batch. tid -> time.
        self.early_in: dict[int, int] = {}
        self.early_wake: dict[int, int] = {}

    def switch_out(self, tid: int, prev_state: int, time: int, set_key: Hashable,
                   frames: LazyFrames) -> None:
        """``tid`` left this CPU at ``time`` in ``prev_state`` with ``frames``."""
        if tid == 0:
            return
        self.switches += 1
        kind = off_kind(prev_state)
        self.pending.pop(tid, None)
        if kind is None:
            return
        if len(self.pending) >= self.max_pending:
            self.pending.pop(next(iter(self.pending)))
            self.dropped += 1
        self.pending[tid] = Pending(set_key, kind, time, frames)
        back = self.early_in.pop(tid, None)
        woken = self.early_wake.pop(tid, None)
        if back is not None and back > time:  # its end came in an earlier batch
            if woken is not None and time < woken <= back:
                self.wake(tid, woken)
            self.switch_in(tid, back)

    def wake(self, tid: int, time: int) -> None:
        """``tid`` was woken (on any CPU): its sleep ends, its wait begins."""
        p = self.pending.get(tid)
        if p is None:
            _remember(self.early_wake, tid, time, self.max_pending)
            return  # not ours, or its switch-out is still to come
        if p.kind == "W":
            return  # already runnable (a preempted thread woken again)
        self._add(tid, p, time)
        p.kind, p.since = "W", max(p.since, time)

    def switch_in(self, tid: int, time: int) -> None:
        """``tid`` runs again (on any CPU): its wait ends. A thread switched in
        without a wake-up seen (lost, or no tracepoint) counts whole as its
        sleep kind."""
        p = self.pending.pop(tid, None)
        if p is not None:
            self._add(tid, p, time)
        else:
            _remember(self.early_in, tid, time, self.max_pending)

    def exit(self, tid: int) -> None:
        self.pending.pop(tid, None)

    def checkpoint(self, time: int) -> None:
        """Count the time of threads still off up to ``time``; the rest goes
        to whatever set key ``retarget`` gives them next."""
        for tid, p in self.pending.items():
            self._add(tid, p, time)
            p.since = max(p.since, time)

    def retarget(self, old: Hashable, new: Hashable) -> None:
        """Waits begun in set ``old`` go on in ``new`` (a new slice or version)."""
        for p in self.pending.values():
            if p.set_key == old:
                p.set_key = new

    def take(self) -> dict[Key, int]:
        out, self.accrued = self.accrued, {}
        return out

    def _add(self, tid: int, p: Pending, time: int) -> None:
        ns = time - p.since
        if ns <= 0:
            return
        p.total += ns
        if p.total >= self.min_stack_ns:
            if callable(p.frames):
                p.frames = p.frames()
            frames = p.frames
        else:
            frames = ()
        key = (p.set_key, p.kind, tid, frames)
        self.accrued[key] = self.accrued.get(key, 0) + ns


def _remember(times: dict[int, int], tid: int, time: int, cap: int) -> None:
    """Keep the latest time per tid, at most ``cap`` tids (then start over:
    an early end is needed for a moment only)."""
    if len(times) >= cap and tid not in times:
        times.clear()
    times[tid] = time
