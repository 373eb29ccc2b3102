#!/usr/bin/env python3
"""q-tools against perf, side by side in the same runs, with ratios and targets.

Idle and start-up (bench/startup_idle.py), the per-sample cost of
collecting and the cold view (the cost workloads of bench/workloads, one
per CPU, recorded by q-syscollect and perf record --call-graph
dwarf,16384 at once, then one task viewed by q-view and perf report; the
breakdown replayed by bench/collector_cost.py) and the growth of a .q
(bench/long_runs.py's load). CPU is user + system of each tool's process
and its children (wait4), start-up included. Each run prints one table,
the invocation ends with each target's PASS or FAIL per run. Protocol and
how to read it: bench/README.md.

    sudo .venv/bin/python bench/vs_perf.py [--runs 2] [--seconds 10]
        [--long-minutes 1,10] [--growth-args ARGS] [--only 1,2,3,4,5] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, TypeVar

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import collector_cost  # noqa: E402
from collect_vs_perf import _cpu, build_pfan, cpu_of, perf_stats, run_together  # noqa: E402
from long_runs import KINDS, long_run  # noqa: E402

T = TypeVar("T")
RATE = "997"
STACK = "16384"  # user-stack bytes per sample: q-syscollect's default, given to perf too
ITEMS = {1: "per-sample cost", 2: "start-up", 3: ".q growth", 4: "cold view", 5: "idle"}
QUIET = 0.1  # CPUs' worth of other tasks beyond which a run is flagged as disturbed
FLAT = 1.25  # "about flat": the cold view of a 4x longer run at most this much dearer
LIMIT = 600.0  # s a viewer, or a collector past its run, may take (collect_vs_perf.Deadline)


# ---------------------------------------------------------------- results

@dataclass
class Check:
    """One target: ``value`` against ``limit`` (``<`` if strict, else ``<=``)."""

    name: str
    value: float | None
    limit: float
    strict: bool = False
    unit: str = "x"

    @property
    def verdict(self) -> str:
        if self.value is None:
            return "not measured"
        ok = self.value < self.limit if self.strict else self.value <= self.limit
        return "PASS" if ok else "FAIL"

    @property
    def target(self) -> str:
        return f"{'<' if self.strict else '<='} {self.limit:g}{self.unit}"

    def cell(self) -> str:
        if self.value is None:
            return "not measured"
        return f"{_num(self.value)}{self.unit} {self.verdict}"


Breakdown = dict[str, dict[str, tuple[float, float]]]  # workload: mode: (min, median)


@dataclass
class Run:
    rows: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    breakdown: Breakdown | str | None = None  # or why it was not measured
    startup: dict[str, float] | None = None  # measure_startup's figures
    disturbed: bool = False  # other tasks were busy during a collection

    def row(self, what: str, ours: Any, theirs: Any, check: Check | None = None,
            ratio: float | None = None) -> None:
        """A table row; a check of a ratio shows it in the ratio column."""
        target = ""
        if check is not None:
            self.checks.append(check)
            target = f"{check.target}: {check.verdict}"
            if ratio is None and check.unit == "x":
                ratio = check.value
        self.rows.append((what, _cell(ours), _cell(theirs),
                          "" if ratio is None else f"{_num(ratio)}x", target))


def _num(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 100 else f"{x:,.0f}"


def _cell(x: Any) -> str:
    if x is None:
        return "–"
    return _num(x) if isinstance(x, float) else f"{x:,}" if isinstance(x, int) else str(x)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


# ---------------------------------------------------------------- the machine

def tool(name: str) -> list[str]:
    """An installed command of this environment (what users run)."""
    path = Path(sys.executable).parent / name
    module = {"q-syscollect": "qtools.daemon.cli", "q-view": "qtools.viewer.commands.view"}[name]
    return [str(path)] if path.exists() else [sys.executable, "-m", module]


def machine() -> str:
    perf = subprocess.run(["perf", "--version"], capture_output=True, text=True).stdout.strip()
    version = subprocess.run([*tool("q-syscollect"), "--version"], capture_output=True,
                             text=True).stdout.strip()
    return (f"{len(os.sched_getaffinity(0))} CPUs ({platform.machine()}), Linux "
            f"{platform.release()}, Python {platform.python_version()}, {perf}, "
            f"{version or 'q-syscollect'} from {collector_cost._commit()}")


def part(title: str) -> None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n_{time.strftime('%H:%M:%S')} {title}: load average {load}_", flush=True)


# ---------------------------------------------------------------- collect + view

@dataclass
class Pair:
    """One workload recorded by both tools at once, then viewed by each."""

    workload: str
    seconds: float
    q_cpu: float
    perf_cpu: float
    q_samples: int
    q_lost: int
    q_sets: int
    perf_samples: int
    perf_lost: int
    view: dict[str, float]  # q_view_cold_cpu, q_view_warm_cpu, perf_report_cpu
    others: float  # CPU-s of the rest of the machine meanwhile

    def per_sample(self, cpu: float, samples: int) -> float | None:
        return cpu / samples * 1e6 if samples else None


def measure_view(q_dir: Path, perf_data: Path, comm: str, cache_dir: Path) -> dict[str, float]:
    """q-view of one task with an empty symbol cache, then warm; perf report
    of the same task (its defaults); CPU seconds of each, output discarded."""
    shutil.rmtree(cache_dir, ignore_errors=True)
    cache_dir.mkdir(parents=True)
    env = dict(os.environ, Q_CACHE_DIR=str(cache_dir))
    q_view = [*tool("q-view"), str(q_dir), "--comm", comm]
    cold = cpu_of(q_view, env, LIMIT)
    return {"q_view_cold_cpu": cold, "q_view_warm_cpu": cpu_of(q_view, env, LIMIT),
            "perf_report_cpu": cpu_of(["perf", "report", "-i", str(perf_data), "--stdio",
                                       "--comm", comm], None, LIMIT)}


def busy_seconds() -> float:
    """CPU-seconds the whole machine has been busy (not idle, not waiting
    for I/O, not stolen by the hypervisor) since it booted."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq = map(int, f.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _pin(cpu: int) -> Callable[[], None]:
    return lambda: os.sched_setaffinity(0, {cpu})


