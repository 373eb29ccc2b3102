"""Command line of q-view: ``main(argv) -> int``.

Parses the options and dispatches: the overview of directories
(overview.py), or the selected sets (load.py, programs.py) made into a
call graph (report.py) and shown by the renderer ``--format`` names
(render.FORMATS). Errors become one line on stderr, ``q-view:
FILE[:LINE]: message``, and exit status 1 (2 for usage, 3 for a call
graph whose sums do not hold).
"""

from __future__ import annotations

import gc

# The imports below make some hundred thousand objects that live as long as
# q-view does: the collector is kept off while they run, and they are then
# frozen (gc.freeze), so no collection of the view ever walks them; the
# first one after the imports took 8 ms of every start.
gc.disable()
try:
    import argparse
    import os
    import sys
    import time
    from typing import BinaryIO, Sequence, TextIO

    from qtools.qformat.limits import DEFAULT_LIMITS, LimitExceeded, describe_defaults, \
        parse_limits
    from qtools.qformat import QFormatError
    from qtools.qformat.archive import looks_like_archive
    from qtools.common.helptext import HelpFormatter
    from qtools.common.version import package_version

    import re

    from . import diff, overview, report
    from ..inputs import hints, runs
    from ..inputs.load import (Source, StoredSet, close_inputs, default_directory, is_directory,
                               open_inputs)
    from ..inputs.programs import select_inputs
    from ..inputs.select import Selection
    from ..inputs.timewin import parse_time
    from ..model.viewerrors import UsageError, ViewError
    from ..model.escape import escaped, printable, unescaped
    from ..model.options import (METRICS, Options, ProfileOptions, ReportOptions,
                                 SymbolOptions)
    from ..model.profile import BY_CHOICES, WEIGHTS
    from ..render import DEFAULT_FORMAT, FORMATS, formats_help
finally:
    gc.freeze()
    gc.enable()

