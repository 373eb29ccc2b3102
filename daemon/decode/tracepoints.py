"""Samples of several events in one collector: each event's layout and
route by its id.

Every event the collector opens has ``PERF_SAMPLE_IDENTIFIER``: a sample
carries its event's id first (offset 8), every other record last (the
``sample_id_all`` trailer). ``Layouts`` picks the event's ``SampleLayout``
by that id, and ``TRACEPOINT_ROUTES`` turns a tracepoint sample's raw
fields into a record (``records.SchedSwitch``, ``records.SchedWaking``)
and names which of the model's ``routes.Handlers`` takes it, as
``routes.ROUTES`` does for record types. Raw field offsets are those of
``/sys/kernel/tracing/events/sched/*/format`` (stable since 4.x on
64-bit machines; ``prev_state`` is a ``long``).
"""

from __future__ import annotations

import struct
from typing import Callable, NamedTuple

from ..kernel import abi
from .layout import SampleLayout
from .records import Record, RecordError, Sample, SchedSwitch, SchedWaking
from .routes import Handler, Handlers

_HEADER = struct.Struct("<IHH")
_U64 = struct.Struct("<Q")


def _comm(raw: bytes, off: int) -> str:
    return raw[off:off + 16].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _switch(s: Sample, with_stack: bool) -> SchedSwitch:
    raw = s.raw
    if len(raw) < 64:
        raise RecordError("sched_switch sample without its raw fields")
    prev_pid, = struct.unpack_from("<i", raw, 24)
    prev_state, = struct.unpack_from("<q", raw, 32)
    next_pid, = struct.unpack_from("<i", raw, 56)
    return SchedSwitch(s.time, s.cpu, prev_pid, prev_state, next_pid, _comm(raw, 40),
                       s if with_stack else None)


def _waking(s: Sample, with_stack: bool) -> SchedWaking:
    if len(s.raw) < 28:
        raise RecordError("sched_waking sample without its raw fields")
    return SchedWaking(s.time, struct.unpack_from("<i", s.raw, 24)[0])


class TracepointRoute(NamedTuple):
    name: str  # SYSTEM:EVENT
    decode: Callable[[Sample, bool], "SchedSwitch | SchedWaking"]
    record: type
    handler: Callable[[Handlers], Handler]  # which of the model's handlers takes it


TRACEPOINT_ROUTES: tuple[TracepointRoute, ...] = (
    TracepointRoute("sched:sched_switch", _switch, SchedSwitch, lambda h: h.sched_switch),
    TracepointRoute("sched:sched_waking", _waking, SchedWaking, lambda h: h.sched_waking),
    TracepointRoute("sched:sched_wakeup", _waking, SchedWaking, lambda h: h.sched_waking),
)
BY_NAME = {r.name: r for r in TRACEPOINT_ROUTES}


class EventRoute(NamedTuple):
    """What the collector knows of one opened event, by its id."""

    route: TracepointRoute
    with_stack: bool


class Layouts:
    """The main event's layout, plus one per extra event id.

    Duck-types ``SampleLayout`` for the collector: ``decode`` and
    ``sample_type`` (the main event's)."""

    def __init__(self, main: SampleLayout) -> None:
        self.main = main
        self.sample_type = main.sample_type
        self.by_id: dict[int, SampleLayout] = {}
        self.routes: dict[int, EventRoute] = {}

    def add(self, event_id: int, layout: SampleLayout, route: EventRoute) -> None:
        self.by_id[event_id] = layout
        self.routes[event_id] = route

    def decode(self, rec: bytes | memoryview) -> Record | SchedSwitch | SchedWaking:
        if not self.by_id:
            return self.main.decode(rec)
        if len(rec) < 16:
            return self.main.decode(rec)  # says what is wrong with it
        type_, _misc, size = _HEADER.unpack_from(rec, 0)
        if size > len(rec) or size < 16:
            return self.main.decode(rec)
        at = 8 if type_ == abi.RECORD_SAMPLE else size - 8
        event_id = _U64.unpack_from(rec, at)[0]
        layout = self.by_id.get(event_id, self.main)
        out = layout.decode(rec)
        er = self.routes.get(event_id)
        if er is not None and type(out) is Sample:
            return er.route.decode(out, er.with_stack)
        return out

    def idle_sample(self, rec: bytes | memoryview) -> tuple[int, int, int] | None:
        """``SampleLayout.idle_sample`` of the main event's samples only: an
        extra event's (a sched_switch from the idle task) is routed by its id."""
        return self.main.idle_sample(rec, self.by_id)

    def __getattr__(self, name: str) -> object:
        return getattr(self.main, name)