def collect_pair(work: Path, binary: Path, seconds: float, ncpu: int) -> Pair:
    """``binary`` pinned once per CPU, recorded by both tools side by side.

    The workloads start first and outlive both tools; the two collectors are
    started together as two separate process trees (neither inside the
    other), each for ``seconds``, so wait4 gives each one its own CPU,
    start-up and final write included, and nothing of the other's."""
    comm = binary.name[:15]
    q, data = work / f"{comm}-{seconds:g}.q", work / f"{comm}-{seconds:g}.data"
    busy = busy_seconds()
    loads = [subprocess.Popen([str(binary), str(int(seconds) + 60)], preexec_fn=_pin(cpu))
             for cpu in sorted(os.sched_getaffinity(0))[:ncpu]]
    loads_cpu = 0.0
    try:
        time.sleep(0.2)  # the workloads running before either tool starts
        q_cpu, perf_cpu, q_err = run_together(
            [*tool("q-syscollect"), "-d", str(q), "-t", f"{seconds:g}", "-e", "cpu-clock",
             "-c", RATE, "--stack-size", STACK],
            ["perf", "record", "-q", "-a", "-F", RATE, "-e", "cpu-clock", "--call-graph",
             f"dwarf,{STACK}", "-o", str(data), "--", "sleep", f"{seconds:g}"],
            seconds + LIMIT)
    finally:
        for p in loads:
            p.kill()
            loads_cpu += _cpu(os.wait4(p.pid, 0)[2])
            p.returncode = -9
    others = busy_seconds() - busy - loads_cpu - q_cpu - perf_cpu
    got = re.search(r"captured (\d+) samples \((\d+) lost\) .*; wrote (\d+) set", q_err)
    perf_samples, perf_lost = perf_stats(data)
    view = measure_view(q, data, comm, work / "symcache")
    shutil.rmtree(q, ignore_errors=True)
    data.unlink()
    q_samples, q_lost, q_sets = (int(x) for x in got.groups()) if got else (0, 0, 0)
    return Pair(binary.name, seconds, q_cpu, perf_cpu, q_samples, q_lost, q_sets,
                perf_samples, perf_lost, view, others)


