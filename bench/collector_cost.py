#!/usr/bin/env python3
"""The collector's CPU time per sample, measured by replaying a recorded stream.

The machine is shared and loaded, so the measure is not the wall time of a
live run but the CPU time (time.process_time) of feeding the same recorded
records through daemon.collector.CpuCollector, N times.

capture (root: perf_event_open):
    Builds the two workloads of bench/workloads with plain ``cc -O2`` into
    DATA/bin (kept: the replay's unwinder reads their CFI through the path the
    MMAP2 records name, and the copier checks the file's inode):
      shallow  main calling four small leaf functions in a loop;
      deep     a recursion 30 frames deep that spins in its leaf.
    Runs each pinned to one CPU under the event source ``q-syscollect -i --
    CMD`` opens by default (DWARF: registers + 16 KiB of stack, 997 Hz,
    enable_on_exec, side-band from every CPU) and saves every record as read,
    batch by batch, with the SampleLayout, into DATA/<workload>.stream.

replay:
    For each stream: decode only (decode + sort by time, as a drain does),
    decode + task table (records applied, samples looked up), and the full
    collector (DWARF unwinder set up as the collector process sets it up,
    a temporary .q, one final checkpoint), each N times after one untimed
    warm-up; prints min / median / max CPU microseconds per sample.
    --keep DIR keeps the .q the last full replay of each stream wrote, as
    DIR/<workload>.q.

The workload ``system`` is captured system-wide (every task on the CPU,
as the service collects) with ``--off-cpu``: the shallow loop, a Python
loop and a shell starting ``sleep`` 50 times a second, all pinned to the
CPU, with whatever else the machine runs there; its replay takes the
side-band records, the scheduler's tracepoints and processes first seen in
a sample (stubs: the replay's host shows none) through the collector as a
busy machine does. Its replays stop the collector's monotonic clock at the
capture's end, so the waits still going then are counted alike in each.

The workload ``idle`` is no capture but made here from the ABI: what an
idle CPU's cpu-clock delivers, IDLE_SAMPLES samples of the idle task (pid
0, kernel mode, a kernel callchain of IDLE_FRAMES frames, no user
registers or stack) in drains of 48 (97 Hz for the collector's 0.5 s
drain interval), laid out as the shallow stream (DATA/shallow.stream).

compare A.q B.q:
    The sets two replays wrote, side by side: .hist/.stack/.edge contents
    (lines in any order) and each .info minus the fields that carry times or
    run ids; exit status 1 if any differ.

Usage:
    .venv/bin/python bench/collector_cost.py capture [--data DIR] [--seconds S] [--cpu N]
    .venv/bin/python bench/collector_cost.py replay [--data DIR] [-n N] [--keep DIR] [WORKLOAD...]
    (WORKLOAD: shallow, deep, system, idle; default shallow and deep)
    .venv/bin/python bench/collector_cost.py compare A.q B.q

Nothing here asserts on time; the figures go into bench/README.md by hand.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import io
import os
import pickle
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from qtools.daemon.machine import procfs
from qtools.daemon.decode.layout import SampleLayout
from qtools.daemon.decode.records import Comm, Mmap, RecordError, Sample, Task
from qtools.qformat import QDir

HERE = Path(__file__).resolve().parent
WORKLOADS = {"shallow": HERE / "workloads" / "cost_shallow.c",
             "deep": HERE / "workloads" / "cost_deep.c"}
CAPTURED = (*WORKLOADS, "system")  # what capture records
PYTHON_LOOP = """import sys, time
def leaf(n):
    s = 0
    for i in range(n):
        s += i * i
    return s
