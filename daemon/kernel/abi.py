"""perf_event_open ABI: constants, the attr struct and the event table.

Pure data and packing only; the numbers are those of
../shared/reference/perf-event-abi.md (checked on this kind of machine).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

# attr.type
TYPE_HARDWARE = 0
TYPE_SOFTWARE = 1
TYPE_TRACEPOINT = 2
TYPE_HW_CACHE = 3
TYPE_RAW = 4

# sample_type bits
SAMPLE_IP = 1 << 0
SAMPLE_TID = 1 << 1
SAMPLE_TIME = 1 << 2
SAMPLE_ADDR = 1 << 3
SAMPLE_READ = 1 << 4
SAMPLE_CALLCHAIN = 1 << 5
SAMPLE_ID = 1 << 6
SAMPLE_CPU = 1 << 7
SAMPLE_PERIOD = 1 << 8
SAMPLE_STREAM_ID = 1 << 9
SAMPLE_RAW = 1 << 10
SAMPLE_BRANCH_STACK = 1 << 11
SAMPLE_REGS_USER = 1 << 12
SAMPLE_STACK_USER = 1 << 13
SAMPLE_WEIGHT = 1 << 14
SAMPLE_DATA_SRC = 1 << 15
SAMPLE_IDENTIFIER = 1 << 16
SAMPLE_TRANSACTION = 1 << 17
SAMPLE_REGS_INTR = 1 << 18
SAMPLE_PHYS_ADDR = 1 << 19
SAMPLE_AUX = 1 << 20
SAMPLE_CGROUP = 1 << 21
SAMPLE_DATA_PAGE_SIZE = 1 << 22
SAMPLE_CODE_PAGE_SIZE = 1 << 23
SAMPLE_WEIGHT_STRUCT = 1 << 24

# read_format bits
FORMAT_TOTAL_TIME_ENABLED = 1 << 0
FORMAT_TOTAL_TIME_RUNNING = 1 << 1
FORMAT_ID = 1 << 2
FORMAT_GROUP = 1 << 3
FORMAT_LOST = 1 << 4

# the flags word at offset 40
FLAG_DISABLED = 1 << 0
FLAG_INHERIT = 1 << 1
FLAG_EXCLUDE_USER = 1 << 4
FLAG_EXCLUDE_KERNEL = 1 << 5
FLAG_EXCLUDE_HV = 1 << 6
FLAG_EXCLUDE_IDLE = 1 << 7
FLAG_MMAP = 1 << 8
FLAG_COMM = 1 << 9
FLAG_FREQ = 1 << 10
FLAG_ENABLE_ON_EXEC = 1 << 12
FLAG_TASK = 1 << 13
FLAG_WATERMARK = 1 << 14
FLAG_SAMPLE_ID_ALL = 1 << 18
FLAG_EXCLUDE_CALLCHAIN_KERNEL = 1 << 21
FLAG_EXCLUDE_CALLCHAIN_USER = 1 << 22
FLAG_MMAP2 = 1 << 23
FLAG_COMM_EXEC = 1 << 24
FLAG_USE_CLOCKID = 1 << 25
FLAG_CONTEXT_SWITCH = 1 << 26  # PERF_RECORD_SWITCH(_CPU_WIDE)
FLAG_CGROUP = 1 << 32  # PERF_RECORD_CGROUP for cgroups made after the event opened
FLAG_INHERIT_THREAD = 1 << 35  # inherit only into new threads, not new processes (5.13+)

# branch_sample_type bits
BRANCH_USER = 1 << 0
BRANCH_KERNEL = 1 << 1
BRANCH_HV = 1 << 2
BRANCH_ANY = 1 << 3
BRANCH_ANY_CALL = 1 << 4
BRANCH_ANY_RETURN = 1 << 5
BRANCH_IND_CALL = 1 << 6
BRANCH_CALL_STACK = 1 << 11
BRANCH_CALL = 1 << 13
BRANCH_HW_INDEX = 1 << 17

# branch entry flags: type field, bits 20-23
BRANCH_TYPE_SHIFT = 20
BRANCH_TYPE_MASK = 0xF
BR_TYPE_CALL = 4
BR_TYPE_IND_CALL = 5
BR_TYPE_COND_CALL = 9
CALL_BRANCH_TYPES = frozenset({BR_TYPE_CALL, BR_TYPE_IND_CALL, BR_TYPE_COND_CALL})

# record types
RECORD_MMAP = 1
RECORD_LOST = 2
RECORD_COMM = 3
RECORD_EXIT = 4
RECORD_THROTTLE = 5
RECORD_UNTHROTTLE = 6
RECORD_FORK = 7
RECORD_READ = 8
RECORD_SAMPLE = 9
RECORD_MMAP2 = 10
RECORD_LOST_SAMPLES = 13
RECORD_SWITCH = 14
RECORD_SWITCH_CPU_WIDE = 15
RECORD_CGROUP = 19

# header.misc
MISC_CPUMODE_MASK = 7
MISC_KERNEL = 1
MISC_USER = 2
MISC_HYPERVISOR = 3
MISC_GUEST_KERNEL = 4
MISC_GUEST_USER = 5
MISC_MMAP_DATA = 1 << 13
MISC_COMM_EXEC = 1 << 13
MISC_MMAP_BUILD_ID = 1 << 14
MISC_SWITCH_OUT = 1 << 13  # SWITCH, SWITCH_CPU_WIDE
MISC_SWITCH_OUT_PREEMPT = 1 << 14

# callchain context markers (any value >= CONTEXT_MAX is a marker)
CONTEXT_HV = (1 << 64) - 32
CONTEXT_KERNEL = (1 << 64) - 128
CONTEXT_USER = (1 << 64) - 512
CONTEXT_GUEST = (1 << 64) - 2048
CONTEXT_GUEST_KERNEL = (1 << 64) - 2176
CONTEXT_GUEST_USER = (1 << 64) - 2560
CONTEXT_MAX = (1 << 64) - 4095

# ioctls
IOC_ENABLE = 0x2400
IOC_DISABLE = 0x2401
IOC_SET_OUTPUT = 0x2405
IOC_ID = 0x80082407

FD_CLOEXEC = 8
CLOCK_MONOTONIC = 1

ATTR_SIZE = 128  # VER7: every field used here, accepted by 6.x kernels
PAGE_SIZE = 4096

# sample_regs_user: AX..SS and R8..R15 on x86_64 (DS/ES/FS/GS are refused)
REGS_MASK_X86_64 = 0xFF0FFF


class EventSpec(NamedTuple):
    """A named event: what attr.type/config to ask for and in what units."""

    name: str
    type: int
    config: int
    unit: str  # "ns" (clock events), "cycles" or "events"

    @property
    def is_hardware(self) -> bool:
        return self.type in (TYPE_HARDWARE, TYPE_HW_CACHE, TYPE_RAW)


HARDWARE_EVENTS = {
    "cycles": 0, "instructions": 1, "cache-references": 2, "cache-misses": 3,
    "branches": 4, "branch-misses": 5, "bus-cycles": 6, "stalled-cycles-frontend": 7,
    "stalled-cycles-backend": 8, "ref-cycles": 9,
}
SOFTWARE_EVENTS = {
    "cpu-clock": 0, "task-clock": 1, "page-faults": 2, "context-switches": 3,
    "cpu-migrations": 4, "minor-faults": 5, "major-faults": 6, "alignment-faults": 7,
    "emulation-faults": 8,
}
ALIASES = {"cpu-cycles": "cycles", "branch-instructions": "branches", "faults": "page-faults",
           "cs": "context-switches", "migrations": "cpu-migrations"}


def builtin_event(name: str) -> EventSpec | None:
    """The hardware or software event called ``name`` (perf's spelling), or None."""
    name = ALIASES.get(name, name)
    if name in HARDWARE_EVENTS:
        unit = "cycles" if name in ("cycles", "ref-cycles", "bus-cycles") else "events"
        return EventSpec(name, TYPE_HARDWARE, HARDWARE_EVENTS[name], unit)
    if name in SOFTWARE_EVENTS:
        unit = "ns" if name in ("cpu-clock", "task-clock") else "events"
        return EventSpec(name, TYPE_SOFTWARE, SOFTWARE_EVENTS[name], unit)
    if len(name) > 1 and name[0] == "r":
        try:
            return EventSpec(name, TYPE_RAW, int(name[1:], 16), "events")
        except ValueError:
            return None
    return None


class Attr(NamedTuple):
    """The fields of perf_event_attr this collector sets."""

    type: int
    config: int
    sample: int  # period, or frequency when FLAG_FREQ is set
    sample_type: int
    flags: int
    read_format: int = 0
    wakeup: int = 0  # events, or bytes when FLAG_WATERMARK is set
    branch_sample_type: int = 0
    sample_regs_user: int = 0
    sample_stack_user: int = 0
    clockid: int = CLOCK_MONOTONIC
    sample_max_stack: int = 0

    def pack(self) -> bytes:
        buf = bytearray(ATTR_SIZE)
        struct.pack_into("<IIQQQQQ", buf, 0, self.type, ATTR_SIZE, self.config, self.sample,
                         self.sample_type, self.read_format, self.flags)
        struct.pack_into("<I", buf, 48, self.wakeup)
        struct.pack_into("<Q", buf, 56, 0)
        struct.pack_into("<QQQIi", buf, 64, 0, self.branch_sample_type, self.sample_regs_user,
                         self.sample_stack_user, self.clockid)
        struct.pack_into("<H", buf, 108, self.sample_max_stack)
        return bytes(buf)


def unpack_attr(data: bytes) -> Attr:
    """Inverse of ``Attr.pack`` (for tests and diagnostics)."""
    type_, _size, config, sample, sample_type, read_format, flags = struct.unpack_from(
        "<IIQQQQQ", data, 0)
    (wakeup,) = struct.unpack_from("<I", data, 48)
    _c2, branch, regs, stack, clockid = struct.unpack_from("<QQQIi", data, 64)
    (max_stack,) = struct.unpack_from("<H", data, 108)
    return Attr(type_, config, sample, sample_type, flags, read_format, wakeup, branch, regs,
                stack, clockid, max_stack)