def pair_rows(run: Run, p: Pair, collect_target: float | None) -> None:
    w = f"{p.workload.removeprefix('cost_')} {p.seconds:g} s"
    v = p.view
    run.row(f"{w}: collect CPU-s", p.q_cpu, p.perf_cpu,
            Check(f"q collect / perf record, {w}", _ratio(p.q_cpu, p.perf_cpu),
                  collect_target, strict=True) if collect_target else None,
            _ratio(p.q_cpu, p.perf_cpu))
    run.row(f"{w}: samples (lost)", f"{p.q_samples:,} ({p.q_lost}), {p.q_sets} sets",
            f"{p.perf_samples:,} ({p.perf_lost})")
    # both tools sample the whole machine and pay for whatever else ran
    run.row(f"{w}: the rest of the machine meanwhile, CPU-s", p.others, None)
    if p.others > QUIET * p.seconds:
        run.disturbed = True
        run.notes.append(f"Not a quiet machine: other tasks used {p.others:.1f} CPU-s while "
                         f"{w} was recorded; both collectors sampled them and paid for it.")
    ours, theirs = p.per_sample(p.q_cpu, p.q_samples), p.per_sample(p.perf_cpu, p.perf_samples)
    run.row(f"{w}: collector CPU µs per sample, start-up included", ours, theirs,
            ratio=_ratio(ours, theirs))
    if run.startup is not None:  # this run's start-up CPU of each tool taken off
        ours = p.per_sample(p.q_cpu - run.startup["q_startup_cpu_s"], p.q_samples)
        theirs = p.per_sample(p.perf_cpu - run.startup["perf_startup_cpu_s"], p.perf_samples)
        run.row(f"{w}: collector CPU µs per sample, start-up taken off", ours, theirs,
                ratio=_ratio(ours, theirs))
    run.row(f"{w}: view CPU-s (q-view cold / perf report)", v["q_view_cold_cpu"],
            v["perf_report_cpu"],
            Check(f"q-view cold / perf report, {w}",
                  _ratio(v["q_view_cold_cpu"], v["perf_report_cpu"]), 0.5))
    run.row(f"{w}: view CPU-s (q-view warm / perf report)", v["q_view_warm_cpu"],
            v["perf_report_cpu"], ratio=_ratio(v["q_view_warm_cpu"], v["perf_report_cpu"]))
    ours, theirs = p.q_cpu + v["q_view_cold_cpu"], p.perf_cpu + v["perf_report_cpu"]
    run.row(f"{w}: collect + view CPU-s", ours, theirs,
            Check(f"(q collect + view) / (perf record + report), {w}", _ratio(ours, theirs),
                  0.5))


# ---------------------------------------------------------------- breakdown

REPLAY_LINE = re.compile(r"^\s+(decode\+tasks|decode|full)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")


def capture_streams(data: Path, seconds: int) -> str | None:
    """bench/collector_cost.py capture; None, or why it failed."""
    r = subprocess.run([sys.executable, str(HERE / "collector_cost.py"), "capture", "--data",
                        str(data), "--seconds", str(seconds)], capture_output=True, text=True)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["failed"])[-1]


def replay_streams(data: Path, runs: int) -> Breakdown | str:
    """bench/collector_cost.py replay: {workload: {mode: (min, median)}} in
    µs per sample, or why it failed."""
    r = subprocess.run([sys.executable, str(HERE / "collector_cost.py"), "replay", "--data",
                        str(data), "-n", str(runs), "shallow", "deep"],
                       capture_output=True, text=True)
    if r.returncode:
        return (r.stderr.strip().splitlines() or ["failed"])[-1]
    out: Breakdown = {}
    workload = ""
    for line in r.stdout.splitlines():
        if m := re.match(r"^(\w+): \d+ samples", line):
            workload = m[1]
            out[workload] = {}
        elif (m := REPLAY_LINE.match(line)) and workload:
            out[workload][m[1]] = (float(m[2]), float(m[3]))
    return out


