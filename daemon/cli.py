"""Command line of q-syscollect."""

from __future__ import annotations

import gc

# The imports below make some hundred thousand objects and no garbage:
# collecting while they run is a few percent of the start-up for nothing,
# and so is walking them once they are made (frozen: gc.freeze).
gc.disable()
try:
    import argparse
    import math
    import os
    import sys

    from qtools.common.helptext import RawDescriptionHelpFormatter, positive_float, positive_int
    from qtools.qformat.pushstate import check_url
    from qtools.common.version import package_version

    from . import attach, command
    from .config import Config, parse_age, parse_size
    from .kernel import arch, events
    from .machine import procfs
    from .machine.host import LIVE, Host
    from .messages import EXIT_LOST
    from .sets.aggregate import MAX_STACKS
    from .supervisor import CollectError, Supervisor
finally:
    gc.freeze()
    gc.enable()

DESCRIPTION = """\
Sample every CPU with perf_events and write, per task, a q profile
(.info, .hist, .stack) plus copies of the objects it needs into a .q
directory. Ctrl-C, SIGTERM or -t end the run with a final checkpoint;
SIGHUP writes a checkpoint at once. One line on stderr says what the run
does, one at the end what it captured (-q: neither)."""

EPILOG = f"""\
exit status:
  0     the run ended as asked (-t, Ctrl-C, SIGTERM) and lost nothing
  N     with -- CMD: CMD's exit status; if CMD was killed by a signal,
        q-syscollect ends by the same signal (a shell shows 128+N); a run
        that ends first (-t, SIGTERM) sends CMD SIGTERM and waits
  130   with -- CMD, Ctrl-C: CMD gets it from the terminal and is waited
        for (SIGTERM after 10 s or at a second Ctrl-C); q-syscollect then
        ends as interrupted, by SIGINT
  1     the collection could not start (permissions, event, directory)
  2     a usage error
  {EXIT_LOST}     data was lost (sets that could not be written, a collector that
        died for good), whatever CMD did; the last line says what
  126   CMD is not executable, 127 CMD is not found (nothing is written)"""


class UsageError(CollectError):
    """Options that do not go together: exit status 2, as for argparse's own."""


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value < 1):
        raise argparse.ArgumentTypeError(f"not a share from 0 up to 1 (e.g. 0.001): {text!r}")
    return value


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive_size(text: str) -> int:
    value = _size(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def _pids(text: str) -> tuple[int, ...]:
    pids = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) <= 0:
            raise argparse.ArgumentTypeError(f"not a list of process ids (e.g. 1234,5678): "
                                             f"{text!r}")
        pids.append(int(part))
    return tuple(pids)


def _stack_size(text: str) -> int:
    try:
        value = parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not 0 < value < 65536 or value % 8:
        raise argparse.ArgumentTypeError(f"not a multiple of 8 below 65536: {text!r}")
    return value


def _age(text: str) -> float:
    try:
        value = parse_age(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"not a positive age: {text!r}")
    return value


