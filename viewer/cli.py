"""Command line of q-view: ``main(argv) -> int``.

Pipeline: load (inputs, selection, versions) -> symbolize and merge
(``build_samples``) -> Samples processors (kernel) -> ``analyze`` ->
Profile processors (threshold) -> renderer. Errors become one line on
stderr, ``q-view: FILE[:LINE]: message``, and exit status 1 (2 for usage).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Sequence, TextIO

from qtools.qformat import QFormatError

from . import processors
from .build import BY_CHOICES, build_samples
from .callgraph import analyze
from .errors import ViewError
from .model import Profile, printable
from .pyview import python_only
from .load import Selection, TaskSet, default_directory, select, sets_in
from .render import collapsed, dot, flat, graph, jsonfmt, overview, quality
from .symbols import Symbols, debug_roots_from_env
from .symcache import SymbolCache, cache_dir
from .timewin import parse_time

FORMATS = ("text", "json", "collapsed", "dot")
PROG = "q-view"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="gprof-style flat profiles and call graphs from a q-syscollect .q directory.",
        epilog="With no FILE, or only directories and no selection, prints an overview of "
               "the task sets. Several FILEs (or a selection) are merged into one profile.")
    p.add_argument("inputs", nargs="*", metavar="FILE.info[#N]|DIR",
                   help="task sets to show (without #N: the latest version) or directories")
    p.add_argument("-d", "--directory", metavar="DIR",
                   help="the .q directory (default: $Q_DIR, else .q): shown when no input "
                        "is given, searched for bare names")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sel = p.add_argument_group("selection (merges every matching set)")
    sel.add_argument("--comm", metavar="NAME", help="sets of this command name")
    sel.add_argument("--pid", type=int, metavar="PID", help="sets of this process")
    sel.add_argument("--cpu", type=int, metavar="N", help="sets of this CPU")
    sel.add_argument("--all-versions", action="store_true",
                     help="from directories, merge every version, not only the latest")
    sel.add_argument("--since", metavar="TIME",
                     help="only time slices that reach past TIME ('2h ago', '03:00', "
                          "'2026-11-22 03:00', '@UNIXSECONDS'); every version is a candidate")
    sel.add_argument("--until", metavar="TIME", help="only time slices that began before TIME")
    rep = p.add_argument_group("report")
    rep.add_argument("--flat", action="store_true",
                     help="the flat profile (default: flat profile and call graph)")
    rep.add_argument("--graph", action="store_true",
                     help="the call graph, with the stack-quality section")
    rep.add_argument("--stack-quality", action="store_true",
                     help="the share of user stacks that reach a root frame, per object")
    rep.add_argument("--min-percent", type=float, default=None, metavar="P",
                     help="leave out functions below P%% of the total (inclusive time); "
                          "for dot the default is 0.5")
    kern = rep.add_mutually_exclusive_group()
    kern.add_argument("--no-kernel", action="store_true",
                      help="leave out samples taken in the kernel")
    kern.add_argument("--kernel-only", action="store_true",
                      help="only samples taken in the kernel, with their kernel frames")
    rep.add_argument("--python", action="store_true",
                     help="Python frames only, as py-spy shows them (NAME (FILE)); native "
                          "and kernel frames fold into the Python function that called them")
    rep.add_argument("--by", choices=BY_CHOICES, default="function",
                     help="what a node is: a function (default), an object, an address")
    rep.add_argument("--format", choices=FORMATS, default="text", help="output format")
    rep.add_argument("--watch", action="store_true",
                     help="redraw, like top, whenever a checkpoint lands (until Ctrl-C)")
    sym = p.add_argument_group("symbols")
    sym.add_argument("--debug-root", action="append", default=[], metavar="DIR",
                     help="look for DIR/.build-id/xx/rest.debug and debuglink files here "
                          "(before $Q_DEBUG_ROOT and /usr/lib/debug)")
    sym.add_argument("--no-cache", action="store_true",
                     help="do not read or write the symbol cache")
    return p


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("q-tools")
    except Exception:  # not installed as a distribution (a source tree on sys.path)
        return "unknown"


class _Warnings:
    """Prints each warning once, to stderr, as it arises."""

    def __init__(self, err: TextIO) -> None:
        self.err = err
        self.seen: set[str] = set()

    def __call__(self, message: str) -> None:
        if message not in self.seen:
            self.seen.add(message)
            self.err.write(f"{PROG}: warning: {printable(message)}\n")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:  # argparse has printed the usage message
        return int(e.code or 0)
    if args.python and args.by != "function":
        err.write(f"{PROG}: --python shows functions; it cannot be combined with --by {args.by}\n")
        return 2
    if args.min_percent is not None and not 0 <= args.min_percent <= 100:
        err.write(f"{PROG}: --min-percent must be between 0 and 100\n")
        return 2
    try:
        return _run(args, out, err)
    except (ViewError, QFormatError) as e:
        err.write(f"{PROG}: {printable(str(e))}\n")
        return 1
    except BrokenPipeError:  # q-view ... | head: the reader has seen enough
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        err.write(f"{PROG}: {printable(f'{where}{e.strerror or e}')}\n")
        return 1
    except RecursionError:
        err.write(f"{PROG}: input nests too deeply\n")
        return 1
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    now = time.time()
    selection = Selection(args.comm, args.pid, args.cpu,
                          parse_time(args.since, now) if args.since else None,
                          parse_time(args.until, now) if args.until else None)
    directory = default_directory(args.directory)
    inputs = [_locate(item, directory) for item in args.inputs] or [directory]
    if args.watch:
        from .watch import watch
        args.watch = False
        return watch(inputs, lambda o: _run(args, o, err), out)
    if not selection.active and all(os.path.isdir(i) for i in inputs):
        for directory in inputs:
            _overview(directory, selection, args, out)
        return 0
    sets = select(inputs, selection, args.all_versions)
    warn = _Warnings(err)
    cache = SymbolCache(None if args.no_cache else cache_dir())
    symbols = Symbols(cache, list(args.debug_root) + debug_roots_from_env(), warn)
    try:
        samples = build_samples(sets, symbols, args.by, warn)
    finally:
        symbols.close()
    if args.no_kernel:
        samples = processors.hide_kernel(samples)
    elif args.kernel_only:
        samples = processors.kernel_only(samples)
    if args.python:
        samples = python_only(samples)
    profile = analyze(samples)
    try:
        profile.self_check()
    except AssertionError as e:  # a bug in q-view, not in the input
        err.write(f"{PROG}: internal error: the profile does not add up: {e}\n")
        return 3
    if args.format != "dot":
        profile = processors.threshold(profile, args.min_percent or 0.0)
    _report(profile, args, out)
    return 0


def _locate(item: str, directory: str) -> str:
    """A bare name that is not here is looked for in the .q directory
    (``q-view -d .q p-fan-pid1-cpu0.info``)."""
    if os.sep in item or os.path.exists(item) or os.path.exists(item + "#0"):
        return item
    candidate = os.path.join(directory, item)
    return candidate if os.path.isdir(directory) else item


def _report(profile: Profile, args: argparse.Namespace, out: TextIO) -> None:
    if args.format == "json":
        jsonfmt.render(profile, out)
    elif args.format == "collapsed":
        collapsed.render(profile, out)
    elif args.format == "dot":
        dot.render(profile, out, args.min_percent)
    else:
        chosen = args.flat or args.graph or args.stack_quality
        show_flat = args.flat or not chosen
        show_graph = args.graph or not chosen
        if show_flat:
            flat.render(profile, out)
        else:
            flat.header(profile, out)
        if show_graph:
            out.write("\n")
            graph.render(profile, out)
        if show_graph or args.stack_quality:
            quality.render(profile, out)
            quality.render_interpreters(profile, out)


def _overview(directory: str, selection: Selection, args: argparse.Namespace,
              out: TextIO) -> None:
    found = sets_in(directory, all_versions=selection.windowed,
                    written_since=selection.written_since, objects=False)
    if selection.windowed:
        found = [ts for ts in found if selection.in_window(ts)]
    groups: dict[object, list[TaskSet]] = {}
    for ts in found:  # a set's slices in the window make one row
        groups.setdefault(ts.set_name or ts.name, []).append(ts)
    rows = [_row(group) for group in groups.values()]
    cpus = [c for group in groups.values() if group[-1].is_kernel
            if (c := _cpu_row(group)) is not None]
    if args.format == "json":
        import json
        json.dump({"directory": directory, "sets": [r.__dict__ for r in rows],
                   "cpus": [c.__dict__ for c in cpus]}, out, indent=1)
        out.write("\n")
        return
    if not rows:
        what = f" in {selection.describe()}" if selection.windowed else ""
        out.write(f"No task sets (*.info#N) in {directory}{what}.\n")
        return
    window = selection.describe() if selection.windowed else None
    overview.render(rows, directory, out, cpus, window)


def _row(group: list[TaskSet]) -> overview.Row:
    ts = group[-1]  # the latest slice names the row
    pids = {p for t in group for p in (t.info.task.pids or [])}
    pid = str(ts.pid) if ts.pid is not None else (f"{len(pids)} pids" if pids else "-")
    cpu = str(ts.cpu) if ts.cpu is not None else "-"
    stats: dict[str, float] = {}
    for t in group:
        for key, value in (t.info.task.task_stats or {}).items():
            if isinstance(value, (int, float)):
                name = key.removeprefix("q:")
                stats[name] = stats.get(name, 0) + value
    return overview.Row(printable(ts.comm or ts.name), pid, cpu, sum(t.total() for t in group),
                        ts.unit, printable(ts.name), len(group), stats)


def _cpu_row(group: list[TaskSet]) -> overview.CpuRow | None:
    """Busy share (weighted by each slice's length) and latest clock of a CPU."""
    seconds = busy = 0.0
    mhz = None
    for ts in group:
        cs = ts.info.task.cpu_stats or {}
        if isinstance(cs.get("q:busy"), (int, float)) and isinstance(cs.get("q:seconds"), (int, float)):
            seconds += cs["q:seconds"]
            busy += cs["q:busy"] * cs["q:seconds"]
        if isinstance(cs.get("q:frequency-mhz"), (int, float)):
            mhz = float(cs["q:frequency-mhz"])
    if not seconds and mhz is None or group[-1].cpu is None:
        return None
    return overview.CpuRow(group[-1].cpu, busy / seconds if seconds else None, mhz)


if __name__ == "__main__":
    sys.exit(main())