def print_breakdown(result: Breakdown | str) -> None:
    if isinstance(result, str):
        print(f"\nper-sample breakdown: not measured ({result})")
        return
    print("\nPer-sample breakdown (bench/collector_cost.py replay), CPU µs per sample, "
          "min / median:\n")
    print("| stream | decode | decode + task table | full collector |")
    print("|---|---|---|---|")
    for workload, modes in result.items():
        cells = [f"{modes[m][0]:.1f} / {modes[m][1]:.1f}" if m in modes else "–"
                 for m in ("decode", "decode+tasks", "full")]
        print(f"| {workload} | {' | '.join(cells)} |")


# ---------------------------------------------------------------- start-up and idle

def startup_idle() -> ModuleType | str:
    """bench/startup_idle.py, or why it cannot be used."""
    try:
        import startup_idle as module
    except ImportError as e:
        return "bench/startup_idle.py missing" if getattr(e, "name", "") == "startup_idle" \
            else f"bench/startup_idle.py: {e}"
    return module


def _extra(run: Run, got: dict[str, float], what: str, q_key: str, perf_key: str) -> None:
    """A row of figures the module may give beside the targets' own."""
    if q_key in got or perf_key in got:
        run.row(what, got.get(q_key), got.get(perf_key), ratio=_ratio(got.get(q_key),
                                                                       got.get(perf_key)))


PERF_IDLE_SECONDS = 120.0


def idle_part(run: Run, seconds: float) -> None:
    module = startup_idle()
    name = "idle: q-syscollect % of one CPU"
    if isinstance(module, str):
        run.notes.append(f"idle: not measured ({module})")
        run.checks.append(Check(name, None, 0.05, unit="%"))
        return
    # q-syscollect over the window the target names (at least 10 minutes:
    # its first minutes copy what the machine's occasional programs map);
    # perf record, whose cost is the same from its first minute, over less.
    perf_seconds = min(seconds, PERF_IDLE_SECONDS)
    got = module.measure_idle(seconds=seconds, perf_seconds=perf_seconds)
    run.row(f"idle (q {seconds:g} s, perf {perf_seconds:g} s): % of one CPU",
            got["q_pct_one_cpu"], got["perf_pct_one_cpu"],
            Check(name, got["q_pct_one_cpu"], 0.05, unit="%"))
    _extra(run, got, "idle: wake-ups per second", "q_wakeups_per_s", "perf_wakeups_per_s")


def startup_part(run: Run, runs: int) -> None:
    module = startup_idle()
    names = ("start-up: q first sample s", "start-up CPU: q / perf record")
    if isinstance(module, str):
        run.notes.append(f"start-up: not measured ({module})")
        run.checks += [Check(names[0], None, 0.3, unit=" s"), Check(names[1], None, 1.0)]
        return
    got = run.startup = module.measure_startup(runs=runs)
    run.row("start-up: first sample, s", got["q_first_sample_s"], got["perf_first_sample_s"],
            Check(names[0], got["q_first_sample_s"], 0.3, unit=" s"))
    _extra(run, got, "start-up: first sample system-wide, s", "q_system_first_sample_s",
           "perf_system_first_sample_s")
    run.row("start-up: CPU-s", got["q_startup_cpu_s"], got["perf_startup_cpu_s"],
            Check(names[1], _ratio(got["q_startup_cpu_s"], got["perf_startup_cpu_s"]), 1.0))
    _extra(run, got, "start-up: CPU-s of a run of one command (-i)", "q_inherit_cpu_s",
           "perf_inherit_cpu_s")


# ---------------------------------------------------------------- growth