PROG = "q-view"
REMOVED_IN = "0.2.0"  # the release that drops --event and --metrics (CHANGELOG.md)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, formatter_class=HelpFormatter,
        description="gprof-style flat profiles and call graphs from a q-syscollect .q directory.",
        epilog="With no FILE, or only directories and neither a selection nor a report "
               "option (--flat, --graph, --format...), prints an overview of the task sets. "
               "Otherwise every selected set is merged into one profile: PROG.info means "
               "all sets of program PROG, a directory all its sets.")
    p.add_argument("inputs", nargs="*", metavar="FILE.info[#N]|PROG.info|DIR|ARCHIVE.tar",
                   help="task sets to show (without #N: the latest version), all sets of "
                        "a program, or directories; tar archives (.tar, .tar.gz) of .q "
                        "directories are read in place, as directories")
    p.add_argument("-d", "--directory", metavar="DIR",
                   help="the .q directory (default: $Q_DIR, else .q): shown when no input "
                        "is given, searched for bare names")
    p.add_argument("--version", action=_PrintVersion, nargs=0,
                   help="print the version and exit")
    sel = p.add_argument_group("selection (merges every matching set)")
    sel.add_argument("--comm", metavar="NAME", help="sets of this command name")
    sel.add_argument("--pid", type=int, metavar="PID", help="sets of this process")
    sel.add_argument("--cpu", type=int, metavar="N", help="sets of this CPU")
    sel.add_argument("--host", metavar="NAME",
                     help="only sets this machine collected (its host name, q:hostname); "
                          "the overview of several machines has a host column")
    sel.add_argument("--unit", metavar="NAME",
                     help="sets whose samples ran in this systemd unit or container: a glob "
                          "on the unit ('nginx.service', 'session-*.scope'), a container id "
                          "(or its first digits), or, starting with /, the cgroup path")
    sel.add_argument("--all-versions", action="store_true",
                     help="from directories, merge every version, not only the latest")
    sel.add_argument("--since", metavar="TIME",
                     help="only time slices that reach past TIME ('2h ago', '03:00', "
                          "'2026-11-22 03:00', '@UNIXSECONDS'); every version is a candidate")
    sel.add_argument("--until", metavar="TIME", help="only time slices that began before TIME")
    sel.add_argument("--run", metavar="ID",
                     help="only the sets one q-syscollect run wrote: its id (a unique prefix "
                          "will do), 'latest', or 'unknown' (sets older than run ids); by "
                          "default every run is shown, with a note when there are several")
    rep = p.add_argument_group(
        "report", "Every option here shapes every --format alike (pprof and otlp: the "
        "samples and frames they hold). Percentages are of the whole selection after "
        "--no-kernel, --kernel-only and --python, which choose what is shown, and before "
        "--focus, --ignore and --hide, which never make a share larger than the time had")
    rep.add_argument("--flat", action="store_true",
                     help="the flat profile (default: flat profile and call graph)")
    rep.add_argument("-g", "--graph", action="store_true",
                     help="the call graph, with the stack-quality section (with several "
                          "--metric names: "
                          "each metric's time of every function and of every call)")
    rep.add_argument("--stack-quality", action="store_true",
                     help="the share of user stacks that reach a root frame, per object")
    rep.add_argument("--min-percent", type=float, default=None, metavar="P",
                     help="sum the rows below P%% of the whole in one row, judged by the "
                          "column a table is sorted by (self in the flat profile, "
                          "inclusive in the call graph); for dot the default is 0.5; not "
                          "with collapsed, pprof or otlp, which keep every stack")
    rep.add_argument("--focus", metavar="RE", action="append", type=_regex, default=[],
                     help="only stacks through a function whose name matches RE")
    rep.add_argument("--ignore", metavar="RE", action="append", type=_regex, default=[],
                     help="leave out stacks through a function whose name matches RE")
    rep.add_argument("--hide", metavar="RE", action="append", type=_regex, default=[],
                     help="leave matching functions out of stacks (their time goes to "
                          "their callers); percentages stay of the whole selection")
    kern = rep.add_mutually_exclusive_group()
    kern.add_argument("--no-kernel", action="store_true",
                      help="leave out samples taken in the kernel")
    kern.add_argument("--kernel-only", action="store_true",
                      help="only samples taken in the kernel, with their kernel frames")
    rep.add_argument("--python", action="store_true",
                     help="Python frames only, as py-spy shows them (NAME (FILE)); native "
                          "and kernel frames fold into the Python function that called them")
    rep.add_argument("--by", choices=BY_CHOICES + ("thread",), default="function",
                     help="what a node is: a function (default), an object, an address, a "
                          "source line (FILE:LINE with its function, from DWARF line tables); "
                          "thread: functions, each stack under its thread (name and tid)")
    rep.add_argument("--annotate", metavar="NAME",
                     help="one function's disassembly, each instruction with its share of "
                          "the function's samples and source lines between them where the "
                          "DWARF line table and the source file are there (as perf annotate "
                          "--stdio; which source files it reads: --source-root); "
                          "NAME<object> picks among functions of one name")
    rep.add_argument("--metric", type=_metrics, metavar="NAME[,NAME...]",
                     help="what time to show: cpu (the samples, default), off-cpu (blocked, "
                          "by the stack at the switch-out), cpu-wait (runnable, waiting for "
                          "a CPU), wall (all three); all but cpu need q-syscollect --off-cpu. "
                          "Several names: side by side, each self and inclusive, by function "
                          "(text or --format json; with --graph each caller and callee with "
                          "each metric's time along that call), or as several sample types "
                          "(pprof, otlp)")
    # The spellings before --metric, kept until the release CHANGELOG.md names
    rep.add_argument("--event", type=_metrics, dest="event_alias", metavar="NAME",
                     help="deprecated: --metric NAME")
    rep.add_argument("--metrics", type=_metrics, dest="metrics_alias", metavar="LIST",
                     help="deprecated: --metric LIST")
    rep.add_argument("--tid", type=int, action="append", metavar="TID",
                     help="only this thread (repeat for several)")
    rep.add_argument("--format", choices=list(FORMATS), default=DEFAULT_FORMAT,
                     help=formats_help())
    rep.add_argument("-o", "--output", metavar="FILE",
                     help="write the report to FILE rather than to standard output (pprof "
                          "and otlp, which are binary, never go to a terminal)")
    rep.add_argument("--stacks", action="store_true",
                     help="with --format json: add the weighted stacks (docs/json.md)")
    rep.add_argument("--per-pid", action="store_true",
                     help="with --format collapsed: the root frame is comm-pid, not comm")
    rep.add_argument("--weight", choices=WEIGHTS, default="event",
                     help="with --format collapsed: weigh stacks by the event's count "
                          "(default; nanoseconds for clocks) or by samples")
    rep.add_argument("--overview", action="store_true",
                     help="the overview of the directories, whatever the format")
    rep.add_argument("--group", choices=overview.GROUPS, default="process",
                     help="what a row of the overview is: a process (default), or a unit: "
                          "the systemd service or scope, or the container, its samples ran "
                          "in (--group unit shows the overview)")
    rep.add_argument("--per-cpu", action="store_true",
                     help="in the overview, one row per task set (process and CPU), not "
                          "one per process")
    rep.add_argument("--watch", action="store_true",
                     help="redraw, like top, whenever a checkpoint lands (until Ctrl-C): "
                          "the top rows that fit the terminal; of a profile, the flat "
                          "profile unless --graph")
    diff.add_arguments(p)
    sym = p.add_argument_group("symbols")
    sym.add_argument("--debug-root", action="append", default=[], metavar="DIR",
                     help="look for DIR/.build-id/xx/rest.debug and debuglink files here "
                          "(before $Q_DEBUG_ROOT and /usr/lib/debug)")
    sym.add_argument("--debuginfod", action="append", default=[], metavar="URL",
                     help="fetch debug files missing locally by build-id from this "
                          "debuginfod server (repeatable; default: $DEBUGINFOD_URLS, and "
                          "none when it is unset), into the q-tools cache directory")
    sym.add_argument("--inline", action="store_true",
                     help="credit self time to the innermost inlined function (DWARF "
                          "inlined subroutines), not to the symbol it was inlined into; "
                          "call chains show inlined functions as 'NAME (inlined)' frames "
                          "either way")
    sym.add_argument("--source-root", action="append", default=[], metavar="DIR",
                     help="with --annotate: read source files below DIR (repeatable; the "
                          "longest tail of the path the line table gives that exists there) "
                          "before the path itself. A line table in a profile names any file "
                          "it likes, so --annotate reads source files only below a "
                          "--source-root or the current directory (not / or one holding a "
                          "home directory), symlinks resolved, unless the object is the "
                          "very file at its path on this machine and only you or root can "
                          "change it")
    sym.add_argument("--no-cache", action="store_true",
                     help="do not read or write the symbol cache")
    p.add_argument("--limits", metavar="KEY=VALUE,...", type=_limits,
                   default=DEFAULT_LIMITS,
                   help="caps on what is read from a .q, which may come from anyone: "
                        "data-size (decompressed bytes of one data file), lines (of one "
                        "data file), stacks (distinct stacks), addresses (distinct "
                        "addresses of a set, frames of a profile), info-size (one .info), "
                        "copy-size (one object copy checked), debug-size (one DWARF "
                        "section, inflated), members (of one tar archive), "
                        "archive-size (one tar, decompressed); sizes take K, M, G (binary), "
                        f"counts k, M (decimal). Defaults: {describe_defaults()}")
    return p


