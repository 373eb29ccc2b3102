"""A profile report of the selected sets, in the format its options name.

Every format is one more view of the same profile (``profile.report``):
the text, JSON, folded stacks and DOT render its call graph, pprof and
OpenTelemetry encode its export tables; several metrics side by side
(``--metric A,B``) are one profile per metric.
"""

from __future__ import annotations

from typing import BinaryIO, Callable, TextIO

from ..inputs.load import StoredSet
from ..model.viewerrors import UsageError
from ..model.graph import CallGraph, InconsistentGraph
from ..model.options import Options
from ..profile.pipeline import call_graph, export_tables
from ..render import FORMATS
from ..render import metricgraph as metric_graph
from ..render import metrics as metrics_view

Warn = Callable[[str], None]


def show(sets: list[StoredSet], opts: Options, out: TextIO, err: TextIO, warn: Warn,
         export_to: str | BinaryIO | None, prog: str) -> int:
    """Write the report; the exit status (3: a call graph whose sums do not
    hold, a bug in q-view, not in the input)."""
    fmt = FORMATS[opts.report.format]
    try:
        if fmt.export is not None:
            assert export_to is not None
            _write(export_to, fmt.export(export_tables(sets, opts, warn)))
            return 0
        if len(opts.report.metrics) > 1:
            return _side_by_side(sets, opts, out, warn)
        graph = graph_for(sets, opts, warn)
    except InconsistentGraph as e:
        err.write(f"{prog}: internal error: the profile does not add up: {e}\n")
        return 3
    fmt.render(graph, out, opts.report)
    return 0


def graph_for(sets: list[StoredSet], opts: Options, warn: Warn) -> CallGraph:
    """The call graph of ``sets`` for the format the options name: its names
    escaped or kept (JSON), its stacks under their processes (folded
    stacks), its small rows summed unless the renderer cuts off its own."""
    fmt = FORMATS[opts.report.format]
    return call_graph(sets, opts, warn, escape=not fmt.raw_names, roots=fmt.process_roots,
                      threshold_rows=not fmt.own_threshold)


def _side_by_side(sets: list[StoredSet], opts: Options, out: TextIO, warn: Warn) -> int:
    """Several metrics: one call graph per metric, shown by function side by side."""
    report = opts.report
    if report.format not in ("text", "json"):
        raise UsageError("several --metric names show text, --format json, pprof or otlp")
    if report.stacks or report.stack_quality:
        option = "--stacks" if report.stacks else "--stack-quality"
        raise UsageError(f"{option} goes with one metric's profile: give --metric one name")
    graphs: dict[str, CallGraph] = {}
    for metric in report.metrics:
        graphs[metric] = call_graph(sets, opts.with_metric(metric), warn,
                                    escape=report.format != "json")
    if report.format == "json":
        metric_graph.render_json(graphs, out, with_arcs=report.graph)
        return 0
    if report.flat or not report.graph:
        metrics_view.render_text(graphs, out, report.min_percent or 0.0)
    if report.graph:
        if report.flat:
            out.write("\n")
        metric_graph.render_text(graphs, out)
    return 0


def _write(target: str | BinaryIO, data: bytes) -> None:
    if isinstance(target, str):
        with open(target, "wb") as f:
            f.write(data)
    else:
        target.write(data)
        target.flush()
