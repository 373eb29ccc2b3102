"""The parent of the per-CPU collectors.

It owns the signals (SIGINT/SIGTERM stop, SIGHUP checkpoints), the time
limit, the command being profiled, and the copies every set shares
(kallsyms, the vdso). It forks one collector per CPU, restarts one that
dies, and on the way out asks each for its final checkpoint.
"""

from __future__ import annotations

import errno
import os
import platform
import select
import signal
import sys
import time
from dataclasses import dataclass, replace
from typing import TextIO

from qtools.qformat import QDir, QFormatError

from . import events, procfs, retention, syscalls
from .abi import EventSpec
from .checkpoint import RunInfo
from .child import collector_main
from .config import Config
from .notify import Notifier
from .objects import KallsymsCopy, ObjectCopier
from .source import SourceSpec, ring_pages
from .unwind import Unwinder

RESTARTS_PER_MINUTE = 5
STOP_TIMEOUT = 120.0


class CollectError(Exception):
    """Collection cannot start; the message is for the user."""


def permission_message(err: OSError, paranoid: int | None) -> str:
    level = "unknown" if paranoid is None else str(paranoid)
    return ("system-wide sampling is not permitted here: run as root, or grant CAP_PERFMON "
            f"(CAP_SYS_ADMIN on kernels before 5.8), or lower kernel.perf_event_paranoid "
            f"(now {level}) to 0 or less; to profile just one command and its children as "
            f"yourself, use: q-syscollect -i -- CMD ({os.strerror(err.errno or 0)})")


def run_info(cfg: Config, spec: EventSpec, source: SourceSpec, kallsyms: str | None,
             vdso: str | None) -> RunInfo:
    if spec.unit == "ns":
        label, factor = "seconds", 1e-9
    elif spec.unit == "cycles" and (freq := procfs.cpu_max_freq_hz()):
        label, factor = "seconds", 1.0 / freq
    else:
        label, factor = spec.unit, 1.0
    unwinder = None if cfg.call_graph == "none" else cfg.call_graph
    return RunInfo(["q-syscollect", *cfg.argv], spec.name, label, factor, unwinder,
                   procfs.machine(), kallsyms, vdso)


@dataclass
class Child:
    """A running collector, as its parent sees it."""

    pid: int
    cpu: int
    status_fd: int  # "ok" at start, then one heartbeat byte about every second
    last_seen: float