class _PrintVersion(argparse.Action):
    """--version, looked up only when asked (the metadata scan costs start-up)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"{PROG} {package_version()}")
        parser.exit(0)


class _Warnings:
    """Prints each warning once, to stderr, as it arises."""

    def __init__(self, err: TextIO) -> None:
        self.err = err
        self.seen: set[str] = set()

    def __call__(self, message: str) -> None:
        if message not in self.seen:
            self.seen.add(message)
            self.err.write(f"{PROG}: warning: {printable(message)}\n")


def _metrics(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in METRICS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"not a metric: {(bad or [text])[0]!r} (choose from "
                                         + ", ".join(METRICS) + ")")
    return list(dict.fromkeys(names))


def _regex(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"not a regular expression: {text!r}: {e}") from None


def _limits(text: str) -> object:
    try:
        return parse_limits(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: Sequence[str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    # Every text written from here on goes through the one escaping
    # function (escape.py): names from a .q cannot reach the terminal raw
    out = escaped(out or sys.stdout)
    err = escaped(err or sys.stderr)
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:  # argparse has printed the usage message
        return int(e.code or 0)
    for alias, given in (("--event", args.event_alias), ("--metrics", args.metrics_alias)):
        if given is not None:
            err.write(f"{PROG}: warning: {alias} is deprecated and goes in {REMOVED_IN}: "
                      f"use --metric {','.join(given)}\n")
            args.metric = (args.metric or []) + [m for m in given if m not in (args.metric or [])]
    if args.python and args.by != "function":
        err.write(f"{PROG}: --python shows functions; it cannot be combined with --by {args.by}\n")
        return 2
    if args.min_percent is not None and not 0 <= args.min_percent <= 100:
        err.write(f"{PROG}: --min-percent must be between 0 and 100\n")
        return 2
    if args.annotate is not None and (args.format != DEFAULT_FORMAT or args.diff
                                      or args.watch):
        err.write(f"{PROG}: --annotate prints text; it goes with neither --format, "
                  "--diff nor --watch\n")
        return 2
    refused = _refused(args)
    if refused:
        err.write(f"{PROG}: {refused}\n")
        return 2
    try:
        if args.output and FORMATS[args.format].export is None:
            with open(args.output, "w", encoding="utf-8") as to_file:
                return _run(args, escaped(to_file), err)
        return _run(args, out, err)
    except LimitExceeded as e:
        err.write(f"{PROG}: {printable(str(e))}; raise it with --limits {e.key}=N\n")
        return 1
    except UsageError as e:
        err.write(f"{PROG}: {printable(str(e))}\n")
        return 2
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
    except MemoryError:  # a machine with less memory than the caps allow for
        err.write(f"{PROG}: out of memory; lower the caps with --limits (addresses, "
                  "stacks) to refuse such input early\n")
        return 1
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace, out: TextIO, err: TextIO, rows: int | None = None) -> int:
    """Show what ``args`` ask for; ``rows``: fit the overview in that many lines."""
    now = time.time()
    selection = Selection(args.comm, args.pid, args.cpu, _time("--since", args.since, now),
                          _time("--until", args.until, now), args.host, args.unit)
    if selection.since is not None and selection.until is not None \
            and selection.until < selection.since:
        raise UsageError(f"--until {args.until} is before --since {args.since}")
    run = runs.check_spec(args.run) if args.run is not None else None
    directory = default_directory(args.directory)
    diff.check_args(args)
    if args.diff:
        return diff.run(args, options(args), [_locate(item, directory) for item in args.diff],
                        selection, run, now, out, err, _Warnings(err), PROG)
    if not args.inputs and not os.path.isdir(directory):
        given_by = "-d" if args.directory else "Q_DIR" if os.environ.get("Q_DIR") else ""
        raise hints.no_directory(directory, given_by)
    named = [_locate(item, directory) for item in args.inputs] or [directory]
    if args.watch and any(looks_like_archive(i) for i in named):
        raise UsageError("--watch follows directories; an archive does not change")
    inputs = open_inputs(named, args.limits)
    try:
        return _show(args, inputs, selection, run, out, err, rows)
    finally:
        close_inputs(inputs)


def _show(args: argparse.Namespace, inputs: list[Source], selection: Selection,
          run: str | None, out: TextIO, err: TextIO, rows: int | None) -> int:
    if run is not None and not any(is_directory(i) for i in inputs):
        raise UsageError("--run picks among the sets of a directory; each FILE.info "
                         "named is shown whatever run wrote it")
    directories = all(is_directory(i) for i in inputs)
    if directories and (args.group != "process" or not (selection.active
                                                         or _report_asked(args))):
        args.overview = True
    refused = _not_for_this(args, directories)
    if refused:
        raise UsageError(refused)
    export_to = _export_target(args, out)
    if args.watch:
        from .watch import watch
        args.watch = False
        if not (args.overview or args.flat or args.graph or args.stack_quality):
            args.flat = True  # what a screen holds; the call graph is one --graph away
        # the screen control is watch's own; each screen's report is escaped
        return watch([i for i in inputs if isinstance(i, str)],
                     lambda o, rows: _run(args, escaped(o), escaped(o), rows), unescaped(out))
    if args.overview and all(is_directory(i) for i in inputs):
        overview.show(inputs, selection, run, args.limits, args.per_cpu, args.format == "json",
                      out, lambda sets, hint: _note_runs(sets, hint, err), rows, args.group)
        return 0
    sets = select_inputs(inputs, selection, args.all_versions, run, args.limits)
    _note_runs(sets, run is None and any(is_directory(i) for i in inputs), err)
    opts = options(args)
    if args.annotate is not None:
        from . import annotate  # disassembly and source: only for --annotate
        return annotate.show(sets, args.annotate, opts, out, _Warnings(err))
    return report.show(sets, opts, out, err, _Warnings(err), export_to, PROG)


def _refused(args: argparse.Namespace) -> str | None:
    """Why a combination of options means nothing (None: it does). Every
    filter goes with every format; these shape one format's output."""
    export = FORMATS[args.format].export is not None
    if args.weight != "event" and args.format != "collapsed":
        return f"--weight {args.weight} goes with --format collapsed"
    if args.per_pid and args.format != "collapsed":
        return "--per-pid goes with --format collapsed"
    if args.stacks and args.format != "json":
        return "--stacks goes with --format json"
    if args.format == "collapsed" and args.min_percent is not None and not args.diff:
        return ("--min-percent sums the small rows of q-view's tables; folded stacks keep "
                "every stack (flamegraph.pl's --minwidth leaves out narrow ones)")
    if export and args.min_percent is not None:
        return (f"--min-percent sums the small rows of q-view's tables; --format "
                f"{args.format} keeps every sample (pprof's -nodefraction leaves out "
                "small nodes)")
    return None


