"""The perf records as named tuples, what decoding gives (``layout``
turns bytes into them). Fields and their order are those of
perf-event-abi.md sections 4 and 5. Which decoder a record type gets,
and which of the model's handlers takes it, is one table: ``routes.ROUTES``.
"""

from __future__ import annotations

from typing import NamedTuple, Union

from ..kernel import abi



class RecordError(ValueError):
    """A record is shorter than its header or layout says, or malformed.

    The only exception decoding raises: whatever bytes a ring holds, the
    collector counts the record as damaged and goes on."""


class Branch(NamedTuple):
    source: int
    target: int
    flags: int

    @property
    def type(self) -> int:
        return (self.flags >> abi.BRANCH_TYPE_SHIFT) & abi.BRANCH_TYPE_MASK

    @property
    def is_call(self) -> bool:
        return self.type in abi.CALL_BRANCH_TYPES


class Sample(NamedTuple):
    """A PERF_RECORD_SAMPLE. A NamedTuple, not a dataclass: thousands are
    made every second, and a tuple is built several times faster."""

    misc: int = abi.MISC_USER
    ip: int = 0
    pid: int = 0
    tid: int = 0
    time: int = 0
    addr: int = 0
    id: int = 0
    stream_id: int = 0
    cpu: int = 0
    period: int = 1
    callchain: tuple[int, ...] = ()
    raw: bytes = b""
    branches: tuple[Branch, ...] = ()
    branch_hw_index: int | None = None
    regs_abi: int = 0
    regs: tuple[int, ...] = ()
    stack: bytes | memoryview = b""
    weight: int = 0
    data_src: int = 0
    transaction: int = 0
    phys_addr: int = 0
    cgroup: int = 0

    @property
    def cpumode(self) -> int:
        return self.misc & abi.MISC_CPUMODE_MASK

    @property
    def in_kernel(self) -> bool:
        return self.cpumode in (abi.MISC_KERNEL, abi.MISC_GUEST_KERNEL)


# Records sort by ``order``, the time they were taken: a sample's own field
# (read at C speed: drains sort thousands), the sample_id's time for the others.
Sample.order = Sample.time  # type: ignore[attr-defined]


class SampleId(NamedTuple):
    """The ``sample_id_all`` trailer of a non-sample record."""

    pid: int = 0
    tid: int = 0
    time: int = 0
    id: int = 0
    cpu: int = 0


NO_ID = SampleId()


class Mmap(NamedTuple):
    """MMAP (type 1) and MMAP2 (type 10) records."""

    pid: int
    tid: int
    addr: int
    len: int
    pgoff: int
    filename: str
    maj: int = 0
    min: int = 0
    ino: int = 0
    ino_generation: int = 0
    build_id: bytes | None = None
    prot: int = 5
    flags: int = 2
    executable: bool = True
    sid: SampleId = NO_ID

    @property
    def order(self) -> int:
        return self.sid.time


class Comm(NamedTuple):
    pid: int
    tid: int
    comm: str
    exec: bool
    sid: SampleId = NO_ID
    # False for one made up from /proc (synthesize.py): its exec is when we
    # looked, not when the program began
    seen: bool = True

    @property
    def order(self) -> int:
        return self.sid.time


class Task(NamedTuple):
    """FORK (``fork`` True) and EXIT records."""

    fork: bool
    pid: int
    ppid: int
    tid: int
    ptid: int
    time: int
    sid: SampleId = NO_ID

    @property
    def order(self) -> int:
        return self.sid.time


class Lost(NamedTuple):
    """LOST (records dropped by a full ring) and LOST_SAMPLES."""

    lost: int
    id: int = 0
    sid: SampleId = NO_ID

    @property
    def order(self) -> int:
        return self.sid.time


class Throttle(NamedTuple):
    time: int
    id: int
    unthrottle: bool
    sid: SampleId = NO_ID

    @property
    def order(self) -> int:
        return self.sid.time


class Switch(NamedTuple):
    """SWITCH (type 14) and SWITCH_CPU_WIDE (type 15): the task the
    sample_id names is switched out of (``out``) or into this CPU. The
    CPU-wide form also names the task on the other side (the next one when
    switching out, the previous one when switching in); 0 without it."""

    out: bool
    preempt: bool  # switched out while still runnable (preempted, not blocked)
    next_prev_pid: int = 0
    next_prev_tid: int = 0
    sid: SampleId = NO_ID

    @property
    def order(self) -> int:
        return self.sid.time


class Cgroup(NamedTuple):
    """CGROUP (type 19): a cgroup's id (its cgroup2 inode number, what
    samples carry with PERF_SAMPLE_CGROUP) and its path from the root."""

    id: int
    path: str
    sid: SampleId = NO_ID

    @property
    def order(self) -> int:
        return self.sid.time


class Other(NamedTuple):
    type: int
    misc: int
    size: int

    @property
    def order(self) -> int:
        return 0  # never sorted among others: no time


Record = Union[Sample, Mmap, Comm, Task, Lost, Throttle, Switch, Cgroup, Other]


# The records of the scheduler's tracepoints (--off-cpu), made from a
# sample's raw fields by ``tracepoints.TRACEPOINT_ROUTES``.

class SchedSwitch(NamedTuple):
    """sched:sched_switch: ``prev_tid`` leaves its CPU in ``prev_state``,
    ``next_tid`` runs. ``sample`` carries the stack at the switch (the
    own CPU's event), or None (another CPU's, no stack)."""

    time: int
    cpu: int
    prev_tid: int
    prev_state: int
    next_tid: int
    next_comm: str
    sample: Sample | None

    @property
    def order(self) -> int:
        return self.time


class SchedWaking(NamedTuple):
    """sched:sched_waking (or sched_wakeup): ``tid`` is made runnable."""

    time: int
    tid: int

    @property
    def order(self) -> int:
        return self.time


def cstring(buf: bytes | memoryview, start: int, end: int) -> str:
    raw = bytes(buf[start:end])
    nul = raw.find(b"\0")
    return (raw if nul < 0 else raw[:nul]).decode("utf-8", "surrogateescape")


def split_callchain(chain: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """(kernel frames, user frames) of a callchain, markers removed.

    Guest frames are dropped; a trailing zero the kernel's frame-pointer
    walker leaves at the end of a user stack is dropped too.
    """
    kernel: list[int] = []
    user: list[int] = []
    current: list[int] | None = None
    for value in chain:
        if value >= abi.CONTEXT_MAX:
            current = kernel if value == abi.CONTEXT_KERNEL else \
                user if value == abi.CONTEXT_USER else None
            continue
        if current is not None:
            current.append(value)
    while user and user[-1] == 0:
        user.pop()
    return kernel, user
