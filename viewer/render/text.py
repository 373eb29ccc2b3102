"""``--format text`` (the default): the flat profile, the call graph and
the stack-quality section, as ``--flat``, ``--graph`` and
``--stack-quality`` choose (neither: flat profile and call graph)."""

from __future__ import annotations

from typing import TextIO

from ..model.graph import CallGraph
from ..model.options import ReportOptions
from . import flat, graphtext as graph, qualitytext as quality


def render(profile: CallGraph, out: TextIO, options: ReportOptions) -> None:
    chosen = options.flat or options.graph or options.stack_quality
    show_flat = options.flat or not chosen
    show_graph = options.graph or not chosen
    if show_flat:
        flat.render(profile, out)
    else:
        flat.header(profile, out)
    if show_graph:
        out.write("\n")
        graph.render(profile, out)
    if show_graph or options.stack_quality:
        quality.render(profile, out)
        quality.render_interpreters(profile, out)