def options(args: argparse.Namespace) -> Options:
    """The typed options of a report: all the pipeline is given."""
    kernel = "user" if args.no_kernel else "kernel" if args.kernel_only else None
    metrics = tuple(args.metric or ())
    profile = ProfileOptions(
        by="function" if args.by == "thread" else args.by, by_thread=args.by == "thread",
        inline=args.inline, metric=metrics[0] if len(metrics) == 1 else "cpu",
        tids=frozenset(args.tid) if args.tid else None, kernel=kernel, python=args.python,
        focus=tuple(args.focus), ignore=tuple(args.ignore), hide=tuple(args.hide),
        per_pid=args.per_pid, weight=args.weight)
    return Options(profile,
                   ReportOptions(args.format, args.flat, args.graph, args.stack_quality,
                                 args.stacks, args.min_percent, metrics),
                   SymbolOptions(tuple(args.debug_root), tuple(args.debuginfod),
                                 not args.no_cache, tuple(args.source_root)),
                   args.limits)


def _export_target(args: argparse.Namespace, out: TextIO) -> str | BinaryIO | None:
    """Where a binary export goes: -o FILE, or standard output when it is
    not a terminal (UsageError when it is); None for the other formats."""
    if FORMATS[args.format].export is None:
        return None
    if args.watch or args.overview:
        option = "--watch" if args.watch else "--overview"
        raise UsageError(f"{option} is a report of q-view's; --format {args.format} writes "
                         "a profile")
    if args.output:
        return str(args.output)
    out = unescaped(out)  # bytes, written as they are: names stay the .q's (escape.py)
    binary = getattr(out, "buffer", None)
    if out.isatty() or binary is None:
        raise UsageError(f"--format {args.format} is binary: give -o FILE (or redirect "
                         "standard output to a file or a pipe)")
    return binary  # type: ignore[no-any-return]


