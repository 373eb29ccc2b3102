"""The parent of the per-CPU collectors.

It owns the signals (SIGINT/SIGTERM stop, SIGHUP checkpoints), the time
limit, the command being profiled, and the copies every set shares
(kallsyms, the vdso). It forks one collector per CPU, restarts one that
dies (collectors.py), and on the way out asks each for its final
checkpoint, adds up what they report, and ends the way the profiled
command ended -- unless data was lost, which the last line says and the
exit status (EXIT_LOST) tells.
"""

from __future__ import annotations

import gc
import math
import os
import select
import signal
import sys
import time
from typing import TextIO

from qtools.qformat import QDir, QFormatError

from . import attach, command
from .child import PARENT_DEATH_SIGNAL
from .collectors import Collectors, kill_quietly
from .command import Ending
from .config import Config
from .kernel.abi import EventSpec
from .machine.host import LIVE, Host
from .sets import retention
from .sets.checkpoint import RunInfo
from .messages import EXIT_LOST, loss_line, start_line, summary_line, tell
from .kernel.source import SourceSpec
from .notify import Notifier
from .pusher import PushChild
from .plan import CollectError, plan
from .sets.diskroom import DiskRoom
from .sets.kallsymscopy import KallsymsCache, KallsymsCopy
from .sets.notices import shared_notices
from .sets.objects import ObjectCopier
from .sets.sharedcopies import SharedCopies

STOP_TIMEOUT = 120.0
TICK_SECONDS = 15.0  # the supervisor's longest sleep (Supervisor._tick)
COMMAND_GRACE = 10.0  # a command still running when the run ends: SIGTERM, then SIGKILL
# Ctrl-C reaches the command from the terminal too: it is given this long to
# end of it (said after INTERRUPT_NOTE) before SIGTERM, or until a second Ctrl-C
INTERRUPT_GRACE, INTERRUPT_NOTE = 10.0, 1.0


def run_info(cfg: Config, spec: EventSpec, source: SourceSpec, kallsyms: str | None,
             vdso: str | None, host: Host = LIVE) -> RunInfo:
    if spec.unit == "ns":
        label, factor = "seconds", 1e-9
    elif spec.unit == "cycles" and (freq := host.cpu_max_freq_hz()):
        label, factor = "seconds", 1.0 / freq
    else:
        label, factor = spec.unit, 1.0
    unwinder = None if cfg.call_graph == "none" else cfg.call_graph
    return RunInfo(["q-syscollect", *cfg.argv], spec.name, label, factor, unwinder,
                   host.machine(), kallsyms, vdso,
                   run_id=os.urandom(6).hex(), run_start=round(time.time(), 3),
                   off_cpu=bool(source.sched_switch), off_cpu_min_ns=cfg.off_cpu_min_ns,
                   idle_sampled=not (source.exclude_kernel or source.per_task
                                     or spec.unit == "events"))


