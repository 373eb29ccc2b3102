"""Processes that already run, profiled where they are (``q-syscollect -p``).

perf_events follows tasks, not processes: an event opened for a thread id
samples that thread, and, inherited, the tasks it starts afterwards. So, as
``perf record -p`` does, each collector opens an event per thread of every
process attached to, listing them from /proc just before (``threads``; the
collectors of two CPUs may list a thread the other's inherits: their events
sample different CPUs, so nothing is counted twice). Each is inherited by the
threads it starts and, with ``--children``, by the processes too (without,
``attr.inherit_thread`` keeps new processes out: Linux 5.13). A thread started
in the moment between the listing and the opening of its creator's event is
not followed, as with perf record.

The run ends when the last of the processes has ended: each is watched
through a pidfd (Linux 5.3), which is readable from the moment it exits,
whoever reaps it, and names that process even if its pid is reused later.
"""

from __future__ import annotations

import errno
import os
from typing import Iterable, Sequence

from .machine import synthesize
from .machine.host import Host
from .plan import CollectError

POLL_SECONDS = 1.0  # without pidfds: how often to look whether they still run


def processes(pids: Iterable[int], host: Host) -> tuple[int, ...]:
    """The processes ``-p`` names, each once, in its order: a thread's id
    stands for its process, as in perf record -p; CollectError for one
    that is not there."""
    found: list[int] = []
    for pid in pids:
        tgid = host.tgid(pid)
        if tgid is None:
            raise CollectError(f"-p {pid}: no such process")
        if tgid not in found:
            found.append(tgid)
    return tuple(found)


def threads(host: Host, pids: Iterable[int]) -> tuple[int, ...]:
    """Every thread of the processes now: the tasks to open events for."""
    return tuple(tid for pid in pids for tid in sorted(host.threads(pid)))


def snapshot(host: Host, pids: Iterable[int], time: int,
             with_cgroups: bool) -> synthesize.Snapshot:
    """The processes as records for a collector's task table (what their
    threads' first samples need: names, mappings), as system-wide runs
    synthesize every process."""
    seen = [s for s in (synthesize.seen(host, pid, time) for pid in pids) if s is not None]
    return synthesize.Snapshot(seen, synthesize.cgroups(host, time) if with_cgroups else [])


class Watched:
    """The processes attached to, until the last one ends."""

    def __init__(self, pids: Sequence[int], host: Host) -> None:
        self.host = host
        self.fds: dict[int, int] = {}  # pidfd -> pid
        self.polled: set[int] = set()  # without pidfds (before Linux 5.3)
        try:
            for pid in pids:
                self._watch(pid)
        except BaseException:
            self.close()
            raise

    def _watch(self, pid: int) -> None:
        try:
            self.fds[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            raise CollectError(f"-p {pid}: no such process") from None
        except OSError as e:
            if e.errno != errno.ENOSYS:
                raise CollectError(f"-p {pid}: cannot watch it: {e.strerror}") from None
            self.polled.add(pid)

    @property
    def poll_every(self) -> float | None:
        """How often ``ended`` must be asked without a readable pidfd."""
        return POLL_SECONDS if self.polled else None

    def ended(self, readable: Iterable[int]) -> bool:
        """Take note of the ends ``readable`` pidfds tell (and the polled
        processes' ends); whether all have ended now."""
        for fd in readable:
            if fd in self.fds:
                del self.fds[fd]
                os.close(fd)
        # a polled process is gone once reaped (a zombie still counts)
        self.polled = {pid for pid in self.polled if self.host.tgid(pid) == pid}
        return not self.fds and not self.polled

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = {}