def _time(option: str, text: str | None, now: float) -> float | None:
    try:
        return parse_time(text, now) if text else None
    except UsageError as e:
        raise UsageError(f"{option}: {e}") from None


def _report_asked(args: argparse.Namespace) -> bool:
    """A directory with one of these is a whole-machine report, not the overview."""
    return bool(_report_options(args) or args.format != DEFAULT_FORMAT)


def _report_options(args: argparse.Namespace) -> list[str]:
    """The options given that shape a profile report (and no overview)."""
    given = [("--annotate", args.annotate is not None), ("--flat", args.flat),
             ("--graph", args.graph), ("--stack-quality", args.stack_quality),
             ("--focus", args.focus), ("--ignore", args.ignore), ("--hide", args.hide),
             ("--min-percent", args.min_percent is not None), ("--metric", args.metric),
             ("--tid", args.tid), ("--by", args.by != "function"), ("--python", args.python),
             ("--no-kernel", args.no_kernel), ("--kernel-only", args.kernel_only),
             ("--inline", args.inline), ("--stacks", args.stacks),
             ("--per-pid", args.per_pid), ("--weight", args.weight != "event")]
    return [option for option, on in given if on]


def _not_for_this(args: argparse.Namespace, directories: bool) -> str | None:
    """Why options given do not go with what is shown (the overview or a
    profile report); None where they all do."""
    if args.overview:
        if not directories:
            return "--overview shows directories; a FILE.info is shown as a profile"
        report = _report_options(args)
        if report:
            why = "--group unit shows" if args.group != "process" else "--overview is"
            return f"{report[0]} shapes a profile report; {why} the overview of the sets"
        return None
    overview_only = [option for option, on in (("--per-cpu", args.per_cpu),
                                               ("--group", args.group != "process")) if on]
    if overview_only:
        return (f"{overview_only[0]} shapes the overview of a directory; it goes with "
                "no FILE.info, selection or report option")
    return None