class Supervisor:
    def __init__(self, cfg: Config, out: TextIO | None = None,
                 notifier: Notifier | None = None) -> None:
        self.cfg = cfg
        self.out = out or sys.stderr
        self.notifier = notifier or Notifier()
        self.children: dict[int, Child] = {}
        self.restarts: dict[int, list[float]] = {}
        self.upkeep_error: str | None = None
        self.directory_gone = False
        self.stopping = False
        self.checkpoint_requested = False
        self.cmd_pid: int | None = None
        self.cmd_status: int | None = None
        self.started = time.time()
        self.kallsyms = KallsymsCopy()  # the children inherit it, and renew it
        self.retention = retention.Index()  # what upkeep knows of .q between rounds

    # ------------------------------------------------------------ setup

    def _spec_for(self, spec: EventSpec, cpu: int, target: int, exclude_kernel: bool,
                  branches: bool, pages: int) -> SourceSpec:
        cfg = self.cfg
        dwarf = cfg.call_graph == "dwarf" and not cfg.kernel_only
        stacks = cfg.call_graph != "none"
        return SourceSpec(spec, cpu, cfg.cpus, cfg.frequency, target,
                          exclude_kernel=exclude_kernel, exclude_user=cfg.kernel_only,
                          callchain=stacks and not (dwarf and exclude_kernel),
                          user_callchain=not dwarf, branches=branches,
                          regs_user_mask=Unwinder(platform.machine()).regs_mask if dwarf else 0,
                          stack_user=cfg.stack_size if dwarf else 0,
                          enable_on_exec=target != -1, ring_pages=pages,
                          sideband_pages=16 if len(cfg.cpus) <= 16 else 4)

    def _try_open(self, spec: SourceSpec) -> OSError | None:
        try:
            fd = syscalls.perf_event_open(replace(spec, enable_on_exec=False).sampling_attr(),
                                          0 if spec.target_pid != -1 else -1, spec.cpu)
        except syscalls.PerfError as e:
            return e
        os.close(fd)
        return None

    def plan(self) -> SourceSpec:
        """Choose event and options, checking up front that they can be opened."""
        cfg = self.cfg
        try:
            spec = events.resolve(cfg.event) if cfg.event else events.default_event()
        except events.EventError as e:
            raise CollectError(str(e)) from None
        root = os.geteuid() == 0
        record = 600 + (cfg.stack_size if cfg.call_graph == "dwarf" else 1024)
        pages = cfg.ring_pages or ring_pages(cfg.frequency, record, root, len(cfg.cpus))
        target = 0 if cfg.inherit_only else -1
        exclude_kernel = cfg.user_only
        branches = spec.is_hardware and cfg.call_graph != "none"
        source = self._spec_for(spec, cfg.cpus[0], target, exclude_kernel, branches, pages)
        err = self._try_open(source)
        if err is not None and branches:
            branches = False  # no branch sampling (LBR) here: plain samples
            source = replace(source, branches=False)
            err = self._try_open(source)
        if err is not None and err.errno in (errno.EACCES, errno.EPERM) and cfg.inherit_only \
                and not exclude_kernel and not cfg.kernel_only:
            source = replace(source, exclude_kernel=True)
            err = self._try_open(source)
            if err is None:
                self._note("kernel samples are not permitted (kernel.perf_event_paranoid="
                           f"{procfs.sysctl_int('kernel.perf_event_paranoid')}); "
                           "collecting user space only")
        if err is not None:
            if err.errno in (errno.EACCES, errno.EPERM):
                raise CollectError(permission_message(
                    err, procfs.sysctl_int("kernel.perf_event_paranoid")))
            if err.errno in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
                raise CollectError(events.explain_unsupported(spec, err.errno))
            rate = procfs.sysctl_int("kernel.perf_event_max_sample_rate")
            if err.errno == errno.EINVAL and rate is not None and cfg.frequency > rate:
                raise CollectError(f"-c {cfg.frequency} is above the kernel's limit of {rate} Hz "
                                   "(kernel.perf_event_max_sample_rate)")
            raise CollectError(f"cannot open event {spec.name!r}: {err.strerror}")
        return source

    def _note(self, text: str) -> None:
        print(f"q-syscollect: {text}", file=self.out, flush=True)

    def _shared_copies(self, qdir: QDir) -> tuple[str | None, str | None]:
        """Copy kallsyms and the vdso, which every set refers to.

        A failure (a full disk, say) costs kernel or vdso symbols, not the run.
        """
        copier = ObjectCopier(qdir)
        kallsyms = vdso = None
        try:
            kallsyms = self.kallsyms.current(copier, report=True)
            image = procfs.own_vdso()
            if image is not None:
                fd = os.memfd_create("vdso", os.MFD_CLOEXEC)
                try:
                    os.write(fd, image[1])
                    vdso = qdir.store_object(fd, "vdso")
                finally:
                    os.close(fd)
        except OSError as e:
            self._note(f"cannot copy {'the vdso' if kallsyms else 'kallsyms'} into "
                       f"{qdir.path}: {e.strerror or e}; kernel symbols may be missing")
        return kallsyms, vdso

    # ------------------------------------------------------------ children

    def _spawn_command(self) -> tuple[int, int, int]:
        """Fork the command, held before exec until the collectors are ready.

        Returns its pid, the fd that releases it, and a close-on-exec fd
        that reads the exec error, or EOF once exec succeeded.
        """
        r, w = os.pipe()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            os.close(w)
            os.close(err_r)
            os.read(r, 1)
            try:
                os.execvp(self.cfg.command[0], self.cfg.command)
            except OSError as e:
                os.write(err_w, (e.strerror or str(e)).encode())
            os._exit(127)
        os.close(r)
        os.close(err_w)
        return pid, w, err_r

    def _release_command(self, release_fd: int, err_fd: int) -> None:
        os.write(release_fd, b"x")
        os.close(release_fd)
        error = os.read(err_fd, 4096).decode(errors="replace")
        os.close(err_fd)
        if error:
            raise CollectError(f"cannot run {self.cfg.command[0]}: {error}")

    def _fork_collector(self, source: SourceSpec, run: RunInfo, qdir: QDir,
                        status_w: int) -> int:
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:
            for child in self.children.values():
                os.close(child.status_fd)
            code = collector_main(self.cfg, source, run, qdir, status_w, self.out,
                                  set(self.children), self.kallsyms)
        except BaseException as e:  # a child must never return into the parent's code
            try:
                print(f"q-syscollect: collector for cpu {source.cpu} failed: {e!r}",
                      file=self.out, flush=True)
            except BaseException:
                pass
        finally:
            os._exit(code)

    def _start(self, source: SourceSpec, run: RunInfo, qdir: QDir, cpu: int) -> None:
        r, w = os.pipe2(os.O_CLOEXEC)
        pid = self._fork_collector(replace(source, cpu=cpu), run, qdir, w)
        os.close(w)
        line = b""
        while not line.endswith(b"\n"):
            chunk = os.read(r, 1)
            if not chunk:
                break
            line += chunk
        if not line.startswith(b"ok"):
            os.close(r)
            raise CollectError(line.decode(errors="replace").strip().removeprefix("error ")
                               or f"collector for cpu {cpu} exited before it started")
        os.set_blocking(r, False)
        self.children[pid] = Child(pid, cpu, r, time.monotonic())

    # ------------------------------------------------------------ running

    def run(self) -> int:
        cfg = self.cfg
        try:
            qdir = QDir.open(cfg.directory, create=True, secure=True)
        except QFormatError as e:
            raise CollectError(str(e)) from None
        qdir.remove_stale_temps()
        self.retention.begin(qdir)
        source = self.plan()
        kallsyms, vdso = self._shared_copies(qdir)
        run = run_info(cfg, source.event, source, kallsyms, vdso)
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        release_fd = err_fd = None
        try:
            if cfg.command:
                self.cmd_pid, release_fd, err_fd = self._spawn_command()
                if cfg.inherit_only:
                    source = replace(source, target_pid=self.cmd_pid)
            for cpu in cfg.cpus:
                self._start(source, run, qdir, cpu)
            if release_fd is not None and err_fd is not None:
                fds, release_fd, err_fd = (release_fd, err_fd), None, None
                self._release_command(*fds)
            self.started = time.time()
            self.notifier.ready(self._status(source))
            self._loop(source, run, qdir, wake_r)
            self.notifier.stopping("writing the final checkpoint")
            if self.directory_gone:
                self._stop_children()
                return 1
        except CollectError:
            self._stop_children()
            if self.cmd_pid:
                _kill(self.cmd_pid, signal.SIGKILL)
            raise
        finally:
            for fd in (release_fd, err_fd):
                if fd is not None:
                    os.close(fd)
        return self._stop_children()

    def _on_stop(self, signum: int, frame: object) -> None:
        self.stopping = True

    def _on_hup(self, signum: int, frame: object) -> None:
        self.checkpoint_requested = True

    def _status(self, source: SourceSpec, extra: str = "") -> str:
        text = (f"collecting on {len(self.children)} CPUs with {source.event.name} at "
                f"{source.frequency} Hz into {self.cfg.directory}")
        return text + (f"; {extra}" if extra else "")

    def _loop(self, source: SourceSpec, run: RunInfo, qdir: QDir, wake_r: int) -> None:
        deadline = time.monotonic() + self.cfg.duration if self.cfg.duration else None
        upkeep_every = max(5.0, min(self.cfg.checkpoint, 60.0))
        next_upkeep = time.monotonic() + upkeep_every
        watchdog = self.notifier.watchdog_interval
        next_watchdog = time.monotonic()
        while not self.stopping:
            now = time.monotonic()
            timeout = 1.0 if deadline is None else max(0.0, min(1.0, deadline - now))
            if watchdog:
                timeout = max(0.0, min(timeout, next_watchdog - now))
            fds = [wake_r] + [c.status_fd for c in self.children.values()]
            try:
                readable, _, _ = select.select(fds, [], [], timeout)
            except InterruptedError:
                readable = []
            _drain(wake_r)
            self._heartbeats(readable)
            self._reap(source, run, qdir)
            if os.fstat(qdir.fd).st_nlink == 0:
                self._note(f"the output directory {qdir.path} was removed; stopping")
                self.directory_gone = True
                self.stopping = True
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                self.stopping = True
            if self.checkpoint_requested:
                self.checkpoint_requested = False
                for pid in self.children:
                    _kill(pid, signal.SIGUSR1)
            if self.cfg.upkeep and now >= next_upkeep:
                self._upkeep(qdir, source)
                next_upkeep = time.monotonic() + upkeep_every
            if watchdog and now >= next_watchdog:
                # Keep-alive only while every collector still beats: a stuck
                # one is killed (and restarted) before systemd gives up on us.
                self._kill_stuck()
                self.notifier.watchdog()
                next_watchdog = now + watchdog

    def _heartbeats(self, readable: list[int]) -> None:
        now = time.monotonic()
        for child in self.children.values():
            if child.status_fd in readable:
                try:
                    if os.read(child.status_fd, 4096):
                        child.last_seen = now
                except (BlockingIOError, InterruptedError):
                    pass
        self._kill_stuck()

    def _kill_stuck(self) -> None:
        now = time.monotonic()
        for child in self.children.values():
            if now - child.last_seen > self.cfg.stuck_after:
                self._note(f"collector for cpu {child.cpu} (pid {child.pid}) has not "
                           f"reported for {self.cfg.stuck_after:g} s; killing it")
                child.last_seen = now
                _kill(child.pid, signal.SIGKILL)

    def _upkeep(self, qdir: QDir, source: SourceSpec) -> None:
        cfg = self.cfg
        try:
            report = self.retention.maintain(
                qdir, stale_after=cfg.stale_after, grace=cfg.stale_after,
                max_size=cfg.max_size, max_age=cfg.max_age, compress=cfg.compress_closed)
        except OSError as e:
            text = f"cannot tend {qdir.path}: {e.strerror or e}"
            if text != self.upkeep_error:
                self._note(text)
                self.upkeep_error = text
            return
        self.upkeep_error = None
        if cfg.verbose and (report.removed or report.collected):
            self._note(f"retention removed {len(report.removed)} closed sets and "
                       f"{len(report.collected)} unreferenced copies")
        self.notifier.status(self._status(
            source, f"{report.sets} sets, {report.size / 1e6:.1f} MB"))

    def _reap(self, source: SourceSpec, run: RunInfo, qdir: QDir) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.cmd_pid:
                self.cmd_status = status
                self.stopping = True
                continue
            child = self.children.pop(pid, None)
            if child is None:
                continue
            os.close(child.status_fd)
            cpu = child.cpu
            if self.stopping:
                continue
            why = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else \
                f"exit status {os.WEXITSTATUS(status)}"
            recent = [t for t in self.restarts.get(cpu, []) if time.monotonic() - t < 60]
            if len(recent) >= RESTARTS_PER_MINUTE:
                self._note(f"collector for cpu {cpu} died ({why}) {len(recent)} times in a "
                           "minute; not restarting it")
                continue
            self._note(f"collector for cpu {cpu} (pid {pid}) died ({why}); restarting it")
            self.restarts[cpu] = recent + [time.monotonic()]
            try:
                self._start(replace(source, target_pid=source.target_pid), run, qdir, cpu)
            except CollectError as e:
                self._note(f"cannot restart the collector for cpu {cpu}: {e}")

    def _stop_children(self) -> int:
        for pid in list(self.children):
            _kill(pid, signal.SIGTERM)
        give_up = time.monotonic() + STOP_TIMEOUT
        code = 0
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                if time.monotonic() > give_up:
                    for stuck in self.children:
                        _kill(stuck, signal.SIGKILL)
                    code = 1
                select.select([], [], [], 0.02)  # not time.sleep: see tests' faketime run
                continue
            if pid == self.cmd_pid:
                self.cmd_status = status
            elif (child := self.children.pop(pid, None)) is not None:
                os.close(child.status_fd)
                if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
                    code = 1
        return code


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except (BlockingIOError, InterruptedError):
        pass


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
