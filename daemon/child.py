"""The body of one per-CPU collector process (runs after the fork)."""

from __future__ import annotations

import errno
import os
import signal
import time
from typing import TextIO

from qtools.qformat import QDir

from . import procfs, syscalls
from .checkpoint import RunInfo
from .collector import CpuCollector, Flags, Options
from .config import Config
from .dwarf import DwarfFrames
from .objects import KallsymsCopy, ObjectCopier
from .source import PerfSource, SourceSpec


def collector_main(cfg: Config, source: SourceSpec, run: RunInfo, qdir: QDir, status_w: int,
                   out: TextIO, siblings: set[int] | None = None,
                   kallsyms: KallsymsCopy | None = None) -> int:
    """Open this CPU's events, say "ok" (or the error) on ``status_w``, then
    collect until SIGTERM, writing a heartbeat byte to ``status_w`` about
    once a second so the parent can tell a stuck collector from a busy one."""
    parent = os.getppid()
    syscalls.set_parent_death_signal(signal.SIGTERM)
    flags = Flags()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, lambda *_: setattr(flags, "stop", True))
    signal.signal(signal.SIGUSR1, lambda *_: setattr(flags, "checkpoint", True))
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    if os.getppid() != parent:
        return 1
    try:
        perf = PerfSource(source)
    except OSError as e:
        msg = f"cpu {source.cpu}: {e.strerror or e}"
        if e.errno == errno.EPERM:
            msg += " (ring buffer above the locked-memory limit? try --mmap-pages 16)"
        os.write(status_w, f"error {msg}\n".encode())
        return 1
    perf.watch(wake_r)
    opts = Options(source.cpu, kernel_only=cfg.kernel_only, checkpoint_interval=cfg.checkpoint,
                   verbose=cfg.verbose, min_samples=cfg.min_samples, max_stacks=cfg.max_stacks,
                   stacks=cfg.call_graph != "none", rotate=cfg.rotate,
                   compress=cfg.compress_closed, cpu_stats=source.target_pid == -1)
    copier = ObjectCopier(qdir, cfg.symlink)
    frames = None
    if source.regs_user_mask:
        vdso = procfs.own_vdso()
        own = {parent, os.getpid(), *(siblings or ())}
        frames = DwarfFrames(qdir, copier, vdso[1] if vdso else None, own, parent)
    collector = CpuCollector(opts, run, perf, qdir, copier, user_frames=frames, out=out,
                             kallsyms=kallsyms)
    if source.target_pid == -1:
        collector.seed()
    perf.enable()
    if cfg.verbose:
        print(f"[{os.getpid()}] profiling on cpu {source.cpu} with {source.event.name} at "
              f"{source.frequency} Hz", file=out, flush=True)
    os.write(status_w, b"ok\n")
    last_beat = 0.0

    def heartbeat() -> None:
        nonlocal last_beat
        now = time.monotonic()
        if now - last_beat >= 1.0:
            last_beat = now
            try:
                os.write(status_w, b".")
            except OSError:
                pass  # parent gone: PDEATHSIG stops us
    ok = collector.run(flags, heartbeat=heartbeat)
    return 0 if ok else 1
