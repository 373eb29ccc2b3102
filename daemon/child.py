"""The body of one per-CPU collector process (runs after the fork).

A collector must not outlive its supervisor: nobody would stop it, and the
next run would collect beside it. The kernel tells it of the supervisor's
death with a signal of its own (``PARENT_DEATH_SIGNAL``), whose handler
raises out of whatever runs — a copy, an unwind, a busy ring — so the
collector ends within a moment (stopping.py). Files are written atomically,
temporary files removed on the way out, and one set's data files are never
cut apart, so no half-written set becomes visible; the data since the last
checkpoint is not written (a final checkpoint from wherever the exception
struck could write a set whose profile was half updated).
"""

from __future__ import annotations

import errno
import os
import resource
import signal
import time
from typing import TextIO

from qtools.qformat import QDir

from . import attach
from .collector import CpuCollector
from .config import Config, Options
from .drainloop import Flags
from .frames.dwarf import DwarfFrames
from .kernel import syscalls
from .kernel.source import PerfSource, SourceSpec
from .machine.host import LIVE, Host
from .machine.synthesize import Snapshot
from .messages import Tally, write_line
from .sets.checkpoint import RunInfo
from .sets.kallsymscopy import KallsymsCopy
from .sets.objects import CopyLimits, ObjectCopier
from .stopping import ParentGone, stop_now

PARENT_DEATH_SIGNAL = signal.SIGUSR2
BACKSTOP_SECONDS = 1  # after the parent's death, the default SIGALRM ends what did not
QUIET_SECONDS = 30.0  # the longest wait between drains of an idle CPU (drainloop.run)


def _parent_gone(signum: int, frame: object) -> None:
    signal.signal(PARENT_DEATH_SIGNAL, signal.SIG_IGN)
    # Should the way out block in a system call, SIGALRM's default action
    # ends the process; only temporary files, which the next run removes,
    # are left then.
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(BACKSTOP_SECONDS)
    stop_now()


def collector_main(cfg: Config, source: SourceSpec, run: RunInfo, qdir: QDir, status_w: int,
                   out: TextIO, siblings: set[int] | None = None,
                   kallsyms: KallsymsCopy | None = None, host: Host = LIVE,
                   snapshot: Snapshot | None = None) -> int:
    """Open this CPU's events, say "ok" (or the error) on ``status_w``, then
    collect until SIGTERM, writing its totals to ``status_w`` about once a
    second (the heartbeat that tells a stuck collector from a busy one) and
    once more at the end (the status protocol is in messages.py).
    ``snapshot``: the host's processes as the supervisor read them just
    before forking (else this collector reads them itself)."""
    parent = os.getppid()
    signal.signal(PARENT_DEATH_SIGNAL, _parent_gone)
    syscalls.set_parent_death_signal(PARENT_DEATH_SIGNAL)
    try:
        return _collect(cfg, source, run, qdir, status_w, out, parent, siblings, kallsyms, host,
                        snapshot)
    except ParentGone:
        return 1


def _collect(cfg: Config, source: SourceSpec, run: RunInfo, qdir: QDir, status_w: int,
             out: TextIO, parent: int, siblings: set[int] | None,
             kallsyms: KallsymsCopy | None, host: Host,
             snapshot: Snapshot | None = None) -> int:
    flags = Flags()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, lambda *_: setattr(flags, "stop", True))
    signal.signal(signal.SIGUSR1, lambda *_: setattr(flags, "checkpoint", True))
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    if os.getppid() != parent:
        stop_now()  # it died before the kernel was told to signal us
    if source.attach:  # the threads as they are now, each opened (attach.py)
        source = source._replace(tids=attach.threads(host, source.attach))
        kinds = 1 + bool(source.sched_switch) + bool(source.sched_waking)  # each on every CPU
        _room_for_fds(len(source.tids) * len(source.cpus) * kinds)
    try:
        perf = PerfSource(source)
    except OSError as e:
        msg = f"cpu {source.cpu}: {e.strerror or e}"
        if e.errno == errno.EPERM:
            msg += " (ring buffer above the locked-memory limit? try --mmap-pages 16)"
        if e.errno == errno.EMFILE:
            msg += (f" ({len(source.tids)} threads on {len(source.cpus)} CPUs take an event "
                    "each: raise the hard limit of open files, ulimit -Hn)")
        os.write(status_w, f"error {msg}\n".encode())
        return 1
    perf.watch(wake_r)
    opts = Options(source.cpu, kernel_only=cfg.kernel_only, checkpoint_interval=cfg.checkpoint,
                   run_seconds=cfg.duration, verbose=cfg.verbose, min_samples=cfg.min_samples,
                   max_stacks=cfg.max_stacks, min_stack_share=cfg.min_stack_share,
                   stacks=cfg.call_graph != "none", rotate=cfg.rotate,
                   compress=cfg.compress_closed, cpu_stats=not source.per_task,
                   off_cpu=bool(source.sched_switch), off_cpu_min_ns=cfg.off_cpu_min_ns)
    copier = ObjectCopier(qdir, cfg.symlink, CopyLimits(object_size=cfg.max_object_size,
                                                    map_size=cfg.max_map_size), out, host)
    frames = None
    if source.regs_user_mask:
        vdso = host.own_vdso()
        own = {parent, os.getpid(), *(siblings or ())}
        frames = DwarfFrames(qdir, copier, vdso[1] if vdso else None, own, parent,
                             own_cmdline=host.cmdline(os.getpid()))
    collector = CpuCollector(opts, run, perf, qdir, copier, user_frames=frames, out=out,
                             kallsyms=kallsyms, host=host)
    if source.attach:
        collector.seed(snapshot or attach.snapshot(host, source.attach, time.monotonic_ns(),
                                                   source.cgroups))
    elif not source.per_task:
        collector.seed(snapshot)
    perf.enable()
    if cfg.verbose:
        write_line(out, f"[{os.getpid()}] profiling on cpu {source.cpu} with "
                        f"{source.event.name} at {source.frequency} Hz")
    os.write(status_w, b"ok\n")
    os.set_blocking(status_w, False)  # a parent that does not read must not stop collecting
    last_beat = 0.0

    def heartbeat() -> None:
        nonlocal last_beat
        copier.work()  # copies under way go on between drains, a slice at a time
        now = time.monotonic()
        if now - last_beat >= 1.0:
            last_beat = now
            _report(status_w, parent, collector.tally(), "beat")
    try:
        ok = collector.run(flags, heartbeat=heartbeat, quiet_interval=quiet_interval(cfg))
    finally:
        copier.close()  # copies under way leave no temporaries, also when the parent is gone
    _report(status_w, parent, collector.tally(), "end")
    return 0 if ok else 1


def _room_for_fds(events: int) -> None:
    """Raise the soft limit of open files towards the hard one where
    ``events`` more descriptors would pass it (-p: an event per thread and
    CPU); past the hard limit the open fails, and says so."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = events + 256  # what the collector opens besides
    if soft != resource.RLIM_INFINITY and want > soft:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        except (OSError, ValueError):
            pass


def quiet_interval(cfg: Config) -> float:
    """The longest a collector waits between drains while its CPU is idle:
    it beats at each, so four beats fit in --stuck-after."""
    return max(0.5, min(QUIET_SECONDS, cfg.stuck_after / 4))


def _report(status_w: int, parent: int, tally: Tally, kind: str) -> None:
    """One status line to the parent; its absence means it is gone."""
    if os.getppid() != parent:
        stop_now()
    try:
        os.write(status_w, tally.line(kind))
    except BlockingIOError:
        pass  # a full pipe: the parent is behind, not gone
    except OSError:
        stop_now()
