"""The per-CPU collectors, as their supervisor sees them.

Forked side by side (``start_all``), each says "ok" once its events are
open, a "beat" a second and "end" after its final checkpoint, on a status
pipe (messages.py). One that stops beating is killed; one that dies is
restarted, RESTARTS_PER_MINUTE times a minute at most; what each reported
is added up as it ends. A collector that died (what it collected since its
last checkpoint died with it) or ended before its final checkpoint is a
loss the run's last line names.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Callable, TextIO

from qtools.qformat import QDir

from . import attach
from .child import collector_main
from .config import Config
from .kernel.source import SourceSpec
from .machine import synthesize
from .machine.host import Host
from .messages import Tally, parse_line, split_lines, tell
from .plan import CollectError
from .sets.checkpoint import RunInfo
from .sets.kallsymscopy import KallsymsCopy

RESTARTS_PER_MINUTE = 5


class Child:
    """A running collector, as its parent sees it."""

    __slots__ = ("pid", "cpu", "status_fd", "last_seen", "pending", "tally", "ended")

    def __init__(self, pid: int, cpu: int, status_fd: int, last_seen: float) -> None:
        self.pid = pid
        self.cpu = cpu
        # the status lines of messages.py: "ok", a "beat" a second, "end"
        self.status_fd = status_fd
        self.last_seen = last_seen
        self.pending = b""  # the start of a line not yet complete
        self.tally = Tally()  # its totals as last reported
        self.ended = False  # it reported "end": its final checkpoint is done


class Collectors:
    """The run's collectors: started, heard, restarted and retired."""

    def __init__(self, cfg: Config, out: TextIO, host: Host, kallsyms: KallsymsCopy,
                 note: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.out = out
        self.host = host
        self.kallsyms = kallsyms  # the children inherit it, and renew it
        self.note = note
        self.children: dict[int, Child] = {}
        self.restarts: dict[int, list[float]] = {}
        self.retired = Tally()  # the totals of collectors that have ended
        self.lost: list[str] = []  # collectors lost for good, or their final checkpoint
        self.deaths: dict[int, list[str]] = {}  # why each restarted collector died, by cpu
        self._opening: list[int] = []  # status pipes of collectors forked, not yet "ok"
        self._run: tuple[SourceSpec, RunInfo, QDir] | None = None  # what a restart needs

    def __len__(self) -> int:
        return len(self.children)

    # ------------------------------------------------------------ starting

    def start_all(self, source: SourceSpec, run: RunInfo, qdir: QDir) -> None:
        """A collector per CPU, all forked before waiting for the first to
        open its events: they start side by side. System-wide, the host's
        processes (-p: those attached to) are read once here for all of
        them (a collector restarted later reads them itself)."""
        self._run = (source, run, qdir)
        snapshot = None
        if source.attach:
            snapshot = attach.snapshot(self.host, source.attach, time.monotonic_ns(),
                                       with_cgroups=source.cgroups)
        elif source.target_pid == -1:
            snapshot = synthesize.snapshot(self.host, time.monotonic_ns(),
                                           with_cgroups=source.cgroups)
        spawned = []
        try:
            for cpu in self.cfg.cpus:
                spawned.append((*self._spawn(cpu, snapshot), cpu))
        finally:
            self._opening = []
        error: CollectError | None = None
        for pid, r, cpu in spawned:
            try:
                self._started(pid, r, cpu)
            except CollectError as e:
                error = error or e
        if error is not None:
            raise error

    def _start(self, cpu: int) -> None:
        try:
            pid, r = self._spawn(cpu)
        finally:
            self._opening = []
        self._started(pid, r, cpu)

    def _spawn(self, cpu: int, snapshot: synthesize.Snapshot | None = None) -> tuple[int, int]:
        """Fork ``cpu``'s collector; its pid and the read end of its status pipe."""
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            pid = self._fork(cpu, w, snapshot)
        except BaseException:
            os.close(r)
            raise
        finally:
            os.close(w)
        self._opening.append(r)
        return pid, r

    def _fork(self, cpu: int, status_w: int, snapshot: synthesize.Snapshot | None) -> int:
        assert self._run is not None
        source, run, qdir = self._run
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:
            for child in self.children.values():
                os.close(child.status_fd)
            for fd in self._opening:
                os.close(fd)
            code = collector_main(self.cfg, source._replace(cpu=cpu), run, qdir, status_w,
                                  self.out, set(self.children), self.kallsyms, self.host,
                                  snapshot)
        except BaseException as e:  # a child must never return into the parent's code
            try:
                tell(self.out, f"collector for cpu {cpu} failed: {e!r}")
            except BaseException:
                pass
        finally:
            os._exit(code)

    def _started(self, pid: int, r: int, cpu: int) -> None:
        """Wait for the "ok" of the collector ``_spawn`` forked."""
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

    def status_fds(self) -> list[int]:
        return [c.status_fd for c in self.children.values()]

    def oldest_beat(self) -> float | None:
        """When the collector heard from longest ago was last heard."""
        return min((c.last_seen for c in self.children.values()), default=None)

    def signal_all(self, sig: int) -> None:
        for pid in list(self.children):
            kill_quietly(pid, sig)

    def heartbeats(self, readable: list[int]) -> None:
        for child in self.children.values():
            if child.status_fd in readable:
                self._read_status(child)
        self.kill_stuck()

    def _read_status(self, child: Child) -> None:
        """Take in what ``child`` has said since the last look."""
        while True:
            try:
                data = os.read(child.status_fd, 4096)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                return
            child.last_seen = time.monotonic()
            child.pending, lines = split_lines(child.pending, data)
            for line in lines:
                kind, tally = parse_line(line)
                if tally is not None:
                    child.tally, child.ended = tally, kind == "end"

    def kill_stuck(self) -> None:
        now = time.monotonic()
        for child in self.children.values():
            if now - child.last_seen > self.cfg.stuck_after:
                self.note(f"collector for cpu {child.cpu} (pid {child.pid}) has not "
                          f"reported for {self.cfg.stuck_after:g} s; killing it")
                child.last_seen = now
                kill_quietly(child.pid, signal.SIGKILL)

    def kill_all(self, waited: float) -> None:
        """The collectors that did not finish in ``waited`` seconds, killed."""
        for stuck in self.children.values():
            self.note(f"collector for cpu {stuck.cpu} did not finish its final "
                      f"checkpoint in {waited:g} s; killing it")
            kill_quietly(stuck.pid, signal.SIGKILL)

    # ------------------------------------------------------------ ending

    def ended(self, pid: int, status: int, stopping: bool) -> bool:
        """Account for a child that ended, if it was a collector (False if
        not): its totals kept, and, while the run goes on, restarted."""
        child = self.children.pop(pid, None)
        if child is None:
            return False
        why = self._retire(child, status)
        if stopping:
            self._check_final(child, why)
        else:
            self._restart(child.cpu, pid, why)
        return True

    def _retire(self, child: Child, status: int) -> str:
        """Account for a collector that has ended; why it ended."""
        self._read_status(child)
        os.close(child.status_fd)
        self.retired = self.retired.plus(child.tally)
        return f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else \
            f"exit status {os.WEXITSTATUS(status)}"

    @property
    def losses(self) -> list[str]:
        """What the run lost with its collectors, for its last line."""
        died = []
        for cpu, whys in sorted(self.deaths.items()):
            times = f" {len(whys)} times" if len(whys) > 1 else ""
            causes = ", ".join(dict.fromkeys(whys))
            died.append(f"the collector for cpu {cpu} died{times} ({causes}) and was "
                        "restarted, losing what it had collected since its last checkpoint")
        return died + self.lost

    def _check_final(self, child: Child, why: str) -> None:
        if not child.ended:
            self.lost.append(f"the collector for cpu {child.cpu} ended ({why}) before its "
                             "final checkpoint")

    def _restart(self, cpu: int, pid: int, why: str) -> None:
        recent = [t for t in self.restarts.get(cpu, []) if time.monotonic() - t < 60]
        if len(recent) >= RESTARTS_PER_MINUTE:
            self.note(f"collector for cpu {cpu} died ({why}) {len(recent)} times in a "
                      "minute; not restarting it")
            self.lost.append(f"the collector for cpu {cpu} died and was not restarted")
            return
        self.note(f"collector for cpu {cpu} (pid {pid}) died ({why}); restarting it")
        self.restarts[cpu] = recent + [time.monotonic()]
        try:
            self._start(cpu)
        except CollectError as e:
            self.note(f"cannot restart the collector for cpu {cpu}: {e}")
            self.lost.append(f"the collector for cpu {cpu} died and could not be "
                             "restarted")
        else:
            self.deaths.setdefault(cpu, []).append(why)


def kill_quietly(pid: int, sig: int) -> None:
    """Send ``sig`` to ``pid``, which may have ended already."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