def growth_part(run: Run, work: Path, pfan: Path, ncpu: int, minutes: list[float],
                extra: list[str]) -> None:
    sizes = []
    for m in minutes:
        part(f"growth: {m:g} min of load, q-syscollect {' '.join(extra)} and perf record -a -g")
        r = long_run(work, pfan, ncpu, m, view=False, extra=extra)
        sizes.append(r)
        run.row(f"growth {m:g} min: collect CPU-s", r["q_cpu"], r["perf_cpu"],
                ratio=_ratio(r["q_cpu"], r["perf_cpu"]))
        run.row(f"growth {m:g} min: .q sets / perf.data bytes ({r['n_sets']} sets)", r["sets"],
                r["perf_data"])
    first, last = sizes[0], sizes[-1]
    label = f"{last['minutes']:g} min / {first['minutes']:g} min"
    run.row(f"growth: .q sets {label}", last["sets"], first["sets"],
            Check(f".q sets {label}", _ratio(last["sets"], first["sets"]), 1.2))
    kinds = [*KINDS, "other"]
    run.notes.append("\n".join(
        ["Bytes of the .q's sets by kind; object copies (dot-files) apart:", "",
         "| run | " + " | ".join(f".{k}" if k in KINDS else k for k in kinds) + " | copies |",
         "|---|" + "---|" * (len(kinds) + 1)]
        + [f"| {r['minutes']:g} min | " + " | ".join(f"{r['kinds'][k]:,}" for k in kinds)
           + f" | {r['copies']:,} |" for r in sizes]))
    # system-wide: other users' programs land in the .q too
    run.notes.append(f"Programs with the most set bytes after {last['minutes']:g} min: "
                     + ", ".join(f"{prog} {size:,}" for prog, size
                                 in list(last["programs"].items())[:8]) + ".")


# ---------------------------------------------------------------- a run

@dataclass
class Setup:
    work: Path
    ncpu: int
    binaries: dict[str, Path]
    pfan: Path
    streams: Path
    captured: str | None = "not yet"  # None once captured, else why not


def guarded(run: Run, what: str, fn: Callable[..., T], *args: Any) -> T | None:
    """``fn(*args)``; a part that fails (a tool's error, a tool killed past
    its deadline, a bug: its traceback on stderr) is noted in the run, and
    the run goes on."""
    try:
        return fn(*args)
    except (SystemExit, Exception) as e:
        if not isinstance(e, SystemExit):
            traceback.print_exc()
        run.notes.append(f"{what}: not measured ({e or type(e).__name__})")
        print(f"{what} failed: {e}", file=sys.stderr, flush=True)
        return None


def one_run(n: int, args: argparse.Namespace, s: Setup) -> Run:
    run = Run()
    only = args.only
    if 5 in only:
        part(f"run {n}: idle, {args.idle_seconds:g} s")
        guarded(run, "idle", idle_part, run, args.idle_seconds)
    if 2 in only:
        part(f"run {n}: start-up, {args.startup_runs} runs")
        guarded(run, "start-up", startup_part, run, args.startup_runs)
    pairs: dict[str, Pair | None] = {}
    if only & {1, 4}:
        for name, binary in s.binaries.items():
            part(f"run {n}: {name} workload, {args.seconds:g} s, both collectors, then views")
            pair = pairs[name] = guarded(run, f"{name} {args.seconds:g} s", collect_pair,
                                         s.work, binary, args.seconds, s.ncpu)
            if pair:
                pair_rows(run, pair, 1.0 if name == "deep" else None)
    if 4 in only:
        part(f"run {n}: deep workload, {args.view_seconds:g} s, both collectors, then views")
        longer = guarded(run, f"deep {args.view_seconds:g} s", collect_pair, s.work,
                         s.binaries["deep"], args.view_seconds, s.ncpu)
        shorter = pairs.get("deep")
        if longer:
            pair_rows(run, longer, None)
        a, b = (longer.view, shorter.view) if longer and shorter else ({}, {})
        run.row(f"cold view {args.view_seconds:g} s / {args.seconds:g} s (deep)",
                _ratio(a.get("q_view_cold_cpu"), b.get("q_view_cold_cpu")),
                _ratio(a.get("perf_report_cpu"), b.get("perf_report_cpu")),
                Check(f"q-view cold {args.view_seconds:g} s / {args.seconds:g} s, deep",
                      _ratio(a.get("q_view_cold_cpu"), b.get("q_view_cold_cpu")), FLAT))
    if 1 in only:
        if s.captured == "not yet":
            part("per-sample breakdown: capturing the streams (once)")
            s.captured = capture_streams(s.streams, args.capture_seconds)
        part(f"run {n}: per-sample breakdown, replay -n {args.replays}")
        run.breakdown = s.captured or replay_streams(s.streams, args.replays)
    if 3 in only:
        guarded(run, "growth", growth_part, run, s.work, s.pfan, s.ncpu, args.long_minutes,
                args.growth_args)
    return run


