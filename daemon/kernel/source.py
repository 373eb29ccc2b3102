"""Where one CPU's collector gets its records from.

``PerfSource`` opens the sampling event on its CPU plus a side-band-only
event on every other CPU: the kernel reports a fork, exec or mmap only on
the CPU where it happens (perf-event-abi.md, pitfall 5), and this CPU's
collector must know about all of them. While its CPU is idle a collector
waits long between drains; a *doorbell* (a side-band event on its CPU that
wakes it at every record, whose records are never read) brings it back as
soon as a task starts or execs there. ``ReplaySource`` feeds recorded or
synthetic bytes through the same interface, for tests and for what this
machine cannot produce.
"""

from __future__ import annotations

import errno
import os
import select
from typing import NamedTuple, Protocol, Sequence

from ..decode.layout import SampleLayout
from ..decode.tracepoints import BY_NAME, EventRoute, Layouts
from . import abi, syscalls
from .abi import EventSpec
from .ring import RingReader

SIDEBAND_FLAGS = (abi.FLAG_MMAP | abi.FLAG_MMAP2 | abi.FLAG_COMM | abi.FLAG_COMM_EXEC
                  | abi.FLAG_TASK | abi.FLAG_SAMPLE_ID_ALL | abi.FLAG_USE_CLOCKID)
# attr.mmap2 alone selects the record format but does not make the kernel
# report mappings at all: attr.mmap must be set too (observed on 6.18).


class EventSource(Protocol):
    layout: Layouts

    def wait(self, timeout: float) -> None: ...
    def read(self) -> list[bytes | memoryview]: ...
    def release(self) -> None: ...
    def close(self) -> None: ...
    def doorbell(self, on: bool) -> bool: ...


SCHED_SAMPLE_TYPE = (abi.SAMPLE_IDENTIFIER | abi.SAMPLE_TID | abi.SAMPLE_TIME
                     | abi.SAMPLE_CPU | abi.SAMPLE_RAW)


