"""The command q-syscollect profiles (``q-syscollect -- CMD``).

It is forked first and held before exec until every collector is ready, so
its first instruction is sampled; its end ends the run, and q-syscollect
then ends as it did: with its exit status, or killed by the same signal, as
``perf record`` does, so a shell sees 128+N either way.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
from typing import NamedTuple, Sequence


class Ending(NamedTuple):
    """How q-syscollect ends: an exit status, or a signal to die of."""

    code: int = 0
    signal: int | None = None


def ending_of(status: int | None) -> Ending:
    """The Ending that passes on a ``waitpid`` status (None: still running)."""
    if status is None:
        return Ending()
    if os.WIFSIGNALED(status):
        return Ending(128 + os.WTERMSIG(status), os.WTERMSIG(status))
    return Ending(os.waitstatus_to_exitcode(status))


def spawn(argv: Sequence[str]) -> tuple[int, int, int]:
    """Fork ``argv``, held before exec.

    Returns its pid, the fd that releases it, and a close-on-exec fd that
    reads the exec error, or EOF once exec succeeded.
    """
    r, w = os.pipe()
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.close(err_r)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores them; a shell does not
            signal.signal(sig, signal.SIG_DFL)
        os.read(r, 1)
        try:
            os.execvp(argv[0], list(argv))
        except OSError as e:
            os.write(err_w, (e.strerror or str(e)).encode())
        os._exit(127)
    os.close(r)
    os.close(err_w)
    return pid, w, err_r


def release(release_fd: int, err_fd: int) -> str | None:
    """Let the held command exec; the reason it could not, or None."""
    try:
        os.write(release_fd, b"x")
    finally:
        os.close(release_fd)
    try:
        error = os.read(err_fd, 4096).decode(errors="replace")
    finally:
        os.close(err_fd)
    return error or None


def die_of(signum: int) -> int:
    """End this process by ``signum``, as the command ended.

    Returns (128 + signum) only where the signal does not end a process
    (one whose default action is to be ignored)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:
        # The command's core dump is the one that matters, not the collector's.
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (OSError, ValueError):
        pass
    signal.set_wakeup_fd(-1)
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)
    return 128 + signum
