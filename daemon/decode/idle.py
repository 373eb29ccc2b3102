"""The idle task's samples, told from a sample's fixed prefix alone.

An idle CPU's cpu-clock still delivers one sample per period, of pid 0 in
kernel mode, with the same dozen frames of the idle loop each time. The
collector keeps them by their pc alone (docs/q-format.md 5.3), so nothing
after the prefix is read: a drain (drain.py) tells them by the unpack of
type and pid every record takes, and counts them without decoding them.
"""

from __future__ import annotations

import struct
import sys
from typing import Container, NamedTuple

from ..kernel import abi

_TYPED = struct.Struct("<IHHI")  # the stand-in of a layout that never matches: no pid
CANDIDATE = (abi.RECORD_SAMPLE, 0)  # (type, pid) of an idle-task sample's head

IdleSeen = dict[tuple[int, int], list[int]]
"""(ip, tid) -> [samples, weight] of one drain's idle-task samples."""


_KERNEL_MODES = (abi.MISC_KERNEL, abi.MISC_GUEST_KERNEL)


class IdleProbe(NamedTuple):
    """Where a layout's samples keep what tells and weighs an idle-task
    sample: the cpu-clock delivers about 100 of them a second per CPU on an
    idle machine, and decoding each whole (a callchain of a dozen frames,
    registers, the user-stack header) cost more than all else it does then.

    ``typed`` unpacks (record type, misc, size, pid): the one test every
    record takes, (RECORD_SAMPLE, 0) for a candidate of at least ``need``
    bytes, which ``match`` then checks whole."""

    need: int  # sys.maxsize: a layout without ip or pid, whose samples never match
    typed: struct.Struct  # (type, misc, size, pid) of a record of at least its size
    full: struct.Struct  # the header and the whole fixed prefix
    ident: int  # index in ``full``'s values; -1: no SAMPLE_IDENTIFIER
    ip: int
    tid: int
    period: int  # -1: no SAMPLE_PERIOD (weight 1)

    @staticmethod
    def of(fmt: str, names: list[str]) -> IdleProbe:
        """The probe for a prefix of struct format ``fmt`` (after "<") with
        field ``names``, one format character each."""
        full = struct.Struct("<IHH" + fmt[1:])
        if "ip" not in names or "pid" not in names:
            return IdleProbe(sys.maxsize, _TYPED, full, -1, 0, 0, -1)
        pid_at = 8 + struct.calcsize("<" + fmt[1:1 + names.index("pid")])
        at = {n: 3 + i for i, n in enumerate(names)}
        return IdleProbe(full.size, struct.Struct(f"<IHH{pid_at - 8}xI"), full,
                         at.get("identifier", -1), at["ip"], at["tid"], at.get("period", -1))

    def match(self, rec: bytes | memoryview, others: Container[int]) -> tuple[int, int, int] | None:
        """(ip, tid, weight) of an idle-task sample, or None: see
        SampleLayout.idle_sample."""
        if len(rec) < self.need:
            return None
        type_, _misc, _size, pid = self.typed.unpack_from(rec)
        if (type_, pid) != CANDIDATE:
            return None
        return self.weigh(rec, others)

    def weigh(self, rec: bytes | memoryview, others: Container[int]) -> tuple[int, int, int] | None:
        """``match`` of a candidate (a sample of pid 0, at least ``need``
        bytes long), whose head the caller has already unpacked."""
        v = self.full.unpack_from(rec)
        if not self.need <= v[2] <= len(rec) or \
                v[1] & abi.MISC_CPUMODE_MASK not in _KERNEL_MODES:
            return None  # decoded whole: told damaged, or taken the slow way
        if others and (self.ident < 0 or v[self.ident] in others):
            return None
        return v[self.ip], v[self.tid], (v[self.period] if self.period >= 0 else 1) or 1
