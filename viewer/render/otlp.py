"""``--format otlp``: OpenTelemetry's profiles signal, a serialized
``ProfilesData`` of the ``opentelemetry.proto.profiles.v1development``
messages, written with the ``opentelemetry-proto`` package's generated
classes (the signal is still in development: pyproject.toml pins the
package's releases whose messages these are).

One ``ResourceProfiles`` per host (``host.name``), one scope (q-tools),
two profiles over the same samples: the event (nanoseconds for a clock)
first, as a viewer shows ``profiles[0]`` by default, then the sample
counts (time off the CPU, ``--event off-cpu|cpu-wait|wall``, has none:
one profile). Every table of the shared dictionary starts with its zero value,
so an index is the table index plus one and 0 means "none". Per sample:
``process.executable.name`` (the comm), ``process.pid``,
``cpu.logical_number``, and where the set has per-thread data
``thread.id`` and ``thread.name`` (semantic conventions, as the OTel eBPF
profiler writes them); build-ids go on mappings as
``process.executable.build_id.gnu``.
"""

from __future__ import annotations

import os
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from qtools.common.version import package_version

from ..profile.export import Labels, Strings, Tables

SCOPE = "q-tools"
BUILD_ID = "process.executable.build_id.gnu"


class _Attributes:
    """The dictionary's attribute table: each (key, value) once, the zero value first."""

    def __init__(self, d: Any, strings: Strings) -> None:
        self.d = d
        self.strings = strings
        self.index: dict[tuple[str, str | int], int] = {}
        d.attribute_table.add()

    def __call__(self, key: str, value: str | int) -> int:
        i = self.index.get((key, value))
        if i is None:
            i = self.index[(key, value)] = len(self.d.attribute_table)
            v = (AnyValue(int_value=value) if isinstance(value, int)
                 else AnyValue(string_value=value))
            self.d.attribute_table.add(key_strindex=self.strings(key), value=v)
        return i


def message(t: Tables) -> Any:
    """The ProfilesData of ``t``."""
    data = pb.ProfilesData()
    d = data.dictionary
    s = Strings()
    attribute = _Attributes(d, s)
    for table in (d.mapping_table, d.location_table, d.function_table, d.link_table,
                  d.stack_table):
        table.add()
    for m in t.mappings:
        d.mapping_table.add(memory_start=m.start, memory_limit=m.limit, file_offset=m.offset,
                            filename_strindex=s(m.file),
                            attribute_indices=[attribute(BUILD_ID, m.build_id)]
                            if m.build_id else [])
    for f in t.functions:
        d.function_table.add(name_strindex=s(f.name), system_name_strindex=s(f.name),
                             filename_strindex=s(f.filename))
    for loc in t.locations:
        entry = d.location_table.add(address=loc.address,
                                     mapping_index=0 if loc.mapping is None else loc.mapping + 1)
        for function, line in loc.lines or ((loc.function, 0),):  # innermost first
            entry.lines.add(function_index=function + 1, line=line)
    stacks: dict[tuple[int, ...], int] = {}
    for sample in t.samples:
        if sample.locations not in stacks:
            stacks[sample.locations] = len(d.stack_table)
            d.stack_table.add(location_indices=[i + 1 for i in sample.locations])
    attributes = [_sample_attributes(attribute, lb) for lb in t.labels]
    by_host: dict[str | None, list[int]] = {}
    for i, sample in enumerate(t.samples):
        by_host.setdefault(t.labels[sample.labels].host, []).append(i)
    for host, members in by_host.items():
        resource = Resource(attributes=[KeyValue(key="host.name",
                                                 value=AnyValue(string_value=host))]
                            if host else [])
        scope = data.resource_profiles.add(resource=resource).scope_profiles.add(
            scope=InstrumentationScope(name=SCOPE, version=package_version()))
        # each metric's profile first, the sample count's last
        values = sorted(enumerate(t.types), key=lambda iv: iv[1] == ("samples", "count"))
        for which, (value_type, unit) in values:
            p = scope.profiles.add(profile_id=os.urandom(16))
            p.sample_type.type_strindex = s(value_type)
            p.sample_type.unit_strindex = s(unit)
            p.period_type.type_strindex = s(t.period_type[0])
            p.period_type.unit_strindex = s(t.period_type[1])
            if t.period:
                p.period = t.period
            if t.time_nanos is not None:
                p.time_unix_nano = t.time_nanos
            if t.duration_nanos is not None:
                p.duration_nano = t.duration_nanos
            for i in members:
                sample = t.samples[i]
                value = sample.values[which]
                if value:
                    p.samples.add(stack_index=stacks[sample.locations], values=[value],
                                  attribute_indices=attributes[sample.labels])
    d.string_table.extend(s.table)
    return data


def _sample_attributes(attribute: _Attributes, lb: Labels) -> list[int]:
    out = []
    if lb.comm:
        out.append(attribute("process.executable.name", lb.comm))
    if lb.pid is not None:
        out.append(attribute("process.pid", lb.pid))
    if lb.cpu is not None:
        out.append(attribute("cpu.logical_number", lb.cpu))
    if lb.tid is not None:
        out.append(attribute("thread.id", lb.tid))
    if lb.thread:
        out.append(attribute("thread.name", lb.thread))
    if lb.container:
        out.append(attribute("container.id", lb.container))  # a semantic convention
    if lb.unit:
        out.append(attribute("systemd.unit", lb.unit))  # none exists for it: q-tools' name
    return out


def encode(t: Tables) -> bytes:
    return bytes(message(t).SerializeToString())