def _age_us(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of microseconds: {text!r}") from None
    if not 0 <= value <= 3.6e9:
        raise argparse.ArgumentTypeError(f"out of range: {text!r}")
    return int(value * 1000)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="q-syscollect", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=RawDescriptionHelpFormatter)
    p.add_argument("-t", dest="duration", type=positive_float, metavar="SECS",
                   help="collect for SECS seconds, then stop")
    p.add_argument("-v", dest="verbose", action="store_true",
                   help="report progress per CPU once a second")
    p.add_argument("-q", dest="quiet", action="store_true",
                   help="no start and summary lines (warnings and errors still show)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("-k", dest="kernel_only", action="store_true",
                      help="kernel only, into per-CPU kernel-cpuN sets")
    mode.add_argument("-u", dest="user_only", action="store_true", help="user space only")
    p.add_argument("-c", dest="frequency", type=positive_int, default=997, metavar="HZ",
                   help="sampling frequency per CPU (default 997: a prime, so sampling does "
                        "not fall into step with periodic work)")
    p.add_argument("-e", dest="event", metavar="EVENT",
                   help="event to sample (default: cycles where the CPU has a PMU, else "
                        "cpu-clock); SYSTEM:NAME for a tracepoint")
    p.add_argument("-l", dest="list_events", action="store_true",
                   help="list the events this machine offers and exit")
    p.add_argument("-d", dest="directory", metavar="DIR",
                   help="output directory (default: $Q_DIR, else ./.q)")
    p.add_argument("--cpus", metavar="LIST", help="CPUs to collect, e.g. 0-3,6 (default: all)")
    p.add_argument("-i", dest="inherit_only", action="store_true",
                   help="only the command and the tasks it creates (works unprivileged)")
    p.add_argument("-p", "--pid", dest="attach", type=_pids, metavar="PID[,PID...]",
                   help="only these running processes and their threads, until the last "
                        "of them exits (unprivileged for your own processes, user space "
                        "only where kernel.perf_event_paranoid is 2)")
    p.add_argument("--children", action="store_true",
                   help="with -p, also the processes they start once attached")
    p.add_argument("--checkpoint", type=positive_float, default=10.0, metavar="SECS",
                   help="write everything collected every SECS seconds (default 10)")
    p.add_argument("--call-graph", choices=("dwarf", "fp", "none"), default="dwarf",
                   help="user stacks: unwound with DWARF CFI from a copy of the stack "
                        "(default; right for plain cc -O2 binaries), from frame pointers, "
                        "or none; the kernel part is always the kernel's callchain")
    p.add_argument("--stack-size", type=_stack_size, default=16384, metavar="BYTES",
                   help="user stack bytes copied per sample for dwarf (default 16384)")
    p.add_argument("--min-samples", type=positive_int, default=100, metavar="N",
                   help="a task needs N samples for a set of its own; tasks that end with "
                        "fewer go into their program's PROG-cpuN set (default 100)")
    p.add_argument("--max-stacks", type=positive_int, default=MAX_STACKS, metavar="N",
                   help="distinct call stacks kept per set and time slice; the rest are "
                        f"counted in one remainder line (default {MAX_STACKS})")
    p.add_argument("--min-stack-share", type=_share, default=0.0, metavar="SHARE",
                   help="at each checkpoint, fold into the remainder line every call stack "
                        "that carried less than SHARE (e.g. 0.001) of its set's samples, "
                        "or was met less than once a minute, since it was first seen, and "
                        "every such kernel address, and every user instruction met less "
                        "than once a minute, into its function's first address: a long run's "
                        "sets stop growing with rare stacks and instructions; each function's "
                        "weight stays exact (the collector's own sets keep their rare "
                        "functions as one line per object; default 0: keep every stack "
                        "and address)")
    p.add_argument("--symlink", action="store_true",
                   help="symlink objects into .q instead of copying them")
    p.add_argument("--mmap-pages", dest="ring_pages", type=positive_int, metavar="PAGES",
                   help="ring buffer data pages per CPU, a power of two")
    p.add_argument("--rotate", type=_age, metavar="SECS",
                   help="start new versions of every set each SECS (or 90m, 1h, 1d): time "
                        "slices that q-view --since/--until select")
    p.add_argument("--max-size", type=_size, metavar="SIZE",
                   help="keep .q under SIZE (e.g. 2G), removing the oldest closed slices; "
                        "a copy that would pass it is not made")
    p.add_argument("--max-age", type=_age, metavar="AGE",
                   help="remove closed slices older than AGE (e.g. 14d)")
    p.add_argument("--compress", action=argparse.BooleanOptionalAction, default=None,
                   help="gzip the data files of closed sets (default: when rotating)")
    p.add_argument("--stuck-after", type=_age, default=120.0, metavar="SECS",
                   help="kill and restart a collector that has not reported for SECS "
                        "(default 120)")
    p.add_argument("--max-object-size", type=_positive_size, default=512 << 20, metavar="SIZE",
                   help="do not copy an object larger than SIZE into .q (default 512M)")
    p.add_argument("--max-map-size", type=_positive_size, default=64 << 20, metavar="SIZE",
                   help="copy at most SIZE of a JIT's /tmp/perf-PID.map, marking the copy "
                        "truncated (default 64M); a map that changes is copied again when it "
                        "grew by a quarter, at most once a minute")
    p.add_argument("--off-cpu", action="store_true",
                   help="also record, per thread, the time off the CPU (blocked, by the stack "
                        "at the switch-out) and waiting for a CPU (sched:sched_switch and "
                        "sched:sched_waking; needs root or CAP_PERFMON and tracefs)")
    p.add_argument("--off-cpu-min", type=_age_us, default=1_000_000, metavar="USECS",
                   help="with --off-cpu, waits shorter than this many microseconds are "
                        "counted without their stack, which is then not unwound (default "
                        "1000; 0 keeps every stack)")
    p.add_argument("--switch-stack-size", type=_stack_size, default=8192, metavar="BYTES",
                   help="bytes of user stack copied per switch with --off-cpu (default 8192)")
    p.add_argument("--push", metavar="URL",
                   help="send each closed slice to a Pyroscope-compatible server (POST "
                        "URL/ingest, pprof) through a q-push process beside the collectors")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="[--] CMD ARGS",
                   help="profile system-wide (or with -i, only this) until CMD exits")
    return p


