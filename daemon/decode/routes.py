"""One routing table: perf record type -> decoder -> the handler it feeds.

Each ``Route`` names a record type number (enum perf_event_type in the
kernel's include/uapi/linux/perf_event.h), the function that turns its
bytes into a record (a named tuple), and which of the model's ``Handlers``
takes it. ``SampleLayout.decode`` finds decoders here; a collector makes
one ``Handlers`` of its parts' bound methods (every field required), and
``drain.dispatch`` turns it into the record class -> handler table its
drains use. Adding a record type is one route, one decoder, one field of
``Handlers`` and the method the collector names there; a tracepoint's
samples (sched:sched_switch) are routed the same way by their event id:
``tracepoints.TRACEPOINT_ROUTES``.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, NamedTuple, Protocol

from ..kernel import abi
from .records import (Cgroup, Comm, Lost, Mmap, Record, RecordError, Sample, SampleId,
                      SchedSwitch, SchedWaking, Switch, Task, Throttle, cstring)


class RecordLayout(Protocol):
    """What a decoder reads a record with: ``layout.SampleLayout``."""

    def trailer(self, rec: bytes | memoryview, type_: int, size: int) -> tuple[int, SampleId]:
        ...

    def sample_body(self, rec: bytes | memoryview, type_: int, misc: int, size: int) -> Sample:
        ...


Decoder = Callable[[RecordLayout, "bytes | memoryview", int, int, int], Record]
"""(layout, record bytes, type, misc, size) -> record; the header is read."""

Handler = Callable[[Any], None]


class Handlers(NamedTuple):
    """The model's handler of each kind of record a drain hands on, a
    field each and none optional: a collector that leaves one out fails
    as it is made (and under mypy), not by dropping those records."""

    sample: Callable[[Sample], None]
    mmap: Callable[[Mmap], None]
    comm: Callable[[Comm], None]
    task: Callable[[Task], None]
    lost: Callable[[Lost], None]
    switch: Callable[[Switch], None]
    cgroup: Callable[[Cgroup], None]
    sched_switch: Callable[[SchedSwitch], None]
    sched_waking: Callable[[SchedWaking], None]


def _sample(layout: RecordLayout, rec: bytes | memoryview, type_: int, misc: int,
            size: int) -> Sample:
    # each layout binds its own (SampleLayout.sample_body, or one compiled for it)
    return layout.sample_body(rec, type_, misc, size)


def _mmap2(layout: RecordLayout, rec: bytes | memoryview, type_: int, misc: int,
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


def _mmap(layout: RecordLayout, rec: bytes | memoryview, type_: int, misc: int,
          size: int) -> Mmap:
    body_end, sid = layout.trailer(rec, type_, size)
    pid, tid, addr, length, pgoff = struct.unpack_from("<IIQQQ", rec, 8)
    return Mmap(pid, tid, addr, length, pgoff, cstring(rec, 40, body_end),
                executable=not misc & abi.MISC_MMAP_DATA, sid=sid)


def _comm(layout: RecordLayout, rec: bytes | memoryview, type_: int, misc: int,
          size: int) -> Comm:
    body_end, sid = layout.trailer(rec, type_, size)
    pid, tid = struct.unpack_from("<II", rec, 8)
    return Comm(pid, tid, cstring(rec, 16, body_end), bool(misc & abi.MISC_COMM_EXEC), sid)


def _task(layout: RecordLayout, rec: bytes | memoryview, type_: int, misc: int,
          size: int) -> Task:
    _end, sid = layout.trailer(rec, type_, size)
    pid, ppid, tid, ptid, time = struct.unpack_from("<IIIIQ", rec, 8)
    return Task(type_ == abi.RECORD_FORK, pid, ppid, tid, ptid, time, sid)


def _lost(layout: RecordLayout, rec: bytes | memoryview, type_: int, misc: int,
          size: int) -> Lost:
    _end, sid = layout.trailer(rec, type_, size)
    id_, lost = struct.unpack_from("<QQ", rec, 8)
    return Lost(lost, id_, sid)


def _lost_samples(layout: RecordLayout, rec: bytes | memoryview, type_: int, misc: int,
                  size: int) -> Lost:
    _end, sid = layout.trailer(rec, type_, size)
    return Lost(struct.unpack_from("<Q", rec, 8)[0], 0, sid)


def _throttle(layout: RecordLayout, rec: bytes | memoryview, type_: int, misc: int,
              size: int) -> Throttle:
    _end, sid = layout.trailer(rec, type_, size)
    time, id_ = struct.unpack_from("<QQ", rec, 8)
    return Throttle(time, id_, type_ == abi.RECORD_UNTHROTTLE, sid)


def _switch(layout: RecordLayout, rec: bytes | memoryview, type_: int, misc: int,
            size: int) -> Switch:
    body_end, sid = layout.trailer(rec, type_, size)
    pid = tid = 0
    if type_ == abi.RECORD_SWITCH_CPU_WIDE:
        if body_end < 16:
            raise RecordError("SWITCH_CPU_WIDE record without next_prev_pid/tid")
        pid, tid = struct.unpack_from("<II", rec, 8)
    return Switch(bool(misc & abi.MISC_SWITCH_OUT), bool(misc & abi.MISC_SWITCH_OUT_PREEMPT),
                  pid, tid, sid)


def _cgroup(layout: RecordLayout, rec: bytes | memoryview, type_: int, misc: int,
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
    handler: Callable[[Handlers], Handler] | None  # the one that takes it; None: decoded only


ROUTES: tuple[Route, ...] = (
    Route(abi.RECORD_SAMPLE, _sample, Sample, lambda h: h.sample),
    Route(abi.RECORD_MMAP, _mmap, Mmap, lambda h: h.mmap),
    Route(abi.RECORD_MMAP2, _mmap2, Mmap, lambda h: h.mmap),
    Route(abi.RECORD_COMM, _comm, Comm, lambda h: h.comm),
    Route(abi.RECORD_FORK, _task, Task, lambda h: h.task),
    Route(abi.RECORD_EXIT, _task, Task, lambda h: h.task),
    Route(abi.RECORD_LOST, _lost, Lost, lambda h: h.lost),
    Route(abi.RECORD_LOST_SAMPLES, _lost_samples, Lost, lambda h: h.lost),
    Route(abi.RECORD_THROTTLE, _throttle, Throttle, None),
    Route(abi.RECORD_UNTHROTTLE, _throttle, Throttle, None),
    Route(abi.RECORD_SWITCH, _switch, Switch, lambda h: h.switch),
    Route(abi.RECORD_SWITCH_CPU_WIDE, _switch, Switch, lambda h: h.switch),
    Route(abi.RECORD_CGROUP, _cgroup, Cgroup, lambda h: h.cgroup),
)
