"""From the selected task sets to the call graph a renderer shows.

Pipeline: load each set as locations and name them through the one
symbolizer, merged by frame as ``--by`` says (``build_samples``; for
folded stacks each set under its process, ``processes.by_process``) ->
Samples processors (kernel, ``--python``, filters) -> ``analyze`` ->
``self_check`` -> CallGraph processors (threshold).
"""

from __future__ import annotations

import argparse

from ..inputs.load import StoredSet
from ..naming.symbols import Symbols, Warn, debug_roots_from_env
from ..naming.debuginfod import Debuginfod, servers_from
from ..naming.symcache import SymbolCache, cache_dir, fetch_dir
from ..render import FORMATS
from . import filters, processes, processors
from .build import build_samples
from .callgraph import analyze
from ..model.escape import printable
from ..model.graph import CallGraph
from .pyview import python_only
from .threadlocs import ThreadView


def symbolizer(args: argparse.Namespace, warn: Warn, sets: list[StoredSet]) -> Symbols:
    """The one symbolizer of a run, as ``args`` set it up (close it after);
    the object copies of ``sets`` read from archives are opened through
    their archive."""
    cache = SymbolCache(None if args.no_cache else cache_dir())
    servers = servers_from(getattr(args, "debuginfod", None) or [])
    fetcher = Debuginfod(servers, None if args.no_cache else fetch_dir(), warn) \
        if servers else None
    return Symbols(cache, list(args.debug_root) + debug_roots_from_env(), warn,
                   args.limits.copy_size,
                   {ts.directory: ts.store for ts in sets if ts.store and ts.store.is_archive},
                   fetcher, args.limits.debug_size)


def thread_view(args: argparse.Namespace) -> ThreadView:
    """--event, --tid and --by thread: what of the `.threads` files to show."""
    tids = getattr(args, "tid", None)
    return ThreadView(getattr(args, "event", None) or "cpu",
                      frozenset(tids) if tids else None, args.by == "thread")


def call_graph(sets: list[StoredSet], args: argparse.Namespace, warn: Warn) -> CallGraph:
    """The checked call graph of ``sets`` for the report ``args`` ask for
    (model.InconsistentGraph where its sums do not hold: a bug)."""
    report = FORMATS[args.format]
    symbols = symbolizer(args, warn, sets)
    # JSON escapes control characters itself: names go to it as they are
    escape = None if report.raw_names else printable
    view = thread_view(args)
    if view.in_time and sets and not any(ts.info.threads and ts.info.threads.off_cpu
                                         for ts in sets):
        where = ", ".join(dict.fromkeys(ts.directory for ts in sets))
        warn(f"{where}: no off-CPU data in the selected sets (collected without "
             f"q-syscollect --off-cpu): {view.metric} "
             + ("holds their CPU time only" if view.metric == "wall"
                and any(ts.info.threads for ts in sets) else "is empty"))
    try:
        by = "function" if args.by == "thread" else args.by
        if report.process_roots:
            samples = processes.by_process(sets, symbols, by, warn, args.per_pid,
                                           args.weight, args.inline, view)
        else:
            samples = build_samples(sets, symbols, by, warn, escape, args.inline, view)
    finally:
        symbols.close()
    if args.no_kernel and view.in_time:
        samples = processors.strip_kernel(samples)
    elif args.no_kernel:
        samples = processors.hide_kernel(samples)
    elif args.kernel_only:
        samples = processors.kernel_only(samples)
    if args.python:
        samples = python_only(samples)
    samples = filters.apply(samples, args)
    profile = analyze(samples)
    profile.self_check()
    if not report.own_threshold:
        profile = processors.threshold(profile, args.min_percent or 0.0)
    return profile
