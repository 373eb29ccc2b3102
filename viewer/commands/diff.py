"""``q-view --diff BASE NEW``: two profiles compared, function by function.

Each side is built exactly as a report of its own is (``programs.
select_inputs`` and ``report.call_graph``: the same ``--by``, filters and
kernel options), each with its own time window; ``compare`` then matches
the two call graphs' functions by frame and is pure. As ``perf diff`` and
``pprof -diff_base -normalize`` do, the default compares shares (each
side's times as percent of its own total, the change in percentage
points), so a longer or busier day does not make everything look slower;
``--absolute`` compares times in the profile's unit, as ``pprof
-diff_base`` does without ``-normalize``.
"""

from __future__ import annotations

import argparse
import os
from typing import Callable, TextIO

from ..model.viewerrors import UsageError, ViewError
from ..inputs import runs
from ..inputs.select import Selection
from ..inputs.programs import select_inputs
from ..inputs.timewin import parse_time
from ..model.escape import printable
from ..model.graph import InconsistentGraph
from ..profile.compare import BASE, NEW, Side, compare
from ..model.options import Options
from .report import graph_for
from ..render.difftable import RENDERERS



def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "comparison",
        "--diff BASE NEW compares two profiles as perf diff and pprof -diff_base do; BASE "
        "and NEW are each an .info, PROG.info or a directory. --comm, --pid, --cpu, --run, "
        "--all-versions, --by, the kernel options and the filters apply to both sides; "
        "--min-percent P leaves out the rows that changed by less than P points; "
        "--since/--until window both sides unless --base-since or --base-until gives BASE "
        "a window of its own")
    g.add_argument("--diff", nargs=2, metavar=("BASE", "NEW"),
                   help="per function (--by), the self and inclusive shares of BASE and NEW "
                        "and the change in percentage points, largest change first; "
                        "functions only in NEW are marked new, only in BASE gone. --format "
                        "json (docs/json.md) or collapsed ('stack base_count new_count', "
                        "as difffolded.pl prints it for flamegraph.pl)")
    g.add_argument("--base-since", metavar="TIME",
                   help="with --diff: BASE's window starts here (then --since/--until are "
                        "NEW's only)")
    g.add_argument("--base-until", metavar="TIME",
                   help="with --diff: BASE's window ends here (then --since/--until are "
                        "NEW's only)")
    how = g.add_mutually_exclusive_group()
    how.add_argument("--normalize", dest="absolute", action="store_false", default=False,
                     help="with --diff (the default): compare shares of each side's total "
                          "(collapsed: BASE's counts scaled to NEW's total, as "
                          "difffolded.pl -n does)")
    how.add_argument("--absolute", dest="absolute", action="store_true",
                     help="with --diff: compare times (counts) as they are, new - base")


# Options that shape a single report and mean nothing for a comparison.
_NOT_WITH_DIFF = (("flat", "--flat"), ("graph", "--graph"), ("stack_quality", "--stack-quality"),
                  ("stacks", "--stacks"), ("overview", "--overview"), ("per_cpu", "--per-cpu"),
                  ("watch", "--watch"))


def check_args(args: argparse.Namespace) -> None:
    """UsageError for what does not go with --diff (or only goes with it)."""
    if not args.diff:
        for option in ("base_since", "base_until"):
            if getattr(args, option) is not None:
                raise UsageError(f"--{option.replace('_', '-')} goes with --diff")
        if args.absolute:
            raise UsageError("--absolute goes with --diff")
        return
    if args.inputs:
        raise UsageError("--diff BASE NEW takes its two inputs itself; other inputs "
                         f"({printable(args.inputs[0])}) do not go with it")
    for attr, option in _NOT_WITH_DIFF:
        if getattr(args, attr):
            raise UsageError(f"{option} does not go with --diff")
    if len(args.metric or ()) > 1:
        raise UsageError("--diff compares one metric: give --metric one name")
    if args.format not in RENDERERS:
        raise UsageError(f"--diff shows --format {', '.join(RENDERERS)}, not {args.format}")


def run(args: argparse.Namespace, opts: Options, inputs: list[str], selection: Selection,
        run_id: str | None, now: float, out: TextIO, err: TextIO, warn: Callable[[str], None],
        prog: str) -> int:
    """Build both sides as reports, compare them, render; the exit status."""
    base_selection = _base_selection(args, selection, now)
    sides = []
    for label, given, item, chosen in ((BASE, args.diff[0], inputs[0], base_selection),
                                       (NEW, args.diff[1], inputs[1], selection)):
        try:
            sets = select_inputs([item], chosen, args.all_versions, run_id, args.limits)
            line = runs.notice(runs.runs_of(sets), run_id is None and os.path.isdir(item))
            if line:
                err.write(f"{prog}: note: {label}: {printable(line)}\n")
            profile = graph_for(sets, opts, warn)
        except InconsistentGraph as e:  # a bug in q-view, not in the input
            err.write(f"{prog}: internal error: the profile does not add up: {e}\n")
            return 3
        except ViewError as e:
            kind = UsageError if isinstance(e, UsageError) else ViewError
            where = f" ({printable(given)})" if e.path is None else ""
            raise kind(f"{label} side{where}: {e}") from None
        sides.append(Side(label, given, chosen, profile))
    comparison = compare(sides[0], sides[1], args.absolute, args.min_percent or 0.0)
    RENDERERS[args.format](comparison, out)
    return 0


def _base_selection(args: argparse.Namespace, selection: Selection, now: float) -> Selection:
    """BASE's selection: NEW's, with its own window where --base-since or
    --base-until gives one (both sides' window otherwise)."""
    if args.base_since is None and args.base_until is None:
        return selection
    since = _time("--base-since", args.base_since, now)
    until = _time("--base-until", args.base_until, now)
    if since is not None and until is not None and until < since:
        raise UsageError(f"--base-until {args.base_until} is before --base-since "
                         f"{args.base_since}")
    return selection._replace(since=since, until=until)


def _time(option: str, text: str | None, now: float) -> float | None:
    try:
        return parse_time(text, now) if text else None
    except UsageError as e:
        raise UsageError(f"{option}: {e}") from None

