"""q-syscollect --push: the one q-push process beside the collectors.

q-push is a reader of `.q` (it builds pprof profiles with the viewer's
code, which the daemon never imports), so it runs as a program of its own:
started after the collectors, in a session of its own (a Ctrl-C meant for
q-syscollect does not end it before the final checkpoint), restarted with
a growing delay when it dies, and asked to drain (SIGUSR1: push what is
closed for DRAIN_SECONDS, then end) only after every collector has written
its final checkpoint, which closes the last slices. SIGTERM would end it
at once, a request in flight abandoned. Nothing it does can stop or slow
collection: it is never waited for except at the end, and then for a
bounded time.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from typing import Callable

DRAIN_SECONDS = 20.0  # q-push --drain: pushing the last slices at the end of a run
DRAIN_SIGNAL = signal.SIGUSR1  # q-push's "drain, then end"
EXIT_GRACE = 10.0  # beyond the drain, before SIGKILL
MAX_DELAY = 300.0  # between restarts of a q-push that keeps dying


def command(url: str, directory: str, settled: float) -> list[str]:
    """q-push's command line: the script installed beside q-syscollect, else
    the module run by this interpreter. ``settled``: how long an open set
    sits unchanged before it counts as closed (its writer is gone), the
    same as retention's rule; a live set that is idle is not rewritten, and
    must not be pushed before its slice ends."""
    import shutil  # only with --push
    script = shutil.which("q-push", path=os.path.dirname(os.path.abspath(sys.argv[0])))
    head = [script] if script else [sys.executable, "-m", "qtools.viewer.commands.push"]
    return [*head, "--follow", "--drain", f"{DRAIN_SECONDS:g}", "--settled", f"{settled:g}",
            "--parent", str(os.getpid()), url, directory]


class PushChild:
    def __init__(self, url: str, directory: str, settled: float,
                 note: Callable[[str], None]) -> None:
        self.url = url
        self.directory = directory
        self.settled = settled
        self.note = note
        self.pid: int | None = None
        self.failures = 0
        self.restart_at: float | None = None
        self.started = 0.0

    def start(self) -> None:
        try:
            devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            devnull = None
        actions = [(os.POSIX_SPAWN_DUP2, devnull, 0)] if devnull is not None else []
        argv = command(self.url, self.directory, self.settled)
        try:
            self.pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=actions,
                                      setsid=True)
            self.started = time.monotonic()
        except OSError as e:
            self.note(f"cannot start q-push: {e.strerror or e}; collecting without pushing")
            self._later()
        finally:
            if devnull is not None:
                os.close(devnull)

    def _later(self) -> None:
        self.pid = None
        self.failures += 1
        self.restart_at = time.monotonic() + min(MAX_DELAY, 2.0 ** min(self.failures, 10))

    def ended(self, pid: int, status: int, restart: bool = True) -> bool:
        """Take the end of ``pid`` if it is q-push's (True)."""
        if pid != self.pid:
            return False
        why = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else \
            f"exit status {os.WEXITSTATUS(status)}"
        self._later()
        if not restart:
            self.restart_at = None
            if status:
                self.note(f"q-push (pid {pid}) ended ({why}); unsent slices stay queued")
            return True
        self.note(f"q-push (pid {pid}) ended ({why}); restarting it in "
                  f"{self.restart_at - time.monotonic() if self.restart_at else 0:.0f} s")
        return True

    def tend(self) -> None:
        """Restart q-push when its delay is over; it has run well for a
        while: the delay starts over."""
        if self.pid is None and self.restart_at is not None \
                and time.monotonic() >= self.restart_at:
            self.restart_at = None
            self.start()
        elif self.pid is not None and self.failures and \
                time.monotonic() - self.started > MAX_DELAY:
            self.failures = 0

    def stop(self) -> None:
        """Let q-push send the last slices (bounded), then end it."""
        pid, self.pid, self.restart_at = self.pid, None, None
        if pid is None:
            return
        _kill(pid, DRAIN_SIGNAL)
        give_up = time.monotonic() + DRAIN_SECONDS + EXIT_GRACE
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return
            if done:
                return
            if time.monotonic() > give_up:
                self.note(f"q-push did not end {DRAIN_SECONDS + EXIT_GRACE:g} s after "
                          "it was asked to; killing it (what it had not sent stays queued)")
                _kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            select.select([], [], [], 0.05)  # not time.sleep: see supervisor._stop


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