def config_from(args: argparse.Namespace, argv: list[str], host: Host = LIVE) -> Config:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    online = host.online_cpus()
    if args.cpus:
        try:
            cpus = procfs.parse_cpu_list(args.cpus)
        except ValueError:
            raise UsageError(f"--cpus: not a CPU list: {args.cpus!r}") from None
        missing = sorted(set(cpus) - set(online))
        if missing or not cpus:
            raise UsageError(f"--cpus: CPU {missing[0] if missing else '?'} is not online "
                               f"(online: {','.join(map(str, online))})")
    else:
        cpus = online
    if args.inherit_only and not command:
        raise UsageError("-i needs a command: q-syscollect -i -- CMD ARGS")
    if args.attach and (command or args.inherit_only):
        raise UsageError("-p attaches to running processes: not with -i or a command")
    if args.children and not args.attach:
        raise UsageError("--children goes with -p: q-syscollect -p PID --children")
    if args.ring_pages and args.ring_pages & (args.ring_pages - 1):
        raise UsageError(f"--mmap-pages: not a power of two: {args.ring_pages}")
    directory = args.directory or os.environ.get("Q_DIR") or ".q"
    push = None
    if args.push is not None:
        try:
            push = check_url(args.push)
        except ValueError as e:
            raise UsageError(f"--push: {e}") from None
    return Config(directory=directory, cpus=cpus, command=command, duration=args.duration,
                  verbose=args.verbose, quiet=args.quiet, kernel_only=args.kernel_only,
                  user_only=args.user_only,
                  frequency=args.frequency, event=args.event, inherit_only=args.inherit_only,
                  attach=attach.processes(args.attach or (), host), children=args.children,
                  checkpoint=args.checkpoint, call_graph=args.call_graph,
                  stack_size=args.stack_size,
                  min_samples=args.min_samples, max_stacks=args.max_stacks,
                  min_stack_share=args.min_stack_share,
                  symlink=args.symlink,
                  ring_pages=args.ring_pages, rotate=args.rotate, max_size=args.max_size,
                  max_age=args.max_age, compress=args.compress, stuck_after=args.stuck_after,
                  max_object_size=args.max_object_size, max_map_size=args.max_map_size,
                  off_cpu=args.off_cpu, off_cpu_min_ns=args.off_cpu_min,
                  switch_stack_size=args.switch_stack_size, push=push, argv=argv)


def _print(text: str) -> int:
    """Print to stdout; a reader that went away (``| head``) ends it quietly."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Nothing more can reach the reader; keep the exit-time flush quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    if args.version:
        return _print(f"q-syscollect {package_version()}")
    try:
        if args.list_events:
            return _print("\n".join(events.listing()))
        ending = Supervisor(config_from(args, argv)).run()
    except UsageError as e:
        print(f"q-syscollect: {e}", file=sys.stderr)
        return 2
    except command.NotRunnable as e:
        print(f"q-syscollect: {e}", file=sys.stderr)
        return e.status
    except (CollectError, arch.UnsupportedMachine) as e:
        print(f"q-syscollect: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before the signal handlers were in place
        return 130
    if ending.signal is not None:
        return command.die_of(ending.signal)
    return ending.code


if __name__ == "__main__":
    sys.exit(main())