def print_run(n: int, run: Run) -> None:
    print(f"\n#### Run {n}\n")
    print("| measure | q-tools | perf | ratio | target |")
    print("|---|---|---|---|---|")
    for row in run.rows:
        print("| " + " | ".join(row) + " |")
    if run.breakdown is not None:
        print_breakdown(run.breakdown)
    for note in run.notes:
        print(f"\n{note}")
    sys.stdout.flush()


def print_summary(runs: list[Run]) -> None:
    print("\n#### Summary\n")
    print("| target | " + " | ".join(f"run {i}" for i in range(1, len(runs) + 1)) + " |")
    print("|---|" + "---|" * len(runs))
    names: list[str] = []
    for run in runs:
        names += [c.name for c in run.checks if c.name not in names]
    for name in names:
        cells, target = [], ""
        for run in runs:
            check = next((c for c in run.checks if c.name == name), None)
            cells.append(check.cell() if check else "–")
            target = target or (check.target if check else "")
        print(f"| {name} {target} | " + " | ".join(cells) + " |")
    disturbed = [str(i) for i, run in enumerate(runs, 1) if run.disturbed]
    if disturbed:
        print(f"\nNot a quiet machine during run {', '.join(disturbed)} (see its notes): "
              "those figures are not the tools' alone.")


# ---------------------------------------------------------------- main

def _numbers(text: str, kind: Callable[[str], Any]) -> list[Any]:
    return [kind(x) for x in text.split(",") if x.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2, help="whole runs, one table each (2)")
    ap.add_argument("--seconds", type=float, help="per-sample cost runs (10; --quick 3)")
    ap.add_argument("--long-minutes", help="growth runs, minutes (1,10; --quick 0.33,0.67)")
    ap.add_argument("--growth-args", default="", help="more q-syscollect arguments for the "
                    "growth runs, e.g. \"--min-stack-share 0.001\" (the service's)")
    ap.add_argument("--only", default="1,2,3,4,5", help="items: 1 per-sample cost, 2 start-up, "
                    "3 .q growth, 4 cold view, 5 idle (default all)")
    ap.add_argument("--idle-seconds", type=float, help="q-syscollect's idle window (600: the "
                    "target's 10 minutes; perf record's is at most 120; --quick 10)")
    ap.add_argument("--quick", action="store_true", help="a smoke check: everything shortened")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("vs_perf.py needs root (system-wide perf_events)")
    if shutil.which("perf") is None:
        sys.exit("perf is not installed (Debian: linux-perf)")
    q = args.quick
    args.only = set(_numbers(args.only, int))
    if not args.only <= set(ITEMS):
        sys.exit(f"--only: items are {', '.join(map(str, ITEMS))}")
    args.seconds = args.seconds or (3.0 if q else 10.0)
    args.view_seconds = 4 * args.seconds
    args.long_minutes = _numbers(args.long_minutes or ("0.3333,0.6667" if q else "1,10"), float)
    args.idle_seconds = args.idle_seconds or (10.0 if q else 600.0)
    args.growth_args = args.growth_args.split()
    args.startup_runs = 1 if q else 3
    args.capture_seconds = 2 if q else 5
    args.replays = 2 if q else 5

    work = Path(tempfile.mkdtemp(prefix="qtools-vsperf-"))
    try:
        ncpu = len(os.sched_getaffinity(0))
        print(f"vs_perf at {time.strftime('%Y-%m-%d %H:%M')}: {machine()}")
        print(f"items {', '.join(f'{i} {ITEMS[i]}' for i in sorted(args.only))}; "
              f"{args.runs} run(s); {args.seconds:g} s and {args.view_seconds:g} s collections, "
              f"growth {', '.join(f'{m:g}' for m in args.long_minutes)} min"
              f"{' with ' + ' '.join(args.growth_args) if args.growth_args else ''}, idle "
              f"{args.idle_seconds:g} s; {RATE} Hz cpu-clock, {STACK}-byte user stacks")
        bindir = work / "bin"
        s = Setup(work, ncpu, {name: Path(collector_cost.build(name, bindir))
                               for name in collector_cost.WORKLOADS},
                  build_pfan(work), work / "streams")
        runs = []
        for n in range(1, args.runs + 1):
            runs.append(one_run(n, args, s))
            print_run(n, runs[-1])
        print_summary(runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