class SourceSpec(NamedTuple):
    """Everything needed to open one CPU's events."""

    event: EventSpec
    cpu: int
    cpus: Sequence[int]  # every CPU collected, this one included
    frequency: int = 997
    target_pid: int = -1  # -1: system-wide (or attach); else this task and its children
    # -p: the processes attached to; their threads (``tids``, listed by the
    # collector as it opens them) each get an event, inherited by the
    # threads they start, and with ``children`` by the processes too
    attach: tuple[int, ...] = ()
    tids: tuple[int, ...] = ()
    children: bool = True
    exclude_kernel: bool = False
    exclude_user: bool = False
    callchain: bool = True
    user_callchain: bool = True  # False: the kernel's callchain stops at user space (dwarf)
    branches: bool = False
    regs_user_mask: int = 0
    stack_user: int = 0
    enable_on_exec: bool = False
    ring_pages: int = 256
    sideband_pages: int = 16
    # each sample's cgroup id, and CGROUP records naming new cgroups (5.7+);
    # PerfSource drops it where the kernel refuses it
    cgroups: bool = True
    # --off-cpu: tracepoint config ids (0: not opened). sched_switch is
    # sampled with the stack on this CPU, and, with sched_waking, without
    # it on every other CPU (docs/q-format.md 4.9)
    sched_switch: int = 0
    sched_waking: int = 0
    switch_stack_user: int = 0  # bytes of user stack copied at a switch

    @property
    def per_task(self) -> bool:
        """Events that follow tasks (-i, -p), not every task of a CPU."""
        return self.target_pid != -1 or bool(self.attach)

    @property
    def probe_pid(self) -> int:
        """The task to try this spec's events on: a process attached to, this
        process for -i (its command is not there yet), else none (-1)."""
        if self.attach:
            return self.attach[0]
        return 0 if self.target_pid != -1 else -1

    def _inherit_flags(self) -> int:
        flags = 0
        if self.per_task:
            flags |= abi.FLAG_INHERIT
            if not self.children:
                flags |= abi.FLAG_INHERIT_THREAD
            if self.enable_on_exec:
                flags |= abi.FLAG_ENABLE_ON_EXEC
        return flags

    @property
    def sample_type(self) -> int:
        st = (abi.SAMPLE_IDENTIFIER | abi.SAMPLE_IP | abi.SAMPLE_TID | abi.SAMPLE_TIME
              | abi.SAMPLE_CPU | abi.SAMPLE_PERIOD)
        if self.callchain:
            st |= abi.SAMPLE_CALLCHAIN
        if self.branches:
            st |= abi.SAMPLE_BRANCH_STACK
        if self.regs_user_mask:
            st |= abi.SAMPLE_REGS_USER
        if self.stack_user:
            st |= abi.SAMPLE_STACK_USER
        if self.cgroups:
            st |= abi.SAMPLE_CGROUP
        return st

    @property
    def branch_sample_type(self) -> int:
        if not self.branches:
            return 0
        bst = abi.BRANCH_ANY_CALL
        if not self.exclude_user:
            bst |= abi.BRANCH_USER
        if not self.exclude_kernel:
            bst |= abi.BRANCH_KERNEL
        return bst

    def _common_flags(self) -> int:
        flags = abi.FLAG_DISABLED | SIDEBAND_FLAGS | abi.FLAG_WATERMARK
        if self.cgroups:
            flags |= abi.FLAG_CGROUP
        if self.sched_switch:
            # switch-ins of every CPU: the tracepoints miss those from the
            # idle task (observed on 6.18: no sample while swapper is current)
            flags |= abi.FLAG_CONTEXT_SWITCH
        if self.exclude_kernel:
            flags |= abi.FLAG_EXCLUDE_KERNEL | abi.FLAG_EXCLUDE_HV | \
                abi.FLAG_EXCLUDE_CALLCHAIN_KERNEL
        if self.exclude_user or not self.user_callchain:
            flags |= abi.FLAG_EXCLUDE_CALLCHAIN_USER
        if self.exclude_user:
            flags |= abi.FLAG_EXCLUDE_USER
        return flags | self._inherit_flags()

    def sampling_attr(self) -> abi.Attr:
        flags = self._common_flags()
        sample = 1
        if self.event.type != abi.TYPE_TRACEPOINT:
            flags |= abi.FLAG_FREQ
            sample = self.frequency
        return abi.Attr(self.event.type, self.event.config, sample, self.sample_type, flags,
                        wakeup=self.ring_pages * abi.PAGE_SIZE // 2,
                        branch_sample_type=self.branch_sample_type,
                        sample_regs_user=self.regs_user_mask,
                        sample_stack_user=self.stack_user)

    def sideband_attr(self) -> abi.Attr:
        # A dummy software event samples nothing; it only carries side-band
        # records, laid out like the sampling event's (same sample_type), so
        # one decoder reads both.
        return abi.Attr(abi.TYPE_SOFTWARE, 9, 0, self.sample_type, self._common_flags(),
                        wakeup=self.sideband_pages * abi.PAGE_SIZE // 2,
                        sample_regs_user=self.regs_user_mask,
                        sample_stack_user=self.stack_user)

    def doorbell_attr(self) -> abi.Attr:
        # Every fork, exit and exec on this CPU, each waking the poll (a
        # watermark of one byte); no sample, nothing read (PerfSource.doorbell).
        return abi.Attr(abi.TYPE_SOFTWARE, 9, 0, 0,
                        abi.FLAG_DISABLED | abi.FLAG_TASK | abi.FLAG_COMM | abi.FLAG_WATERMARK,
                        wakeup=1)

    def layout(self) -> SampleLayout:
        return SampleLayout(self.sample_type, branch_sample_type=self.branch_sample_type,
                            regs_user_mask=self.regs_user_mask)

    # ---- --off-cpu: the scheduler's tracepoints

    @property
    def switch_sample_type(self) -> int:
        st = self.sample_type & ~(abi.SAMPLE_BRANCH_STACK | abi.SAMPLE_CGROUP) | abi.SAMPLE_RAW
        if not self.switch_stack_user:
            st &= ~abi.SAMPLE_STACK_USER
        return st

    def switch_attr(self) -> abi.Attr:
        """sched_switch on this CPU, with the stack of the thread leaving."""
        flags = self._common_flags() & ~(SIDEBAND_FLAGS | abi.FLAG_CGROUP
                                         | abi.FLAG_CONTEXT_SWITCH)
        flags |= abi.FLAG_SAMPLE_ID_ALL | abi.FLAG_USE_CLOCKID
        flags &= ~(abi.FLAG_EXCLUDE_KERNEL | abi.FLAG_EXCLUDE_HV)  # a tracepoint is the kernel's
        return abi.Attr(abi.TYPE_TRACEPOINT, self.sched_switch, 1, self.switch_sample_type,
                        flags, wakeup=self.ring_pages * abi.PAGE_SIZE // 2,
                        sample_regs_user=self.regs_user_mask,
                        sample_stack_user=self.switch_stack_user)

    def sched_attr(self, config: int) -> abi.Attr:
        """A scheduler tracepoint without a stack: switch-ins and wake-ups."""
        flags = (abi.FLAG_DISABLED | abi.FLAG_SAMPLE_ID_ALL | abi.FLAG_USE_CLOCKID
                 | abi.FLAG_WATERMARK) | self._inherit_flags()
        return abi.Attr(abi.TYPE_TRACEPOINT, config, 1, SCHED_SAMPLE_TYPE, flags,
                        wakeup=self.sideband_pages * abi.PAGE_SIZE // 2)

    def switch_layout(self) -> SampleLayout:
        return SampleLayout(self.switch_sample_type, regs_user_mask=self.regs_user_mask)

    def sched_layout(self) -> SampleLayout:
        return SampleLayout(SCHED_SAMPLE_TYPE)


class PerfSource:
    """The real thing: perf_event_open on one CPU (+ side-band from all)."""

    def __init__(self, spec: SourceSpec) -> None:
        self.fds: list[int] = []
        self.rings: list[RingReader] = []
        self.bell: tuple[int, RingReader] | None = None
        self.bell_on = False
        try:
            self._open_all(spec)
        except OSError as e:
            # A kernel before 5.7 knows neither PERF_SAMPLE_CGROUP nor
            # attr.cgroup (EINVAL): collect without them; the collector then
            # reads /proc/PID/cgroup (its layout has no cgroup field).
            self.close()
            if not spec.cgroups or e.errno != errno.EINVAL:
                raise
            spec = spec._replace(cgroups=False)
            self._open_all(spec)
        self.poller = select.poll()
        for fd in self.fds:
            self.poller.register(fd, select.POLLIN)
        self.extra_fds: list[int] = []
        if not spec.per_task:
            self._open_bell(spec)

    def _open_bell(self, spec: SourceSpec) -> None:
        """The doorbell, where the kernel gives one: without it the collector
        only waits less (drainloop)."""
        try:
            fd = syscalls.perf_event_open(spec.doorbell_attr(), -1, spec.cpu)
        except OSError:
            return
        try:
            self.bell = (fd, RingReader(fd, 1))
        except (OSError, ValueError):
            os.close(fd)

    def _open_all(self, spec: SourceSpec) -> None:
        self.spec = spec
        self.layout = Layouts(spec.layout())
        try:
            self._open(spec.sampling_attr(), spec.cpu, spec.ring_pages)
            for cpu in spec.cpus:
                if cpu != spec.cpu:
                    self._open(spec.sideband_attr(), cpu, spec.sideband_pages)
            self._open_sched(spec)
        except BaseException:
            self.close()
            raise

    def _open_sched(self, spec: SourceSpec) -> None:
        if spec.sched_switch:
            for fd in self._open(spec.switch_attr(), spec.cpu, spec.ring_pages):
                self.layout.add(syscalls.event_id(fd), spec.switch_layout(),
                                EventRoute(BY_NAME["sched:sched_switch"], True))
            for cpu in spec.cpus:
                if cpu != spec.cpu:
                    for fd in self._open(spec.sched_attr(spec.sched_switch), cpu,
                                         spec.sideband_pages):
                        self.layout.add(syscalls.event_id(fd), spec.sched_layout(),
                                        EventRoute(BY_NAME["sched:sched_switch"], False))
        if spec.sched_waking:
            for cpu in spec.cpus:
                for fd in self._open(spec.sched_attr(spec.sched_waking), cpu,
                                     spec.sideband_pages):
                    self.layout.add(syscalls.event_id(fd), spec.sched_layout(),
                                    EventRoute(BY_NAME["sched:sched_waking"], False))

    def _open(self, attr: abi.Attr, cpu: int, pages: int) -> list[int]:
        """``attr`` on ``cpu``, with a ring of ``pages``: for the CPU or the
        -i command, one event; attached (-p), one per thread, all writing
        into the first one's ring (a ring per thread would pass the locked
        memory an unprivileged user has). Its events."""
        if not self.spec.attach:
            return [self._opened(syscalls.perf_event_open(attr, self.spec.target_pid, cpu),
                                 pages)]
        fds: list[int] = []
        for tid in self.spec.tids:
            try:
                fd = syscalls.perf_event_open(attr, tid, cpu)
            except syscalls.PerfError as e:
                if e.errno == errno.ESRCH:
                    continue  # ended since it was listed
                raise
            if not fds:
                fds.append(self._opened(fd, pages))
                continue
            self.fds.append(fd)
            syscalls.set_output(fd, fds[0])
            fds.append(fd)
        if not fds:
            raise syscalls.PerfError(errno.ESRCH, "the processes attached to have ended")
        return fds

    def _opened(self, fd: int, pages: int) -> int:
        """Keep ``fd``, with a ring of its own."""
        self.fds.append(fd)
        self.rings.append(RingReader(fd, pages))
        return fd

    def watch(self, fd: int) -> None:
        """Also wake up when ``fd`` is readable (a signal wakeup pipe)."""
        self.poller.register(fd, select.POLLIN)
        self.extra_fds.append(fd)

    def enable(self) -> None:
        if not self.spec.enable_on_exec:
            for fd in self.fds:
                syscalls.enable(fd)

    def doorbell(self, on: bool) -> bool:
        """Wake ``wait`` when a task forks, exits or execs on this CPU (on),
        or not (off, the kernel then writes nothing to it); whether it now
        will. Switched on while the CPU is idle, off while it is busy."""
        if self.bell is None or on == self.bell_on:
            return self.bell_on
        fd, ring = self.bell
        try:
            if on:
                ring.skip()  # a full ring would stay silent
                syscalls.enable(fd)
                self.poller.register(fd, select.POLLIN)
            else:
                self.poller.unregister(fd)
                syscalls.disable(fd)
        except OSError:
            return self.bell_on
        self.bell_on = on
        return on

    def wait(self, timeout: float) -> None:
        try:
            ready = self.poller.poll(max(0, int(timeout * 1000)))
        except InterruptedError:
            return
        if self.bell is not None and self.bell_on:
            self.bell[1].skip()
        for fd, events in ready:
            if events & (select.POLLHUP | select.POLLERR) and fd not in self.extra_fds:
                # Its task has exited (-i): every poll would return at once
                # from now on. The ring is still read at every drain.
                self.poller.unregister(fd)

    def read(self) -> list[bytes | memoryview]:
        out: list[bytes | memoryview] = []
        for ring in self.rings:
            out += ring.read()
        return out

    def release(self) -> None:
        for ring in self.rings:
            ring.release()

    def close(self) -> None:
        for ring in self.rings:
            ring.close()
        for fd in self.fds:
            os.close(fd)
        self.rings, self.fds = [], []
        if self.bell is not None:
            fd, ring = self.bell
            ring.close()
            os.close(fd)
            self.bell = None


class ReplaySource:
    """Records from memory, in batches, through the EventSource interface."""

    def __init__(self, layout: SampleLayout | Layouts, batches: list[list[bytes]]) -> None:
        self.layout = layout if isinstance(layout, Layouts) else Layouts(layout)
        self.batches = list(batches)
        self.current: list[bytes] = []

    def wait(self, timeout: float) -> None:
        pass

    def read(self) -> list[bytes | memoryview]:
        self.current = self.batches.pop(0) if self.batches else []
        return list(self.current)

    def release(self) -> None:
        self.current = []

    def close(self) -> None:
        pass

    def doorbell(self, on: bool) -> bool:
        return False

    @property
    def exhausted(self) -> bool:
        return not self.batches


def ring_pages(frequency: int, record_bytes: int, privileged: bool, ncpus: int) -> int:
    """Data pages for one CPU's ring: room for about half a second of samples
    (the reader drains every 0.5 s, or earlier at the half-full watermark).

    Unprivileged users share kernel.perf_event_mlock_kb per CPU plus
    RLIMIT_MEMLOCK (8 MiB by default), so their rings stay small.
    """
    want = max(16, frequency * record_bytes // 2 // 4096)
    cap = 4096 if privileged else max(16, (6 << 20) // max(1, ncpus) // 4096)
    pages = 16
    while pages * 2 <= min(want, cap):
        pages *= 2
    return pages
