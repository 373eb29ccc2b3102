"""The inverse of ``records``: build the bytes of records.

Used by tests (round-trip every sample field) and to replay synthetic
streams through the collector without the kernel, for what this machine
cannot produce (branch stacks, hardware events, lost records on demand).
"""

from __future__ import annotations

import struct

from ..kernel import abi
from .layout import SampleLayout
from .records import Cgroup, Comm, Lost, Mmap, Sample, SampleId, Switch, Task, Throttle

NO_ID = SampleId()


def _record(type_: int, misc: int, body: bytes) -> bytes:
    if len(body) % 8:
        body += b"\0" * (8 - len(body) % 8)
    return struct.pack("<IHH", type_, misc, 8 + len(body)) + body


def _cstr(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogateescape") + b"\0"
    return raw + b"\0" * (-len(raw) % 8)


def encode_id(layout: SampleLayout, sid: SampleId) -> bytes:
    if not layout.sample_id_all:
        return b""
    out = b""
    st = layout.sample_type
    if st & abi.SAMPLE_TID:
        out += struct.pack("<II", sid.pid, sid.tid)
    if st & abi.SAMPLE_TIME:
        out += struct.pack("<Q", sid.time)
    if st & abi.SAMPLE_ID:
        out += struct.pack("<Q", sid.id)
    if st & abi.SAMPLE_STREAM_ID:
        out += struct.pack("<Q", sid.id)
    if st & abi.SAMPLE_CPU:
        out += struct.pack("<II", sid.cpu, 0)
    if st & abi.SAMPLE_IDENTIFIER:
        out += struct.pack("<Q", sid.id)
    return out


def encode_sample(layout: SampleLayout, s: Sample) -> bytes:
    st = layout.sample_type
    out = b""
    if st & abi.SAMPLE_IDENTIFIER:
        out += struct.pack("<Q", s.id)
    if st & abi.SAMPLE_IP:
        out += struct.pack("<Q", s.ip)
    if st & abi.SAMPLE_TID:
        out += struct.pack("<II", s.pid, s.tid)
    if st & abi.SAMPLE_TIME:
        out += struct.pack("<Q", s.time)
    if st & abi.SAMPLE_ADDR:
        out += struct.pack("<Q", s.addr)
    if st & abi.SAMPLE_ID:
        out += struct.pack("<Q", s.id)
    if st & abi.SAMPLE_STREAM_ID:
        out += struct.pack("<Q", s.stream_id)
    if st & abi.SAMPLE_CPU:
        out += struct.pack("<II", s.cpu, 0)
    if st & abi.SAMPLE_PERIOD:
        out += struct.pack("<Q", s.period)
    if st & abi.SAMPLE_READ:
        out += b"\0" * layout.read_size()
    if st & abi.SAMPLE_CALLCHAIN:
        out += struct.pack(f"<Q{len(s.callchain)}Q", len(s.callchain), *s.callchain)
    if st & abi.SAMPLE_RAW:
        out += struct.pack("<I", len(s.raw)) + s.raw
    if st & abi.SAMPLE_BRANCH_STACK:
        out += struct.pack("<Q", len(s.branches))
        if layout.branch_sample_type & abi.BRANCH_HW_INDEX:
            out += struct.pack("<Q", s.branch_hw_index or 0)
        for b in s.branches:
            out += struct.pack("<QQQ", b.source, b.target, b.flags)
    if st & abi.SAMPLE_REGS_USER:
        out += struct.pack("<Q", s.regs_abi)
        if s.regs_abi:
            if len(s.regs) != layout.regs_user_mask.bit_count():
                raise ValueError(f"{len(s.regs)} registers for a mask of "
                                 f"{layout.regs_user_mask.bit_count()}")
            out += struct.pack(f"<{len(s.regs)}Q", *s.regs)
    if st & abi.SAMPLE_STACK_USER:
        stack = bytes(s.stack)
        if stack:
            padded = stack + b"\0" * (-len(stack) % 8)
            out += struct.pack("<Q", len(padded)) + padded + struct.pack("<Q", len(stack))
        else:
            out += struct.pack("<Q", 0)
    if st & (abi.SAMPLE_WEIGHT | abi.SAMPLE_WEIGHT_STRUCT):
        out += struct.pack("<Q", s.weight)
    if st & abi.SAMPLE_DATA_SRC:
        out += struct.pack("<Q", s.data_src)
    if st & abi.SAMPLE_TRANSACTION:
        out += struct.pack("<Q", s.transaction)
    if st & abi.SAMPLE_REGS_INTR:
        out += struct.pack("<Q", 0)
    if st & abi.SAMPLE_PHYS_ADDR:
        out += struct.pack("<Q", s.phys_addr)
    if st & abi.SAMPLE_CGROUP:
        out += struct.pack("<Q", s.cgroup)
    return _record(abi.RECORD_SAMPLE, s.misc, out)


def encode_mmap2(layout: SampleLayout, m: Mmap) -> bytes:
    misc = abi.MISC_USER | (0 if m.executable else abi.MISC_MMAP_DATA)
    head = struct.pack("<IIQQQ", m.pid, m.tid, m.addr, m.len, m.pgoff)
    if m.build_id is not None:
        misc |= abi.MISC_MMAP_BUILD_ID
        ident = struct.pack("<B3x", len(m.build_id)) + m.build_id.ljust(20, b"\0")
    else:
        ident = struct.pack("<IIQQ", m.maj, m.min, m.ino, m.ino_generation)
    body = head + ident + struct.pack("<II", m.prot, m.flags) + _cstr(m.filename)
    return _record(abi.RECORD_MMAP2, misc, body + encode_id(layout, m.sid))


def encode_comm(layout: SampleLayout, c: Comm) -> bytes:
    misc = abi.MISC_USER | (abi.MISC_COMM_EXEC if c.exec else 0)
    body = struct.pack("<II", c.pid, c.tid) + _cstr(c.comm)
    return _record(abi.RECORD_COMM, misc, body + encode_id(layout, c.sid))


def encode_task(layout: SampleLayout, t: Task) -> bytes:
    type_ = abi.RECORD_FORK if t.fork else abi.RECORD_EXIT
    body = struct.pack("<IIIIQ", t.pid, t.ppid, t.tid, t.ptid, t.time)
    return _record(type_, 0, body + encode_id(layout, t.sid))


def encode_lost(layout: SampleLayout, lost: Lost) -> bytes:
    return _record(abi.RECORD_LOST, 0,
                   struct.pack("<QQ", lost.id, lost.lost) + encode_id(layout, lost.sid))


def encode_lost_samples(layout: SampleLayout, lost: Lost) -> bytes:
    return _record(abi.RECORD_LOST_SAMPLES, 0,
                   struct.pack("<Q", lost.lost) + encode_id(layout, lost.sid))


def encode_throttle(layout: SampleLayout, t: Throttle) -> bytes:
    type_ = abi.RECORD_UNTHROTTLE if t.unthrottle else abi.RECORD_THROTTLE
    return _record(type_, 0, struct.pack("<QQQ", t.time, t.id, 0) + encode_id(layout, t.sid))


def encode_switch(layout: SampleLayout, s: Switch, cpu_wide: bool = True) -> bytes:
    """SWITCH_CPU_WIDE (what a CPU-wide event gets), or SWITCH without the
    next/prev task."""
    misc = (abi.MISC_SWITCH_OUT if s.out else 0) | \
        (abi.MISC_SWITCH_OUT_PREEMPT if s.preempt else 0)
    if not cpu_wide:
        return _record(abi.RECORD_SWITCH, misc, encode_id(layout, s.sid))
    body = struct.pack("<II", s.next_prev_pid, s.next_prev_tid)
    return _record(abi.RECORD_SWITCH_CPU_WIDE, misc, body + encode_id(layout, s.sid))


def encode_cgroup(layout: SampleLayout, c: Cgroup) -> bytes:
    body = struct.pack("<Q", c.id) + _cstr(c.path)
    return _record(abi.RECORD_CGROUP, 0, body + encode_id(layout, c.sid))
