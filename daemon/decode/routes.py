"""One routing table: perf record type -> decoder -> the model event it feeds.

Each ``Route`` names a record type number (enum perf_event_type in the
kernel's include/uapi/linux/perf_event.h), the function that turns its
bytes into a record (a named tuple), and the event the model takes it as: a
handler ``on_<event>`` that the collector or the task table implements. ``SampleLayout.decode`` finds decoders here, the
collector and ``TaskTable.apply`` find handlers through ``handlers``.
Adding a record type is one route, one decoder and one handler; a
tracepoint's samples (sched:sched_switch) are routed the same way by their
event id: ``tracepoints.TRACEPOINT_ROUTES``.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, NamedTuple

from ..kernel import abi
from .layout import SampleLayout
from .records import (Cgroup, Comm, Lost, Mmap, Record, RecordError, Sample, Switch, Task,
                      Throttle, cstring)

Decoder = Callable[[SampleLayout, "bytes | memoryview", int, int, int], Record]
"""(layout, record bytes, type, misc, size) -> record; the header is read."""


def _mmap2(layout: SampleLayout, rec: bytes | memoryview, type_: int, misc: int,
           size: int) -> Mmap:
    body_end, sid = layout.trailer(rec, type_, size)
    pid, tid, addr, length, pgoff = struct.unpack_from("<IIQQQ", rec, 8)
    build_id, maj, min_, ino, gen = None, 0, 0, 0, 0
    if misc & abi.MISC_MMAP_BUILD_ID:
        n = rec[40]
        build_id = bytes(rec[44:44 + min(n, 20)])
    else:
        maj, min_, ino, gen = struct.unpack_from("<IIQQ", rec, 40)
    prot, flags = struct.unpack_from("<II", rec, 64)
    return Mmap(pid, tid, addr, length, pgoff, cstring(rec, 72, body_end), maj, min_,
                ino, gen, build_id, prot, flags, not misc & abi.MISC_MMAP_DATA, sid)


def _mmap(layout: SampleLayout, rec: bytes | memoryview, type_: int, misc: int,
          size: int) -> Mmap:
    body_end, sid = layout.trailer(rec, type_, size)
    pid, tid, addr, length, pgoff = struct.unpack_from("<IIQQQ", rec, 8)
    return Mmap(pid, tid, addr, length, pgoff, cstring(rec, 40, body_end),
                executable=not misc & abi.MISC_MMAP_DATA, sid=sid)


def _comm(layout: SampleLayout, rec: bytes | memoryview, type_: int, misc: int,
          size: int) -> Comm:
    body_end, sid = layout.trailer(rec, type_, size)
    pid, tid = struct.unpack_from("<II", rec, 8)
    return Comm(pid, tid, cstring(rec, 16, body_end), bool(misc & abi.MISC_COMM_EXEC), sid)


def _task(layout: SampleLayout, rec: bytes | memoryview, type_: int, misc: int,
          size: int) -> Task:
    _end, sid = layout.trailer(rec, type_, size)
    pid, ppid, tid, ptid, time = struct.unpack_from("<IIIIQ", rec, 8)
    return Task(type_ == abi.RECORD_FORK, pid, ppid, tid, ptid, time, sid)


def _lost(layout: SampleLayout, rec: bytes | memoryview, type_: int, misc: int,
          size: int) -> Lost:
    _end, sid = layout.trailer(rec, type_, size)
    id_, lost = struct.unpack_from("<QQ", rec, 8)
    return Lost(lost, id_, sid)


def _lost_samples(layout: SampleLayout, rec: bytes | memoryview, type_: int, misc: int,
                  size: int) -> Lost:
    _end, sid = layout.trailer(rec, type_, size)
    return Lost(struct.unpack_from("<Q", rec, 8)[0], 0, sid)


def _throttle(layout: SampleLayout, rec: bytes | memoryview, type_: int, misc: int,
              size: int) -> Throttle:
    _end, sid = layout.trailer(rec, type_, size)
    time, id_ = struct.unpack_from("<QQ", rec, 8)
    return Throttle(time, id_, type_ == abi.RECORD_UNTHROTTLE, sid)


def _switch(layout: SampleLayout, rec: bytes | memoryview, type_: int, misc: int,
            size: int) -> Switch:
    body_end, sid = layout.trailer(rec, type_, size)
    pid = tid = 0
    if type_ == abi.RECORD_SWITCH_CPU_WIDE:
        if body_end < 16:
            raise RecordError("SWITCH_CPU_WIDE record without next_prev_pid/tid")
        pid, tid = struct.unpack_from("<II", rec, 8)
    return Switch(bool(misc & abi.MISC_SWITCH_OUT), bool(misc & abi.MISC_SWITCH_OUT_PREEMPT),
                  pid, tid, sid)


def _cgroup(layout: SampleLayout, rec: bytes | memoryview, type_: int, misc: int,
            size: int) -> Cgroup:
    body_end, sid = layout.trailer(rec, type_, size)
    if body_end < 16:
        raise RecordError("CGROUP record without its id")
    (id_,) = struct.unpack_from("<Q", rec, 8)
    return Cgroup(id_, cstring(rec, 16, body_end), sid)


class Route(NamedTuple):
    """How one record type reaches the model."""

    number: int  # abi.RECORD_*: the type in the record's header
    decode: Decoder
    record: type  # the named tuple ``decode`` returns
    event: str | None  # the model takes it as ``on_<event>``; None: decoded only


ROUTES: tuple[Route, ...] = (
    Route(abi.RECORD_SAMPLE, SampleLayout.sample_body, Sample, "sample"),
    Route(abi.RECORD_MMAP, _mmap, Mmap, "mmap"),
    Route(abi.RECORD_MMAP2, _mmap2, Mmap, "mmap"),
    Route(abi.RECORD_COMM, _comm, Comm, "comm"),
    Route(abi.RECORD_FORK, _task, Task, "task"),
    Route(abi.RECORD_EXIT, _task, Task, "task"),
    Route(abi.RECORD_LOST, _lost, Lost, "lost"),
    Route(abi.RECORD_LOST_SAMPLES, _lost_samples, Lost, "lost"),
    Route(abi.RECORD_THROTTLE, _throttle, Throttle, None),
    Route(abi.RECORD_UNTHROTTLE, _throttle, Throttle, None),
    Route(abi.RECORD_SWITCH, _switch, Switch, "switch"),
    Route(abi.RECORD_SWITCH_CPU_WIDE, _switch, Switch, "switch"),
    Route(abi.RECORD_CGROUP, _cgroup, Cgroup, "cgroup"),
)


def handlers(*models: object, complete: bool = True) -> dict[type, Callable[[Any], None]]:
    """Record class -> the bound ``on_<event>`` of the first of ``models``
    that has it, for every routed event. ``complete``: every event must find
    a handler (the collector); else events no model handles are left out."""
    out: dict[type, Callable[[Any], None]] = {}
    for route in ROUTES:
        if route.event is None:
            continue
        name = f"on_{route.event}"
        handler = next((getattr(m, name) for m in models if hasattr(m, name)), None)
        if handler is not None:
            out[route.record] = handler
        elif complete:
            raise TypeError(f"no model handles {name} (record type {route.number})")
    from .tracepoints import TRACEPOINT_ROUTES  # its records are decoded by records.py's
    for tp in TRACEPOINT_ROUTES:
        name = f"on_{tp.event}"
        handler = next((getattr(m, name) for m in models if hasattr(m, name)), None)
        if handler is not None:
            out[tp.record] = handler
    return out
