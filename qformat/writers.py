"""Who writes a `.q`: the names of writers' temporary files, and whether a
writer still runs.

A temporary file is named ``.tmp-PID.START-RANDOM``, START being the
writer's start time (clock ticks after boot, /proc/PID/stat field 22): a
pid alone would make the leftovers of a writer killed long ago look alive
again once another process gets its pid, and so never be removed.
"""

from __future__ import annotations

import errno
import os


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks after boot) of a process, from
    /proc/PID/stat (fields 3 and 22); None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read(4096).decode("ascii", "replace")
    except FileNotFoundError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # the comm may hold spaces and parentheses
    if len(fields) < 20 or not fields[19].isdigit():
        raise OSError(errno.EINVAL, "unexpected /proc/PID/stat", pid)
    return fields[0], int(fields[19])


_tag: tuple[int, str] | None = None


def writer_tag() -> str:
    """``PID.START`` of this process, read once per process (a fork has its own)."""
    global _tag
    pid = os.getpid()
    if _tag is None or _tag[0] != pid:
        try:
            found = proc_stat(pid)
        except OSError:
            found = None
        _tag = (pid, f"{pid}.{found[1]}" if found else str(pid))
    return _tag[1]


def alive(pid: int, start: int | None = None) -> bool:
    """Does the writer ``pid`` (started at ``start``, when known) still run?
    A zombie has stopped writing; a pid with another start time is another
    process. Without /proc, only whether the pid exists can be told."""
    if pid <= 0:
        return False
    try:
        found = proc_stat(pid)
    except OSError:
        return _exists(pid)
    if found is None:
        return not os.path.isdir("/proc/self") and _exists(pid)
    state, started = found
    return state not in ("Z", "X") and (start is None or started == start)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