def _locate(item: str, directory: str) -> str:
    """A bare name that is not here is looked for in the .q directory
    (``q-view -d .q p-fan-pid1-cpu0.info``)."""
    if os.sep in item or os.path.exists(item) or os.path.exists(item + "#0"):
        return item
    candidate = os.path.join(directory, item)
    return candidate if os.path.isdir(directory) else item


def _note_runs(sets: list[StoredSet], hint: bool, err: TextIO) -> bool:
    """The one-line note of a selection that spans several runs; was there one?"""
    line = runs.notice(runs.runs_of(sets), hint)
    if line:
        err.write(f"{PROG}: note: {printable(line)}\n")
    return line is not None


def run() -> None:
    """The ``q-view`` command: ``main``, then an exit that skips tearing the
    interpreter down. Freeing every object of the profile one by one was a
    tenth of a first view's CPU, and nothing is left to do: the output is
    flushed here, and whatever q-view wrote to files is closed by now."""
    code = main()
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:  # q-view ... | head: the reader has seen enough
        pass
    except OSError as e:  # a full disk under stdout: not all of it got out
        sys.stderr.write(f"{PROG}: cannot write the output: {e.strerror or e}\n")
        code = code or 1
    try:
        sys.stderr.flush()
    except OSError:
        pass
    os._exit(code)


if __name__ == "__main__":
    run()
