"""A drain's records decoded in one pass.

Each record's type, misc, size and pid come in one unpack (IdleProbe.typed):
the idle task's samples are counted from their prefix without being
decoded (idle.py), the sampling event's other samples go straight to its
layout's sample decoder, and every other record through ``Layouts.decode``
(routes.ROUTES; an extra event's samples by their id). The same records
come out as from asking each record ``Layouts.idle_sample`` and decoding
the others one by one, a unit test checks. ``dispatch`` says which of a
collector's handlers takes each record that comes out.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Sequence

from ..kernel import abi
from .idle import IdleSeen
from .records import Record, RecordError, SchedSwitch, SchedWaking
from .routes import ROUTES, Handler, Handlers
from .tracepoints import TRACEPOINT_ROUTES, Layouts


class Drained(NamedTuple):
    records: list[Record | SchedSwitch | SchedWaking]  # in ring order
    idle: IdleSeen  # the idle task's samples, by (ip, tid)
    damaged: int  # records that could not be decoded


def decode_drain(raw: Sequence[bytes | memoryview], layouts: Layouts) -> Drained:
    """The records of ``raw`` (as the ring hands them over), decoded in
    ring order, but the idle task's samples counted; damage counted too."""
    main, others = layouts.main, layouts.by_id
    probe = main.idle_probe
    need, typed, weigh = probe.need, probe.typed.unpack_from, probe.weigh
    least = probe.typed.size
    # with extra events a sample's layout is its event's: Layouts.decode finds it
    sample = None if others else main.sample_decoder
    decode = layouts.decode if others else main.decode
    out: list[Record | SchedSwitch | SchedWaking] = []
    keep = out.append
    seen: IdleSeen = {}
    damaged = 0
    for data in raw:
        n = len(data)
        if n >= least:
            type_, misc, size, pid = typed(data)
            if type_ == abi.RECORD_SAMPLE:
                if pid == 0 and n >= need:
                    hit = weigh(data, others)
                    if hit is not None:
                        counts = seen.get(hit[:2])
                        if counts is None:
                            seen[hit[:2]] = [1, hit[2]]
                        else:
                            counts[0] += 1
                            counts[1] += hit[2]
                        continue
                if sample is not None and 8 <= size <= n:
                    try:
                        keep(sample(data, type_, misc, size))
                    except (RecordError, struct.error, IndexError):
                        damaged += 1
                    continue
        try:
            keep(decode(data))
        except RecordError:
            damaged += 1
    return Drained(out, seen, damaged)


def dispatch(handlers: Handlers) -> dict[type, Handler]:
    """Record class -> the one of ``handlers`` that takes it, for every
    record a drain hands on: those ``routes.ROUTES`` gives a handler and
    the tracepoints' (``tracepoints.TRACEPOINT_ROUTES``)."""
    out = {r.record: r.handler(handlers) for r in ROUTES if r.handler is not None}
    out.update((t.record, t.handler(handlers)) for t in TRACEPOINT_ROUTES)
    return out
