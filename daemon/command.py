"""The command q-syscollect profiles (``q-syscollect -- CMD``).

It is forked first and held before exec until every collector is ready, so
its first instruction is sampled; its end ends the run, and q-syscollect
then ends as it did: with its exit status, or killed by the same signal, as
``perf record`` does, so a shell sees 128+N either way.
"""

from __future__ import annotations

import errno
import os
import resource
import signal
import stat
import sys
from typing import NamedTuple, Sequence

NOT_FOUND, NOT_EXECUTABLE = 127, 126  # the statuses a shell gives


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


class NotRunnable(Exception):
    """The command cannot be run: ``status`` is the shell's for it (127 not
    found, 126 found but not executable), the message is for the user."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _runnable(path: str) -> int | None:
    """None if exec could run ``path``; else the errno it would fail with."""
    try:
        st = os.stat(path)
    except OSError as e:
        return e.errno
    if not stat.S_ISREG(st.st_mode):
        return errno.EACCES  # what execve says of a directory or a device
    effective = os.access in os.supports_effective_ids
    if not os.access(path, os.X_OK, effective_ids=effective):
        return errno.EACCES
    return None


def resolve(name: str) -> str:
    """The file ``execvp(name)`` would run, looked for before anything of
    the run is made; ``NotRunnable`` where there is none.

    As execvp does: a name with a slash is that file; else each directory
    of PATH in turn, past those that do not have it or do not let it run,
    and "permission denied" (126) only if some had it but none ran it."""
    if not name:
        raise NotRunnable(NOT_FOUND, "cannot run '': command not found")
    candidates = [name] if "/" in name else \
        [os.path.join(d or ".", name) for d in os.get_exec_path()]
    denied = False
    for path in candidates:
        err = _runnable(path)
        if err is None:
            return path
        denied = denied or err not in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG,
                                       errno.ELOOP)
    if denied:
        raise NotRunnable(NOT_EXECUTABLE, f"cannot run {name}: {os.strerror(errno.EACCES)}")
    why = os.strerror(errno.ENOENT) if "/" in name else "command not found"
    raise NotRunnable(NOT_FOUND, f"cannot run {name}: {why}")


def exec_failure(name: str, path: str, report: str) -> NotRunnable:
    """What the held command (``name``, found at ``path``) said when its
    exec failed (``release``): the errno and its text; not found (127) for
    ENOENT, as a shell says of a missing program or interpreter, else not
    executable (126)."""
    number, _, text = report.partition(" ")
    if number != str(errno.ENOENT):
        return NotRunnable(NOT_EXECUTABLE, f"cannot run {name}: {text or report}")
    if os.path.lexists(path):  # there, but not what it needs to start
        text = "a file it needs to start (its #! interpreter or ELF loader) is missing"
    return NotRunnable(NOT_FOUND, f"cannot run {name}: {text or report}")


def spawn(argv: Sequence[str]) -> tuple[int, int, int]:
    """Fork ``argv``, held before exec.

    Returns its pid, the fd that releases it, and a close-on-exec fd that
    reads the exec error ("ERRNO TEXT"), or EOF once exec succeeded.
    """
    r, w = os.pipe()
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.close(err_r)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores them; a shell does not
            signal.signal(sig, signal.SIG_DFL)
        status = NOT_EXECUTABLE
        try:
            os.read(r, 1)
            os.execvp(argv[0], list(argv))
        except OSError as e:
            status = NOT_FOUND if e.errno == errno.ENOENT else NOT_EXECUTABLE
            os.write(err_w, f"{e.errno or 0} {e.strerror or e}".encode())
        finally:
            os._exit(status)  # never back into q-syscollect's code
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
