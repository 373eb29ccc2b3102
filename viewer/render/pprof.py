"""``--format pprof``: a gzip-compressed profile.proto, as pprof, Pyroscope
and Parca read it.

The message definition is made here, at import, from the published
schema's field numbers (google/pprof, proto/profile.proto) and turned into
classes by the ``protobuf`` library: no protoc step, and the encoding is the
library's. Only the fields written are declared; a reader ignores none it
needs (the rest are optional in the schema).

Ids of mappings, locations and functions are their table index plus one
(0 means "none" in profile.proto); the string table is deduplicated, with
"" first as the schema requires.

Labels are strings (comm, pid, cpu, host, unit, container, and the thread's
name as ``thread``), as Pyroscope and Parca take them, except the thread id:
a number, ``thread_id``, the key profile.proto's comments use for it.
"""

from __future__ import annotations

import gzip
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from ..profile.export import Strings, Tables

PACKAGE = "perftools.profiles"
_F = descriptor_pb2.FieldDescriptorProto

# (message, [(field, number, type, repeated, message type)]): profile.proto's numbers
_SCHEMA: list[tuple[str, list[tuple[str, int, int, bool, str]]]] = [
    ("Profile", [("sample_type", 1, _F.TYPE_MESSAGE, True, "ValueType"),
                 ("sample", 2, _F.TYPE_MESSAGE, True, "Sample"),
                 ("mapping", 3, _F.TYPE_MESSAGE, True, "Mapping"),
                 ("location", 4, _F.TYPE_MESSAGE, True, "Location"),
                 ("function", 5, _F.TYPE_MESSAGE, True, "Function"),
                 ("string_table", 6, _F.TYPE_STRING, True, ""),
                 ("drop_frames", 7, _F.TYPE_INT64, False, ""),
                 ("keep_frames", 8, _F.TYPE_INT64, False, ""),
                 ("time_nanos", 9, _F.TYPE_INT64, False, ""),
                 ("duration_nanos", 10, _F.TYPE_INT64, False, ""),
                 ("period_type", 11, _F.TYPE_MESSAGE, False, "ValueType"),
                 ("period", 12, _F.TYPE_INT64, False, ""),
                 ("comment", 13, _F.TYPE_INT64, True, ""),
                 ("default_sample_type", 14, _F.TYPE_INT64, False, "")]),
    ("ValueType", [("type", 1, _F.TYPE_INT64, False, ""),
                   ("unit", 2, _F.TYPE_INT64, False, "")]),
    ("Sample", [("location_id", 1, _F.TYPE_UINT64, True, ""),
                ("value", 2, _F.TYPE_INT64, True, ""),
                ("label", 3, _F.TYPE_MESSAGE, True, "Label")]),
    ("Label", [("key", 1, _F.TYPE_INT64, False, ""),
               ("str", 2, _F.TYPE_INT64, False, ""),
               ("num", 3, _F.TYPE_INT64, False, ""),
               ("num_unit", 4, _F.TYPE_INT64, False, "")]),
    ("Mapping", [("id", 1, _F.TYPE_UINT64, False, ""),
                 ("memory_start", 2, _F.TYPE_UINT64, False, ""),
                 ("memory_limit", 3, _F.TYPE_UINT64, False, ""),
                 ("file_offset", 4, _F.TYPE_UINT64, False, ""),
                 ("filename", 5, _F.TYPE_INT64, False, ""),
                 ("build_id", 6, _F.TYPE_INT64, False, ""),
                 ("has_functions", 7, _F.TYPE_BOOL, False, ""),
                 ("has_filenames", 8, _F.TYPE_BOOL, False, ""),
                 ("has_line_numbers", 9, _F.TYPE_BOOL, False, ""),
                 ("has_inline_frames", 10, _F.TYPE_BOOL, False, "")]),
    ("Location", [("id", 1, _F.TYPE_UINT64, False, ""),
                  ("mapping_id", 2, _F.TYPE_UINT64, False, ""),
                  ("address", 3, _F.TYPE_UINT64, False, ""),
                  ("line", 4, _F.TYPE_MESSAGE, True, "Line"),
                  ("is_folded", 5, _F.TYPE_BOOL, False, "")]),
    ("Line", [("function_id", 1, _F.TYPE_UINT64, False, ""),
              ("line", 2, _F.TYPE_INT64, False, "")]),
    ("Function", [("id", 1, _F.TYPE_UINT64, False, ""),
                  ("name", 2, _F.TYPE_INT64, False, ""),
                  ("system_name", 3, _F.TYPE_INT64, False, ""),
                  ("filename", 4, _F.TYPE_INT64, False, ""),
                  ("start_line", 5, _F.TYPE_INT64, False, "")]),
]


