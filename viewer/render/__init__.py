"""Renderers, registered by name: ``FORMATS[name].render(graph, out, options)``.

``q-view --format`` offers the names of ``FORMATS`` and lists their help;
a new output format is one module with a ``render`` and one entry here.
Exports for other tools (pprof, otlp) are the same profile kept at its
locations, not its call graph: their entry names an ``export`` (the tables
of profile/export.py -> bytes).
"""

from __future__ import annotations

import importlib
from typing import Callable, NamedTuple, TextIO

from ..model.graph import CallGraph
from ..model.options import ReportOptions
from ..profile.export import Tables
from . import collapsed, dot, jsonfmt, text


Render = Callable[[CallGraph, TextIO, ReportOptions], None]
# A binary export (pprof, OpenTelemetry): the tables of export.py -> the file's bytes
Export = Callable[[Tables], bytes]


class Format(NamedTuple):
    name: str
    help: str
    render: Render
    # Names go out as they are: the format escapes them itself (JSON).
    raw_names: bool = False
    # Each set's stacks get their process as the root frame (processes.py):
    # whole-machine folded stacks.
    process_roots: bool = False
    # --min-percent is the renderer's own (a graph's node cut-off), not
    # the rows summed by ``processors.threshold``.
    own_threshold: bool = False
    # A profile for other tools, made from locations, not from the call
    # graph (``render`` is not used): bytes, never to a terminal.
    export: Export | None = None


def _export_only(profile: CallGraph, out: TextIO, options: ReportOptions) -> None:
    raise TypeError("an export format is written by its export, not rendered")


def _lazy(module: str) -> Export:
    """The encoder of render/MODULE.py, imported when used: q-view's start-up
    does not pay for protobuf and the OpenTelemetry classes."""
    def encode(tables: Tables) -> bytes:
        encoded: bytes = importlib.import_module(f".{module}", __name__).encode(tables)
        return encoded
    return encode


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("text", "flat profile and call graph, as gprof prints them", text.render),
    Format("json", "functions, arcs and cycles (docs/json.md)",
           lambda g, out, o: jsonfmt.render(g, out, o.stacks), raw_names=True),
    Format("collapsed", "folded stacks for flamegraph.pl and speedscope",
           lambda g, out, o: collapsed.render(g, out), process_roots=True),
    Format("dot", "a Graphviz call graph",
           lambda g, out, o: dot.render(g, out, o.min_percent), own_threshold=True),
    Format("pprof", "a gzipped pprof profile.proto, for go tool pprof, Pyroscope, Parca "
           "(with -o FILE)", _export_only, export=_lazy("pprof")),
    Format("otlp", "OpenTelemetry profiles (ProfilesData, v1development; with -o FILE)",
           _export_only, export=_lazy("otlp")),
)}
DEFAULT_FORMAT = "text"


def formats_help() -> str:
    return "output format: " + "; ".join(f"{f.name}: {f.help}" for f in FORMATS.values())
