"""From the selected task sets to what a report shows, as its options say.

Pipeline: the sets' profile (``build.profile``: located stacks, named
through the one symbolizer) -> grouped by frame through the profile's
view (``group.samples``: --by, the kernel options, --python, --focus,
--ignore, --hide) -> ``analyze`` -> ``self_check`` -> ``threshold``
(--min-percent). Exports go from the same profile, through the same view,
to their tables (``export.tables``).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Iterator

from qtools.qformat.limits import Limits

from ..inputs.load import StoredSet
from ..model.graph import CallGraph, Samples
from ..model.options import Options, SymbolOptions
from ..model.profile import View
from ..naming.debuginfod import Debuginfod, servers_from
from ..naming.symbols import Symbols, Warn, debug_roots_from_env
from ..naming.symcache import SymbolCache, cache_dir, fetch_dir
from . import build, export, group
from .callgraph import analyze
from .processors import threshold


@contextmanager
def symbolizer(opts: SymbolOptions, limits: Limits, warn: Warn,
               sets: list[StoredSet]) -> Iterator[Symbols]:
    """The one symbolizer of a report, closed after it; the object copies of
    ``sets`` read from archives are opened through their archive."""
    cache = SymbolCache(cache_dir() if opts.cache else None)
    servers = servers_from(list(opts.debuginfod))
    fetcher = Debuginfod(servers, fetch_dir() if opts.cache else None, warn) \
        if servers else None
    symbols = Symbols(cache, list(opts.debug_roots) + debug_roots_from_env(), warn,
                      limits.copy_size,
                      {ts.directory: ts.store for ts in sets
                       if ts.store and ts.store.is_archive},
                      fetcher, limits.debug_size)
    try:
        yield symbols
    finally:
        symbols.close()


def samples(sets: list[StoredSet], opts: Options, view: View, warn: Warn) -> Samples:
    """The sets' samples grouped into frames as ``view`` says."""
    with symbolizer(opts.symbols, opts.limits, warn, sets) as symbols:
        prof = build.profile(sets, symbols, warn, opts.profile, view)
        return group.samples(prof, prof.each_set(), warn, opts.limits.stacks,
                             opts.limits.addresses)


def call_graph(sets: list[StoredSet], opts: Options, warn: Warn, escape: bool = True,
               roots: bool = False, threshold_rows: bool = True) -> CallGraph:
    """The checked call graph of ``sets`` for the report ``opts`` ask for
    (model.InconsistentGraph where its sums do not hold: a bug); ``escape``
    names for a text report, ``roots`` each set under its process (folded
    stacks); ``threshold_rows``: --min-percent sums small rows (a renderer
    with a cut-off of its own says no)."""
    profile = analyze(samples(sets, opts, opts.profile.view(escape, roots), warn))
    profile.self_check()
    if threshold_rows:
        profile = threshold(profile, opts.report.min_percent or 0.0)
    return profile


def export_tables(sets: list[StoredSet], opts: Options, warn: Warn) -> export.Tables:
    """The export tables (pprof, OpenTelemetry) of the report ``opts`` ask
    for: names as the `.q` has them, each sample under its thread where
    the sets have them."""
    with symbolizer(opts.symbols, opts.limits, warn, sets) as symbols:
        return tables_named_by(symbols, sets, opts, warn)


def tables_named_by(symbols: Symbols, sets: list[StoredSet], opts: Options, warn: Warn
                    ) -> export.Tables:
    """``export_tables``, named through a symbolizer its caller keeps open.
    Threads are labels in an export where the sets have them; ``--by
    thread`` takes every sample from the `.threads` files, as the report
    of it does."""
    popts = opts.profile
    view = popts.view(escape=False)
    metrics = opts.report.metrics or (popts.metric,)
    profiles = [build.profile(sets, symbols, warn, replace(popts, metric=metric), view,
                              thread_labels=True) for metric in metrics]
    return export.tables(profiles, opts.limits.stacks, opts.limits.addresses)