class Supervisor:
    def __init__(self, cfg: Config, out: TextIO | None = None,
                 notifier: Notifier | None = None, host: Host = LIVE) -> None:
        self.cfg = cfg
        self.host = host
        self.out = out or sys.stderr
        self.notifier = notifier or Notifier()
        self.upkeep_error: str | None = None
        self.directory_gone = False
        self.stopping = False
        self.stop_signal: int | None = None  # the first SIGINT or SIGTERM
        self.interrupted_at: float | None = None  # Ctrl-C while the command runs
        self.interrupt_noted = False
        self.checkpoint_requested = False
        self.cmd_pid: int | None = None
        self.cmd_path = ""  # the file the command's name leads to (command.resolve)
        self.cmd_status: int | None = None
        self.started = time.time()
        self.began = time.monotonic()
        # the children inherit it, and renew it
        self.kallsyms = KallsymsCopy(cache=KallsymsCache.default())
        self.collectors = Collectors(cfg, self.out, host, self.kallsyms, self._note)
        self.retention = retention.Index()  # what upkeep knows of .q between rounds
        self.room: DiskRoom | None = None  # with upkeep: the copies' ledger (QDir.room)
        self.pusher: PushChild | None = None  # --push: q-push, beside the collectors
        self.watched: attach.Watched | None = None  # -p: the processes attached to
        self.vdso_name: str | None = None  # its copy in .q

    # ------------------------------------------------------------ setup

    def _note(self, text: str) -> None:
        tell(self.out, text)

    def _vdso_copy(self, qdir: QDir) -> str | None:
        """Copy the vdso, which every set refers to (a page or two).

        A failure (a full disk, say) costs vdso symbols, not the run.
        """
        try:
            image = self.host.own_vdso()
            if image is None:
                return None
            fd = os.memfd_create("vdso", os.MFD_CLOEXEC)
            try:
                os.write(fd, image[1])
                self.vdso_name = qdir.store_object(fd, "vdso")
                return self.vdso_name
            finally:
                os.close(fd)
        except OSError as e:
            self._note(f"cannot copy the vdso into {qdir.path}: {e.strerror or e}")
            return None
        except QFormatError as e:  # no room left under --max-size
            self._note(f"cannot copy the vdso into {qdir.path}: {e.message}")
            return None

    def _kallsyms_copy(self, qdir: QDir) -> None:
        """Copy kallsyms, which every set refers to, once the collectors
        sample (reading it takes a while), and tell them its name; a
        failure costs kernel symbols, not the run (each collector tries
        again at its checkpoints)."""
        try:
            self.kallsyms.current(ObjectCopier(qdir, host=self.host), report=True)
        except OSError as e:
            self._note(f"cannot copy kallsyms into {qdir.path}: {e.strerror or e}; kernel "
                       "symbols may be missing")
        self.kallsyms.publish()

    # ------------------------------------------------------------ children

    def _release_command(self, release_fd: int, err_fd: int) -> None:
        error = command.release(release_fd, err_fd)
        if error:
            raise command.exec_failure(self.cfg.command[0], self.cmd_path, error)

    # ------------------------------------------------------------ running

    def run(self) -> Ending:
        """Collect until the end the options name; how q-syscollect should end."""
        cfg = self.cfg
        if cfg.command:  # a typo in its name leaves nothing behind
            self.cmd_path = command.resolve(cfg.command[0])
        # A signal that comes while the setup copies kallsyms on a busy
        # machine must not kill the run half made.
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        if cfg.attach:  # each held from here on (a pidfd), whatever becomes of its pid
            self.watched = attach.Watched(cfg.attach, self.host)
        source = plan(cfg, self._note, self.host)  # what cannot be opened leaves no .q
        made_dir = not os.path.lexists(cfg.directory)
        try:
            qdir = QDir.open(cfg.directory, create=True, secure=True)
        except QFormatError as e:
            raise CollectError(str(e)) from None
        qdir.remove_stale_temps()
        before = set(qdir.names())
        qdir.shared = SharedCopies.create()  # one copy per object for all collectors
        shared_notices()  # and each refusal said once, not once per collector
        self.retention.begin(qdir)
        if cfg.upkeep:  # copies within --max-size from the start; upkeep's collections told
            self.room = qdir.room = DiskRoom.create(cfg.max_size, len(cfg.cpus) + 1)
            if self.room is not None:
                self.room.measured(retention.allocated(qdir), 0)
        # kallsyms: copied once sampling runs (_kallsyms_copy)
        run = run_info(cfg, source.event, source, None, self._vdso_copy(qdir), self.host)
        self.kallsyms.expect(self.host)
        release_fd = err_fd = None
        try:
            if cfg.command:
                self.cmd_pid, release_fd, err_fd = command.spawn(cfg.command)
                if cfg.inherit_only:
                    source = source._replace(target_pid=self.cmd_pid)
            self.began = time.monotonic()  # the first collector samples from here on
            # What exists now lives as long as the run: no collection need
            # look at it again, nor touch (and so copy) its pages in a collector.
            gc.freeze()
            self.collectors.start_all(source, run, qdir)
            if cfg.push:
                self.pusher = PushChild(cfg.push, cfg.directory, cfg.stale_after, self._note)
                self.pusher.start()
            if not cfg.quiet:
                self._note(start_line(cfg, source.event.name, source.frequency,
                                      source.exclude_kernel))
            self.started = time.time()
            if release_fd is not None and err_fd is not None:
                fds, release_fd, err_fd = (release_fd, err_fd), None, None
                self._release_command(*fds)
            self.notifier.ready(self._status(source))
            self._kallsyms_copy(qdir)
            self._loop(source, run, qdir, wake_r)
            self.notifier.stopping("writing the final checkpoint")
        except command.NotRunnable:
            self._undo(qdir, before, made_dir)
            raise
        except CollectError:
            if self.cmd_pid:
                kill_quietly(self.cmd_pid, signal.SIGKILL)
            self._stop()
            raise
        finally:
            for fd in (release_fd, err_fd):
                if fd is not None:
                    os.close(fd)
            if self.watched is not None:
                self.watched.close()
        self._stop()
        return self._ending(qdir)

    def _undo(self, qdir: QDir, before: set[str], made_dir: bool) -> None:
        """The command could not be run: end the collectors without their
        final checkpoint (what they sampled is not what was asked for) and
        remove what this run put into ``qdir``: the copies it made (the vdso,
        those its collectors told each other) and its temporary files, never
        what was there before; the directory too if the run made it."""
        self._stop(PARENT_DEATH_SIGNAL)
        qdir.remove_stale_temps()  # the collectors' own, now that they are gone
        made = qdir.shared.names() if qdir.shared is not None else set()
        if self.vdso_name is not None:
            made.add(self.vdso_name)
        try:
            for name in (set(qdir.names()) - before) & made:
                qdir.remove(name)
            if made_dir and not qdir.names():
                os.rmdir(qdir.path)
        except OSError as e:
            self._note(f"cannot remove what this run made in {qdir.path}: {e.strerror or e}")

    def _ending(self, qdir: QDir) -> Ending:
        """Say what the run got and lost; the command's end, or EXIT_LOST."""
        total = self.collectors.retired
        if not self.cfg.quiet:
            size = None if self.directory_gone else _size_of(qdir)
            self._note(summary_line(total, time.monotonic() - self.began, size))
        losses = list(self.collectors.losses)
        if total.given_up:
            losses.insert(0, f"{total.given_up} set{'s' if total.given_up != 1 else ''} "
                             f"could not be written to {qdir.path}")
        if self.directory_gone:
            losses.insert(0, f"the output directory {qdir.path} was removed during the run")
        if losses:
            self._note(loss_line(losses))  # the last line, whatever the command did
            return Ending(EXIT_LOST)
        if self.cmd_pid is not None and self.stop_signal == signal.SIGINT:
            # Ctrl-C interrupted the command: end as interrupted, as the
            # command alone would (or perf record), whatever it made of it
            return Ending(128 + signal.SIGINT, signal.SIGINT)
        return command.ending_of(self.cmd_status)

    def _on_stop(self, signum: int, frame: object) -> None:
        """SIGTERM or -t stop at once. A first SIGINT while the command runs
        waits for it: the terminal sent it the same Ctrl-C, and a SIGTERM
        now would cut the command's own handling of it short (a Python
        program died of SIGTERM before its KeyboardInterrupt)."""
        self.stop_signal = self.stop_signal or signum
        if signum == signal.SIGINT and self.interrupted_at is None and \
                self._command_running():
            self.interrupted_at = time.monotonic()
            return
        self.stopping = True

    def _interrupt_step(self, now: float) -> float:
        """After Ctrl-C, with the command still running: say so after
        INTERRUPT_NOTE, stop after INTERRUPT_GRACE (then _stop sends it
        SIGTERM); how long until the next of those is due."""
        if self.interrupted_at is None or not self._command_running():
            return math.inf
        waited = now - self.interrupted_at
        if waited >= INTERRUPT_GRACE:
            self.stopping = True
            return 0.0
        if waited >= INTERRUPT_NOTE and not self.interrupt_noted:
            self.interrupt_noted = True
            self._note(f"waiting for {self.cfg.command[0]} to end after Ctrl-C; it is sent "
                       f"SIGTERM in {INTERRUPT_GRACE - waited:.0f} s, or at the next Ctrl-C")
        return (INTERRUPT_GRACE if self.interrupt_noted else INTERRUPT_NOTE) - waited

    def _on_hup(self, signum: int, frame: object) -> None:
        self.checkpoint_requested = True

    def _status(self, source: SourceSpec, extra: str = "") -> str:
        text = (f"collecting on {len(self.collectors)} CPUs with {source.event.name} at "
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
            timeout = self._tick(now, next_upkeep)
            if deadline is not None:
                timeout = max(0.0, min(timeout, deadline - now))
            if watchdog:
                timeout = max(0.0, min(timeout, next_watchdog - now))
            timeout = max(0.0, min(timeout, self._interrupt_step(now)))
            watched = self.watched
            if watched is not None and watched.poll_every is not None:
                timeout = min(timeout, watched.poll_every)
            fds = [wake_r] + self.collectors.status_fds() + list(watched.fds if watched else ())
            try:
                readable, _, _ = select.select(fds, [], [], timeout)
            except InterruptedError:
                readable = []
            if wake_r in readable:
                _drain(wake_r)
            self.collectors.heartbeats(readable)
            self._reap()
            if watched is not None and watched.ended(readable):
                self.stopping = True  # the last process attached to has exited
            if self.pusher is not None:
                self.pusher.tend()
            if os.fstat(qdir.fd).st_nlink == 0:
                self._note(f"the output directory {qdir.path} was removed; stopping")
                self.directory_gone = True
                self.stopping = True
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                self.stopping = True
            self._interrupt_step(now)
            if self.checkpoint_requested:
                self.checkpoint_requested = False
                self.collectors.signal_all(signal.SIGUSR1)
            if self.cfg.upkeep and now >= next_upkeep:
                self._upkeep(qdir, source)
                next_upkeep = time.monotonic() + upkeep_every
            if watchdog and now >= next_watchdog:
                # Keep-alive only while every collector still beats: a stuck
                # one is killed (and restarted) before systemd gives up on us.
                self.collectors.kill_stuck()
                self.notifier.watchdog()
                next_watchdog = now + watchdog

    def _tick(self, now: float, next_upkeep: float) -> float:
        """How long the loop may sleep: signals (the command's end among
        them) and collectors' beats wake it anyway; what only time brings
        is the next upkeep, the next moment a collector could count as
        stuck, q-push's restart, and the look at the output directory,
        every TICK_SECONDS at most."""
        tick = TICK_SECONDS if self.pusher is None else 1.0
        if self.cfg.upkeep:
            tick = min(tick, next_upkeep - now)
        oldest = self.collectors.oldest_beat()
        if oldest is not None:
            tick = min(tick, oldest + self.cfg.stuck_after - now + 0.01)
        return max(0.0, tick)

    def _upkeep(self, qdir: QDir, source: SourceSpec) -> None:
        cfg = self.cfg
        room = self.room
        max_size = cfg.max_size
        if room is not None and max_size is not None:
            # room for the copies refused since the last round, from the oldest slices
            max_size -= min(room.wanted(), max_size // 4)
        mark = room.mark() if room is not None else 0
        collected = self.retention.copies_collected
        try:
            report = self.retention.maintain(
                qdir, stale_after=cfg.stale_after, grace=cfg.stale_after,
                copy_grace=cfg.copy_grace, max_size=max_size, max_age=cfg.max_age,
                compress=cfg.compress_closed, push=cfg.push is not None)
            if room is not None:
                room.measured(report.size if report.measured else retention.allocated(qdir),
                              mark)
        except OSError as e:
            text = f"cannot tend {qdir.path}: {e.strerror or e}"
            if text != self.upkeep_error:
                self._note(text)
                self.upkeep_error = text
            return
        finally:
            if room is not None and self.retention.copies_collected != collected:
                room.collected()
        self.upkeep_error = None
        if report.unsent_removed:
            n = len(report.unsent_removed)
            self._note(f"--max-size {cfg.max_size} forced removing {n} slice{'s' * (n != 1)} "
                       f"not yet pushed to {cfg.push}, the oldest {report.unsent_removed[0]}")
        if cfg.verbose and (report.removed or report.collected):
            self._note(f"retention removed {len(report.removed)} closed sets and "
                       f"{len(report.collected)} unreferenced copies")
        self.notifier.status(self._status(
            source, f"{report.sets} sets, {report.size / 1e6:.1f} MB"))

    def _reap(self) -> None:
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
            if self.pusher is not None and self.pusher.ended(pid, status):
                continue
            self.collectors.ended(pid, status, self.stopping)

    def _command_running(self) -> bool:
        return self.cmd_pid is not None and self.cmd_status is None

    def _stop(self, stop: int = signal.SIGTERM) -> None:
        """Have every collector write its final checkpoint (or, told
        PARENT_DEATH_SIGNAL, end without it), and wait for them and for the
        command (sent SIGTERM if the run ended before it did)."""
        self.collectors.signal_all(stop)
        now = time.monotonic()
        give_up: float | None = now + STOP_TIMEOUT
        cmd_deadline = None
        if self.cmd_pid is not None and self._command_running():
            kill_quietly(self.cmd_pid, signal.SIGTERM)
            cmd_deadline = now + COMMAND_GRACE
        while self.collectors.children or self._command_running():
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                now = time.monotonic()
                if give_up is not None and now > give_up:
                    self.collectors.kill_all(STOP_TIMEOUT)
                    give_up = None
                if self.cmd_pid is not None and cmd_deadline is not None and now > cmd_deadline:
                    self._note(f"{self.cfg.command[0]} did not end {COMMAND_GRACE:g} s after "
                               "SIGTERM; killing it")
                    kill_quietly(self.cmd_pid, signal.SIGKILL)
                    cmd_deadline = None
                select.select([], [], [], 0.02)  # not time.sleep: see tests' faketime run
                continue
            if pid == self.cmd_pid:
                self.cmd_status = status
            elif self.pusher is not None and self.pusher.ended(pid, status, restart=False):
                pass
            else:
                self.collectors.ended(pid, status, stopping=True)
        if self.pusher is not None:
            self.pusher.stop()  # after the final checkpoint: the last slices are closed


def _size_of(qdir: QDir) -> int | None:
    """Bytes on the disk that ``qdir`` alone holds (a sparse copy's holes
    and a link to a file that is still elsewhere cost none); None: it
    cannot be listed."""
    try:
        return retention.allocated(qdir)
    except OSError:
        return None


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except (BlockingIOError, InterruptedError):
        pass
