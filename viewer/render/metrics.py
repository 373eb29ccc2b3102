"""``--metrics cpu,off-cpu,wall``: several metrics of the same functions
side by side, each exclusive (self) and inclusive, as the Studio analyzer
shows them. One call graph per metric (``--event``), joined by frame."""

from __future__ import annotations

from typing import TextIO

from ..model.numfmt import si
from ..model.graph import CallGraph
from ..model.frames import Frame


def rows(graphs: dict[str, CallGraph]) -> list[tuple[Frame, dict[str, tuple[float, float]]]]:
    """Every function of any metric: metric -> (self, inclusive) seconds,
    by the first metric's inclusive time, then its self time, heaviest first."""
    frames: dict[Frame, dict[str, tuple[float, float]]] = {}
    for metric, g in graphs.items():
        for frame, fn in g.functions.items():
            frames.setdefault(frame, {})[metric] = (fn.self, fn.inclusive)
    first = next(iter(graphs))
    return sorted(frames.items(), key=lambda kv: (-kv[1].get(first, (0.0, 0.0))[1],
                                                  -kv[1].get(first, (0.0, 0.0))[0],
                                                  kv[0].name))


def total(g: CallGraph) -> float | None:
    """A metric's total; None where it has no data at all (shown "-", not 0)."""
    return g.total if g.functions else None


def units(graphs: dict[str, CallGraph]) -> str:
    """The unit of the times, or of each metric where they differ (the CPU
    samples of a count event are not seconds)."""
    found = {m: g.samples.unit for m, g in graphs.items() if g.functions}
    if len(set(found.values())) <= 1:
        return next(iter(found.values()), "seconds")
    return ", ".join(f"{m} in {u}" for m, u in found.items())


def render_text(graphs: dict[str, CallGraph], out: TextIO, min_percent: float = 0.0) -> None:
    metrics = list(graphs)
    out.write("Functions by " + ", ".join(metrics) + f" ({units(graphs)}; self, then "
              "inclusive)\n")
    head = "".join(f" {m + ' self':>14} {m + ' incl':>14}" for m in metrics)
    out.write(f"{head}  name\n")
    totals = "".join(f" {si(total(g)):>14} {'':>14}" for g in graphs.values())
    out.write(f"{totals}  [total]\n")
    first = graphs[metrics[0]]
    limit = first.total * min_percent / 100.0
    for frame, values in rows(graphs):
        if values.get(metrics[0], (0.0, 0.0))[1] < limit:
            continue
        cells = "".join(f" {si(values[m][0]) if m in values else '-':>14}"
                        f" {si(values[m][1]) if m in values else '-':>14}" for m in metrics)
        out.write(f"{cells}  {frame.name}\n")