def mid(n):
    return leaf(n) + leaf(n // 2)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    mid(2000)
"""
SLEEPER = "end=$(($(date +%s) + $1)); while [ $(date +%s) -lt $end ]; do sleep 0.02; done"
DEFAULT_DATA = Path(tempfile.gettempdir()) / "q-bench-data"  # streams, binaries, .q copies
FORMAT = 1  # of the .stream files
RECORD_SAMPLE = 9  # PERF_RECORD_SAMPLE
_HEADER = struct.Struct("<IHH")

# ---------------------------------------------------------------- the stream

@dataclass
class Stream:
    """One captured run: every record as read from the rings, in batches."""

    workload: str
    binary: str  # the workload binary the MMAP2 records name
    binary_sha256: str
    layout: dict[str, Any]  # SampleLayout's constructor arguments
    vdso: bytes | None  # the capturing process's vdso image (the kernel's, same for all)
    batches: list[list[bytes]]
    cpu: int
    pid: int
    captured: str  # date, kernel, commit: what the figures are of
    # system-wide streams (``system``): every task on the CPU, --off-cpu
    system: bool = False
    # extra events: (id, SampleLayout's constructor arguments, tracepoint, with its stack)
    events: list[tuple[int, dict[str, Any], str, bool]] = field(default_factory=list)
    ended_ns: int | None = None  # CLOCK_MONOTONIC when the capture ended

    @property
    def samples(self) -> int:
        return sum(1 for batch in self.batches for rec in batch
                   if _HEADER.unpack_from(rec)[0] == RECORD_SAMPLE)

    @property
    def records(self) -> int:
        return sum(len(batch) for batch in self.batches)

    def sample_layout(self) -> SampleLayout:
        return SampleLayout(**self.layout)

    def layouts(self) -> Any:
        """The main event's layout and every extra event's, by id."""
        from qtools.daemon.decode.tracepoints import BY_NAME, EventRoute, Layouts
        out = Layouts(self.sample_layout())
        for event_id, layout, name, with_stack in self.events:
            out.add(event_id, SampleLayout(**layout), EventRoute(BY_NAME[name], with_stack))
        return out

def save(stream: Stream, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        pickle.dump({"format": FORMAT, "stream": stream.__dict__}, f,
                    protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)

def load(path: Path) -> Stream:
    with open(path, "rb") as f:
        data = pickle.load(f)  # our own file (see capture), never another's
    if data.get("format") != FORMAT:
        sys.exit(f"{path}: not a stream of format {FORMAT}")
    return Stream(**data["stream"])

IDLE_SAMPLES = 100_000
IDLE_FRAMES = 12  # a typical idle callchain: the wait instruction up to the idle loop's start
IDLE_DRAIN = 48  # samples of one CPU per drain at 97 Hz
IDLE_PERIOD = 10_309_278  # ns: 97 Hz


def idle_stream(like: Stream) -> Stream:
    """What an idle CPU's cpu-clock delivers, laid out as ``like``."""
    from qtools.daemon.decode import synth
    from qtools.daemon.kernel import abi

    layout = like.sample_layout()
    wait = 0xFFFF_FFFF_81E0_0000  # a kernel text address: where the CPU waits
    callers = tuple(0xFFFF_FFFF_8100_0000 + 0x1_0000 * i + 0x40 * i
                    for i in range(1, IDLE_FRAMES))
    batches: list[list[bytes]] = []
    for n in range(IDLE_SAMPLES):
        ip = wait + 4 * (n % 3)  # before, at and after the halt
        rec = synth.encode_sample(layout, Sample(
            misc=abi.MISC_KERNEL, ip=ip, pid=0, tid=0, time=1_000_000 + n * IDLE_PERIOD,
            cpu=like.cpu, period=IDLE_PERIOD, callchain=(abi.CONTEXT_KERNEL, ip) + callers,
            cgroup=1))
        if n % IDLE_DRAIN == 0:
            batches.append([])
        batches[-1].append(rec)
    return Stream("idle", "", "", like.layout, like.vdso, batches, like.cpu, 0,
                  f"made from the ABI like {like.workload} ({like.captured})")


def ring_views(batches: list[list[bytes]]) -> list[list[memoryview]]:
    """Each batch as RingReader.read hands records over: views into one
    buffer (the ring), not bytes objects of their own, so a sample's user
    stack is sliced, not copied, as in a live drain."""
    out = []
    for batch in batches:
        buf = memoryview(bytearray(b"".join(batch)))
        views, off = [], 0
        for rec in batch:
            views.append(buf[off:off + len(rec)])
            off += len(rec)
        out.append(views)
    return out


def stream_of(data: Path, name: str) -> Stream:
    return idle_stream(load(data / "shallow.stream")) if name == "idle" else \
        load(data / f"{name}.stream")


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()

def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(HERE), "describe", "--always", "--dirty"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"

# ---------------------------------------------------------------- capture

def build(name: str, bindir: Path) -> str:
    bindir.mkdir(parents=True, exist_ok=True)
    out = bindir / f"cost_{name}"
    subprocess.run(["cc", "-O2", "-o", str(out), str(WORKLOADS[name])], check=True)
    return str(out)

def capture_one(name: str, binary: str, seconds: int, cpu: int) -> Stream:
    """Run ``binary`` pinned to ``cpu`` under the source q-syscollect -i opens."""
    from qtools.daemon import command
    from qtools.daemon.config import Config
    from qtools.daemon.plan import plan
    from qtools.daemon.kernel.source import PerfSource

    cpus = procfs.online_cpus()
    cfg = Config(directory="/nonexistent", cpus=cpus, command=[binary, str(seconds)],
                 inherit_only=True)  # every other option as q-syscollect's defaults
    spec = plan(cfg, lambda text: print(f"note: {text}", file=sys.stderr))
    pid, release_fd, err_fd = command.spawn(cfg.command)
    os.sched_setaffinity(pid, {cpu})  # inherited across the exec
    source = PerfSource(spec._replace(target_pid=pid, cpu=cpu))
    batches: list[list[bytes]] = []
    try:
        error = command.release(release_fd, err_fd)
        if error:
            sys.exit(f"cannot run {binary}: {error}")
        status = None
        while status is None:
            source.wait(0.5)  # the collector's drain interval
            batch = [bytes(rec) for rec in source.read()]
            source.release()
            if batch:
                batches.append(batch)
            done, wstatus = os.waitpid(pid, os.WNOHANG)
            status = wstatus if done else None
        batch = [bytes(rec) for rec in source.read()]
        source.release()
        if batch:
            batches.append(batch)
    finally:
        source.close()
    vdso = procfs.own_vdso()
    return Stream(name, binary, _sha256(binary), _layout_args(source.layout.main),
                  vdso[1] if vdso else None, batches, cpu, pid,
                  f"{time.strftime('%Y-%m-%d %H:%M')} {platform.release()} {_commit()}")


def _layout_args(layout: SampleLayout) -> dict[str, Any]:
    return {"sample_type": layout.sample_type, "read_format": layout.read_format,
            "branch_sample_type": layout.branch_sample_type,
            "regs_user_mask": layout.regs_user_mask, "regs_intr_mask": layout.regs_intr_mask,
            "sample_id_all": layout.sample_id_all}


def capture_system(binary: str, seconds: int, cpu: int) -> Stream:
    """Every task on ``cpu`` for ``seconds``, as the service collects it
    with --off-cpu, while the shallow loop, a Python loop and a shell
    starting ``sleep`` run pinned to that CPU."""
    from qtools.daemon.config import Config
    from qtools.daemon.plan import plan
    from qtools.daemon.kernel.source import PerfSource

    cfg = Config(directory="/nonexistent", cpus=procfs.online_cpus(), off_cpu=True)
    spec = plan(cfg, lambda text: print(f"note: {text}", file=sys.stderr))
    source = PerfSource(spec._replace(cpu=cpu))
    batches: list[list[bytes]] = []
    work: list[subprocess.Popen[bytes]] = []
    try:
        source.enable()
        for argv in ([binary, str(seconds)], [sys.executable, "-c", PYTHON_LOOP, str(seconds)],
                     ["sh", "-c", SLEEPER, "sleeper", str(seconds)]):
            work.append(subprocess.Popen(argv, preexec_fn=lambda: os.sched_setaffinity(0, {cpu})))
        while any(p.poll() is None for p in work):
            source.wait(0.5)  # the collector's drain interval
            batch = [bytes(rec) for rec in source.read()]
            source.release()
            if batch:
                batches.append(batch)
        batch = [bytes(rec) for rec in source.read()]
        source.release()
        if batch:
            batches.append(batch)
        ended = time.monotonic_ns()
    finally:
        for p in work:
            if p.poll() is None:
                p.kill()
                p.wait()
        source.close()
    layouts = source.layout
    events = [(event_id, _layout_args(layout), layouts.routes[event_id].route.name,
               layouts.routes[event_id].with_stack) for event_id, layout in layouts.by_id.items()]
    vdso = procfs.own_vdso()
    return Stream("system", binary, _sha256(binary), _layout_args(layouts.main),
                  vdso[1] if vdso else None, batches, cpu, -1,
                  f"{time.strftime('%Y-%m-%d %H:%M')} {platform.release()} {_commit()}",
                  system=True, events=events, ended_ns=ended)


def cmd_capture(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        sys.exit("capture needs root (perf_event_open with kernel callchains)")
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    for name in args.workloads:
        if name == "system":
            stream = capture_system(build("shallow", data / "bin"), args.seconds, args.cpu)
        else:
            stream = capture_one(name, build(name, data / "bin"), args.seconds, args.cpu)
        save(stream, data / f"{name}.stream")
        print(f"{name}: {stream.samples} samples, {stream.records} records in "
              f"{len(stream.batches)} batches -> {data / f'{name}.stream'}")
    return 0

# ---------------------------------------------------------------- replay
#
# Everything that knows how the collector is built is in this section, so
# that it is the one place to adapt when the collector's constructor changes.

def replay_host() -> Any:
    """The host a replay sees: no process at all (every recorded pid is
    gone, whatever holds it on this machine now), files by plain path only
    (the workload binaries and libraries the unwinder reads)."""
    from qtools.daemon.machine.host import StaticHost
    return StaticHost(files=None)

def collector_for(stream: Stream, qdir: QDir, out: io.StringIO,
                  views: list[list[memoryview]] | None = None) -> Any:
    """A CpuCollector on ``stream`` as the collector process (daemon/child.py)
    builds it for ``q-syscollect -i -- CMD`` with its defaults, except: a
    ReplaySource, no kallsyms copy (the host's, not the stream's), and the
    recorded vdso image."""
    from qtools.daemon.sets.checkpoint import RunInfo
    from qtools.daemon.collector import CpuCollector, Options
    from qtools.daemon.config import Config
    from qtools.daemon.frames.dwarf import DwarfFrames
    from qtools.daemon.sets.objects import CopyLimits, ObjectCopier
    from qtools.daemon.kernel.source import ReplaySource

    if stream.system:
        cfg = Config(directory=str(qdir.path), cpus=[stream.cpu], off_cpu=True)
        argv = ["q-syscollect", "--off-cpu"]
    else:
        cfg = Config(directory=str(qdir.path), cpus=[stream.cpu], command=[stream.binary],
                     inherit_only=True)
        argv = ["q-syscollect", "-i", "--", stream.binary]
    source = ReplaySource(stream.layouts(),
                          views if views is not None else ring_views(stream.batches))
    opts = Options(stream.cpu, kernel_only=cfg.kernel_only, checkpoint_interval=cfg.checkpoint,
                   verbose=cfg.verbose, min_samples=cfg.min_samples, max_stacks=cfg.max_stacks,
                   stacks=cfg.call_graph != "none", rotate=cfg.rotate,
                   compress=cfg.compress_closed,
                   cpu_stats=False,  # -i: none; system-wide: not the live machine's
                   off_cpu=stream.system, off_cpu_min_ns=cfg.off_cpu_min_ns)
    host = replay_host()
    copier = ObjectCopier(qdir, cfg.symlink, CopyLimits(object_size=cfg.max_object_size,
                                                    map_size=cfg.max_map_size), out, host)
    frames = DwarfFrames(qdir, copier, stream.vdso, set(), -1)  # no collector pids recorded
    run = RunInfo(argv, "cpu-clock", "seconds", 1e-9,
                  "dwarf", {"machine": platform.machine()}, None, None,
                  run_id="replay", run_start=0.0)
    return CpuCollector(opts, run, source, qdir, copier, user_frames=frames, out=out, host=host)

def replay_full(stream: Stream, qpath: Path) -> float:
    """CPU seconds of the whole collector on the stream, with one final
    checkpoint into a new .q at ``qpath``; the loop of CpuCollector.run
    without its clock: a drain per batch, copies advanced between drains."""
    out = io.StringIO()
    views = ring_views(stream.batches)  # as the ring holds them, made untimed
    with QDir.open(qpath, create=True) as qdir, stopped_clock(stream.ended_ns):
        gc.collect()
        t0 = time.process_time()
        collector = collector_for(stream, qdir, out, views)
        while not collector.source.exhausted:
            collector.step()
            collector.copier.work()
        collector.step()
        ok = collector.checkpoint(final=True)
        collector.copier.close()
        spent = time.process_time() - t0
    if not ok or out.getvalue():
        print(f"{stream.workload}: the collector said: {out.getvalue().strip()}", file=sys.stderr)
    return spent

@contextmanager
def stopped_clock(ns: int | None) -> Iterator[None]:
    """CLOCK_MONOTONIC reads ``ns`` meanwhile (None: as it is). The
    collector counts waits still going up to the time of its last drain;
    in a replay that is the capture's end, not today, in every replay alike."""
    if ns is None:
        yield
        return
    real = time.monotonic_ns
    time.monotonic_ns = lambda: ns  # type: ignore[assignment]
    try:
        yield
    finally:
        time.monotonic_ns = real  # type: ignore[assignment]


def scratch_replay(stream: Stream) -> float:
    """replay_full into a .q that is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="q-cost-") as tmp:
        return replay_full(stream, Path(tmp) / "q")

def _time(rec: object) -> int:
    if isinstance(rec, Sample):
        return rec.time
    sid = getattr(rec, "sid", None)
    return sid.time if sid is not None else 0

def replay_decode(stream: Stream, tasks: bool) -> float:
    """CPU seconds of decoding each batch and sorting it by time, as a drain
    does; with ``tasks``, also of applying the side-band records to a task
    table and looking each sample's process up in it."""
    from qtools.daemon.machine.tasks import TaskTable

    layout = stream.sample_layout()
    views = ring_views(stream.batches)
    layouts = stream.layouts()
    gc.collect()
    t0 = time.process_time()
    decode = layouts.decode
    # the idle task's samples taken apart undecoded, as the collector's drain
    # does: in one pass with the decoding since decode/drain.py, before
    # that by idle.split, and before that not at all
    try:
        from qtools.daemon.decode.drain import decode_drain
    except ImportError:
        decode_drain = None
    try:
        from qtools.daemon.decode.idle import split
    except ImportError:
        split = None
    table = TaskTable(owner=replay_host().owner)
    for batch in views:
        if decode_drain is not None:
            decoded = decode_drain(batch, layouts).records
        else:
            decoded = []
            rest = split(batch, layout.idle_probe, ())[0] if split is not None else batch
            for data in rest:
                try:
                    decoded.append(decode(data))
                except RecordError:
                    pass
        decoded.sort(key=_time)
        if not tasks:
            continue
        for rec in decoded:
            if isinstance(rec, Sample):
                table.get(rec.pid)
            elif isinstance(rec, (Comm, Task, Mmap)):
                table.apply(rec)
    return time.process_time() - t0

# ---------------------------------------------------------------- reporting

MODES = ("decode", "decode+tasks", "full")

def measure(stream: Stream, mode: str, runs: int, keep: Path | None) -> list[float]:
    """Microseconds per sample of ``runs`` replays, after one untimed warm-up."""
    spent: list[float] = []
    with tempfile.TemporaryDirectory(prefix="q-cost-") as tmp:
        for i in range(runs + 1):
            if mode == "full":
                qpath = Path(tmp) / f"run{i}.q"
                seconds = replay_full(stream, qpath)
                if i == runs and keep is not None:
                    keep.mkdir(parents=True, exist_ok=True)
                    target = keep / f"{stream.workload}.q"
                    shutil.rmtree(target, ignore_errors=True)
                    shutil.copytree(qpath, target, symlinks=True)
                shutil.rmtree(qpath)
            else:
                seconds = replay_decode(stream, tasks=mode == "decode+tasks")
            if i:
                spent.append(seconds / stream.samples * 1e6)
    return spent

def check_binary(stream: Stream) -> None:
    if not stream.binary:
        return  # made here, mapping nothing
    try:
        same = _sha256(stream.binary) == stream.binary_sha256
    except OSError:
        same = False
    if not same:
        sys.exit(f"{stream.binary}: missing or rebuilt since the capture; the replay needs "
                 "the very binary the stream maps (capture again)")

TUNABLE = "glibc.malloc.trim_threshold=1073741824"

def steady_heap() -> None:
    """Re-run this process with glibc's heap never handed back to the kernel.

    Each decoded sample copies its 16 KiB of stack; when a batch's copies
    are freed, whether glibc trims the heap top (and the next batch faults
    the pages in again) depends on which object happens to sit on top: a
    few microseconds per sample that come and go with unrelated changes.
    A long-running collector's heap top is pinned by what it keeps."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if "trim_threshold" in tunables:
        return
    env = dict(os.environ, GLIBC_TUNABLES=":".join(filter(None, [tunables, TUNABLE])))
    os.execve(sys.executable, [sys.executable, *sys.argv], env)

def cmd_replay(args: argparse.Namespace) -> int:
    steady_heap()
    data = Path(args.data)
    keep = Path(args.keep) if args.keep else None
    from qtools.daemon import collector
    print(f"replay at {time.strftime('%Y-%m-%d %H:%M')} of {_commit()} "
          f"({Path(collector.__file__).parents[1]}), "
          f"{args.runs} runs + 1 warm-up, CPU microseconds per sample (min / median / max)"
          f"\n(GLIBC_TUNABLES={os.environ['GLIBC_TUNABLES']})")
    for name in args.workloads:
        stream = stream_of(data, name)
        check_binary(stream)
        print(f"{name}: {stream.samples} samples, {stream.records} records, "
              f"{len(stream.batches)} batches (captured {stream.captured})")
        for mode in args.modes:
            us = measure(stream, mode, args.runs, keep)
            print(f"  {mode:13} {min(us):8.1f} {statistics.median(us):8.1f} {max(us):8.1f}",
                  flush=True)
    return 0

# ---------------------------------------------------------------- breakdown

def marginal(stream: Stream, runs: int) -> tuple[float, float]:
    """(µs per sample of the full replay, µs per sample added by the
    samples of batches 5 on): the second leaves out what a replay costs
    once (the collector's set-up, the first walks and CFI reads, the
    final checkpoint), so it is the per-sample cost of a long run."""
    from dataclasses import replace
    few = replace(stream, batches=stream.batches[:4])
    full = min(scratch_replay(stream) for _ in range(runs))
    part = min(scratch_replay(few) for _ in range(runs))
    return (full / stream.samples * 1e6,
            (full - part) / (stream.samples - few.samples) * 1e6)


# (label, function names whose cumulative time it is, files they are in ("":
# any)) of a drain's work. The sample handlers and the drain as the
# collector names them now (SamplePath.sample and recalled, Router.step) or
# named them before it was made of parts (CpuCollector._sample, _recalled
# and step), so that a breakdown of either can be taken.
PARTS = (("decode", ("body", "sample_body"), ("",)), ("walk", ("frames",), ("",)),
         ("recall", ("recall",), ("frames/dwarf.py",)),
         ("tally", ("add", "add_same"), ("tally.py",)),
         ("mappings", ("note",), ("sets/mappings.py",)),
         ("sample", ("_sample", "_recalled", "sample", "recalled"),
          ("/collector.py", "/samplepath.py")),
         ("drain", ("step",), ("/routing.py", "/collector.py")))


def _daemon() -> Path:
    """The folder of the qtools.daemon measured: installed, copied aside,
    or a source tree installed in place (then not named qtools/daemon)."""
    from qtools.daemon import collector
    return Path(collector.__file__).parent


def _drain_file() -> str:
    """Where the drain (``step``) is: routing.py, or before it collector.py
    (whose step now only calls routing.py's)."""
    return "/routing.py" if (_daemon() / "routing.py").exists() else "/collector.py"


def breakdown(stream: Stream) -> dict[str, float]:
    """Shares of a full replay's drains, from cProfile's cumulative times:
    decoding samples, unwinding (a walk remembered, recalled by the drain:
    DwarfFrames.recall; else DwarfFrames.frames in the sample handler), the
    tally, noting mappings, the rest of the handlers (``SamplePath.sample``
    one by one, ``recalled`` for the samples counted alike), the rest of the drain
    (reading, telling the idle task's samples, sorting, counting recalled samples, side-band
    records)."""
    import cProfile
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    scratch_replay(stream)
    prof.disable()
    cum: dict[str, float] = {}
    drain_file, daemon = _drain_file(), f"{_daemon()}/"
    for (file, _line, func), row in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        if not file.startswith(daemon):
            continue
        for label, names, where in PARTS:
            if func in names and file.endswith(where) and (label != "drain" or
                                                           file.endswith(drain_file)):
                cum[label] = cum.get(label, 0.0) + row[3]
    part = {label: cum.get(label, 0.0) for label, _names, _where in PARTS}
    drain = part["drain"] or 1.0
    within = part["walk"] + part["tally"] + part["mappings"]
    return {"decode": part["decode"] / drain,
            "unwind": (part["walk"] + part["recall"]) / drain,
            "tally": part["tally"] / drain, "mappings": part["mappings"] / drain,
            "rest of the sample handlers": (part["sample"] - within) / drain,
            "rest of the drain": (drain - part["sample"] - part["decode"] - part["recall"]) / drain}


def cmd_breakdown(args: argparse.Namespace) -> int:
    steady_heap()
    data = Path(args.data)
    print(f"breakdown at {time.strftime('%Y-%m-%d %H:%M')} of {_commit()}, load "
          f"{os.getloadavg()[0]:.2f}; min of {args.runs} runs")
    for name in args.workloads:
        stream = stream_of(data, name)
        check_binary(stream)
        full, per = marginal(stream, args.runs)
        shares = breakdown(stream)
        print(f"{name}: {stream.samples} samples: full replay {full:.2f} us/sample, "
              f"marginal {per:.2f} us/sample")
        print("  " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()))
    return 0

# ---------------------------------------------------------------- compare

TIMES = ("q:start-time", "q:end-time", "q:run-start", "q:run-id", "q:clock-step")

def _contents(qpath: Path) -> dict[str, str]:
    """Each set's files by the set's name, the .info without times."""
    from qtools.qformat import read_info
    out: dict[str, str] = {}
    for name in sorted(os.listdir(qpath)):
        if ".info#" not in name:
            continue
        info = read_info(qpath / name)
        out[name] = _info_text(qpath / name)
        for label, ref in (("hist", info.histogram), ("stack", info.call_stacks),
                           ("edge", info.call_counts), ("threads", info.threads)):
            file = getattr(ref, "file", None) if ref is not None else None
            if file:
                out[f"{name} {label}"] = _data_text(qpath / file)
    return out

def _info_text(path: Path) -> str:
    import re
    text = path.read_text()
    for key in TIMES:
        text = re.sub(rf"\({re.escape(key)}\s[^()]*\)", f"({key} ...)", text)
    return text

def _data_text(path: Path) -> str:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        import gzip
        raw = gzip.decompress(raw)
    # the order of lines is the writer's business, not the set's content
    return "\n".join(sorted(raw.decode(errors="replace").splitlines()))

def cmd_compare(args: argparse.Namespace) -> int:
    import difflib
    a, b = _contents(Path(args.a)), _contents(Path(args.b))
    differ = 0
    for key in sorted(set(a) | set(b)):
        if a.get(key) == b.get(key):
            continue
        differ += 1
        if key in a and key in b:
            print(f"differs: {key}")
            diff = list(difflib.unified_diff(a[key].splitlines(), b[key].splitlines(),
                                             args.a, args.b, lineterm="", n=1))
            print("\n".join(diff[:args.lines]) + ("\n..." if len(diff) > args.lines else ""))
        else:
            print(f"only in {args.a if key in a else args.b}: {key}")
    print(f"{len(set(a) | set(b)) - differ} files alike, {differ} differ")
    return 1 if differ else 0

# ---------------------------------------------------------------- main

def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("capture", help="record the workloads' streams (root)")
    c.add_argument("--data", default=str(DEFAULT_DATA))
    c.add_argument("--seconds", type=int, default=5)
    c.add_argument("--cpu", type=int, default=max(procfs.online_cpus()))
    c.add_argument("workloads", nargs="*", default=list(WORKLOADS),
                   help="shallow, deep or system (default: shallow and deep)")
    r = sub.add_parser("replay", help="CPU time per sample of replays")
    r.add_argument("--data", default=str(DEFAULT_DATA))
    r.add_argument("-n", dest="runs", type=int, default=7)
    r.add_argument("--mode", dest="modes", action="append", choices=MODES)
    r.add_argument("--keep", metavar="DIR", help="keep the .q of each workload's last full replay")
    r.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                   help="shallow, deep, system or idle (default: shallow and deep)")
    b = sub.add_parser("breakdown", help="marginal CPU per sample, and where it goes")
    b.add_argument("--data", default=str(DEFAULT_DATA))
    b.add_argument("-n", dest="runs", type=int, default=5)
    b.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                   help="shallow or deep (default: both)")
    k = sub.add_parser("compare", help="the sets two replays wrote, minus times")
    k.add_argument("a")
    k.add_argument("b")
    k.add_argument("--lines", type=int, default=20, help="diff lines shown per file (20)")
    args = p.parse_args()
    if args.command == "replay" and not args.modes:
        args.modes = list(MODES)
    if args.command in ("replay", "breakdown", "capture"):
        # the breakdown's shares take a walk as a sample's: not so of a
        # switch's (the system stream's waits)
        known = {"replay": [*CAPTURED, "idle"], "capture": list(CAPTURED)}.get(
            args.command, list(WORKLOADS))
        args.workloads = args.workloads or list(WORKLOADS)
        if not set(args.workloads) <= set(known):
            p.error(f"workloads are {', '.join(known)}")
    return {"capture": cmd_capture, "replay": cmd_replay, "compare": cmd_compare,
            "breakdown": cmd_breakdown}[args.command](args)

if __name__ == "__main__":
    sys.exit(main())
