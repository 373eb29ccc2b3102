"""Renderers, registered by name: ``FORMATS[name].render(graph, out, options)``.

``q-view --format`` offers the names of ``FORMATS`` and lists their help;
a new output format is one module with a ``render`` and one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TextIO

from ..model import CallGraph
from . import collapsed, dot, jsonfmt, text


@dataclass(frozen=True)
class ReportOptions:
    """What the command line asked of a report, for the renderers that care."""

    flat: bool = False  # --flat
    graph: bool = False  # --graph
    stack_quality: bool = False  # --stack-quality
    stacks: bool = False  # --stacks (json)
    min_percent: float | None = None  # --min-percent as given (None: not given)


Render = Callable[[CallGraph, TextIO, ReportOptions], None]


@dataclass(frozen=True)
class Format:
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


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("text", "flat profile and call graph, as gprof prints them", text.render),
    Format("json", "functions, arcs and cycles (docs/json.md)",
           lambda g, out, o: jsonfmt.render(g, out, o.stacks), raw_names=True),
    Format("collapsed", "folded stacks for flamegraph.pl and speedscope",
           lambda g, out, o: collapsed.render(g, out), process_roots=True),
    Format("dot", "a Graphviz call graph",
           lambda g, out, o: dot.render(g, out, o.min_percent), own_threshold=True),
)}
DEFAULT_FORMAT = "text"


def formats_help() -> str:
    return "output format: " + "; ".join(f"{f.name}: {f.help}" for f in FORMATS.values())
