"""``--format dot``: the call graph for Graphviz, coloured by inclusive time.

Like the original q-dot (and gprof2dot): one node per function with its
inclusive and self share, one edge per arc with its attributed share;
colours run from blue (little) through green and yellow to red (most).
"""

from __future__ import annotations

import colorsys
from typing import TextIO

from ..model.numfmt import calls, percent
from ..model.graph import CallGraph

DEFAULT_NODE_PERCENT = 0.5
EDGE_PERCENT = 0.1


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def color(fraction: float) -> str:
    """gprof2dot's temperature map: hue 2/3 (blue) to 0 (red), gamma 2.2."""
    f = max(0.0, min(1.0, fraction)) ** (1 / 2.2)
    hue, sat, light = 2 / 3 * (1 - f), 0.8 + 0.2 * f, 0.25 + 0.25 * f
    r, g, b = colorsys.hls_to_rgb(hue, light, sat)
    return "#%02x%02x%02x" % (round(r * 255), round(g * 255), round(b * 255))


def render(profile: CallGraph, out: TextIO, min_percent: float | None = None) -> None:
    total = profile.base or 1.0
    node_limit = (DEFAULT_NODE_PERCENT if min_percent is None else min_percent) / 100 * total
    shown = {f.frame: f for f in profile.functions.values()
             if profile.shown(f.frame) and f.inclusive >= node_limit and f.inclusive > 0}
    ids = {frame: f"n{i}" for i, frame in enumerate(
        sorted(shown, key=lambda fr: (-shown[fr].inclusive, fr.name, fr.object)))}
    out.write("digraph \"q-view\" {\n")
    out.write('  graph [fontname="Arial", nodesep=0.125, ranksep=0.25];\n')
    out.write('  node [fontcolor=white, fontname="Arial", shape=box, style=filled];\n')
    out.write('  edge [fontname="Arial"];\n')
    for frame, node in ids.items():
        fn = shown[frame]
        share = fn.inclusive / total
        label = [frame.name, frame.object,
                 f"{percent(fn.inclusive, total):.2f}%", f"({percent(fn.self, total):.2f}%)"]
        if fn.calls:
            label.append(f"{calls(fn.calls)}\u00d7")
        out.write(f"  {node} [color={_quote(color(share))}, label={_quote(chr(10).join(label))}"
                  f"];\n")
    edge_limit = EDGE_PERCENT / 100 * total
    arcs = sorted((a for a in profile.arcs.values()
                   if a.caller in ids and a.callee in ids and a.total >= edge_limit),
                  key=lambda a: (ids[a.caller], ids[a.callee]))
    for a in arcs:
        share = a.total / total
        label = [f"{percent(a.total, total):.2f}%"]
        if a.calls:
            label.append(f"{calls(a.calls)}\u00d7")
        out.write(f"  {ids[a.caller]} -> {ids[a.callee]} [color={_quote(color(share))}, "
                  f"label={_quote(chr(10).join(label))}, "
                  f"penwidth={max(1.0, 8 * share):.2f}, arrowsize={max(0.5, 2 * share):.2f}];\n")
    out.write("}\n")