def _file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="qtools/pprof/profile.proto", package=PACKAGE,
                                           syntax="proto3")
    for name, fields in _SCHEMA:
        m = f.message_type.add(name=name)
        for fname, number, ftype, repeated, type_name in fields:
            fd = m.field.add(name=fname, number=number, type=ftype,  # type: ignore[arg-type]
                             label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
            if type_name:
                fd.type_name = f".{PACKAGE}.{type_name}"
    return f


def _classes() -> dict[str, Any]:
    # A pool of our own: another library may register perftools.profiles too.
    pool = descriptor_pool.DescriptorPool()
    proto = _file()
    pool.Add(proto)
    return message_factory.GetMessageClassesForFiles([proto.name], pool)


MESSAGES = _classes()
Profile = MESSAGES[f"{PACKAGE}.Profile"]


def message(t: Tables) -> Any:
    """The Profile message of ``t``."""
    s = Strings()
    p = Profile()
    # samples first (pprof's convention for a count), then each metric: pprof's
    # default the first metric; time off the CPU (--metric off-cpu...) has no
    # sample count
    for value_type, unit in t.types:
        p.sample_type.add(type=s(value_type), unit=s(unit))
    p.default_sample_type = s(t.default_type)
    p.period_type.type = s(t.period_type[0])
    p.period_type.unit = s(t.period_type[1])
    if t.period:
        p.period = t.period
    if t.time_nanos is not None:
        p.time_nanos = t.time_nanos
    if t.duration_nanos is not None:
        p.duration_nanos = t.duration_nanos
    with_lines = {loc.mapping for loc in t.locations if loc.has_lines}
    with_inline = {loc.mapping for loc in t.locations if len(loc.lines) > 1}
    for i, m in enumerate(t.mappings):
        p.mapping.add(id=i + 1, memory_start=m.start, memory_limit=m.limit,
                      file_offset=m.offset, filename=s(m.file), build_id=s(m.build_id),
                      has_functions=True, has_filenames=i in with_lines,
                      has_line_numbers=i in with_lines, has_inline_frames=i in with_inline)
    for i, f in enumerate(t.functions, 1):
        p.function.add(id=i, name=s(f.name), system_name=s(f.name), filename=s(f.filename))
    for i, loc in enumerate(t.locations, 1):
        entry = p.location.add(id=i, address=loc.address,
                               mapping_id=0 if loc.mapping is None else loc.mapping + 1)
        # innermost first, as pprof expects: the inlined functions, then the symbol
        for function, line in loc.lines or ((loc.function, 0),):
            entry.line.add(function_id=function + 1, line=line)
    labels = [[(s(key), s(value)) for key, value in lb.pairs()] for lb in t.labels]
    numbers = [[(s(key), value) for key, value in lb.numbers()] for lb in t.labels]
    for sample in t.samples:
        out = p.sample.add(location_id=[i + 1 for i in sample.locations],
                           value=list(sample.values))
        for key, value in labels[sample.labels]:
            out.label.add(key=key, str=value)
        for key, number in numbers[sample.labels]:
            out.label.add(key=key, num=number)
    p.string_table.extend(s.table)
    return p


def encode(t: Tables) -> bytes:
    # mtime 0: the same profile makes the same file
    return gzip.compress(message(t).SerializeToString(), mtime=0)
