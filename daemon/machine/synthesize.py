"""Records for processes that existed before the collector saw them.

As perf does (its synthetic-events.c), a process found on the host is told
to the task table as records, so the table changes only one way, whether
the news came from the kernel's ring or from the host: a COMM for the
process, then per other thread a FORK (pid == ppid: a thread) and a COMM
with the thread's own name, then an MMAP2 per executable mapping.

The process's COMM is marked exec: the program the host shows now is this
process's own (its cmdline and exe, asked of the host when needed, belong
to it), and, like an exec, it replaces an older incarnation of the pid
unless that one is newer than the snapshot.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from ..decode.records import Cgroup, Comm, Mmap, SampleId, Task
from .host import Host
from .procfs import MapsLine

_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4
_MAP_SHARED, _MAP_PRIVATE = 1, 2


def process(host: Host, pid: int, time: int) -> list[Comm | Task | Mmap]:
    """The records of one process as ``host`` shows it at perf time
    ``time``; none if it is gone (or shows no comm or maps)."""
    comm = host.comm(pid)
    lines = host.maps(pid)
    if comm is None or lines is None:
        return []
    sid = SampleId(pid, pid, time)
    out: list[Comm | Task | Mmap] = [Comm(pid, pid, comm, True, sid, seen=False)]
    for tid in host.threads(pid):
        if tid == pid:
            continue
        name = host.comm(pid, tid)
        if name is None:  # ended meanwhile
            continue
        tsid = SampleId(pid, tid, time)
        out.append(Task(True, pid, pid, tid, pid, time, tsid))
        out.append(Comm(pid, tid, name, False, tsid, seen=False))
    out.extend(mmaps(pid, lines, time))
    return out


def mmaps(pid: int, lines: Iterable[MapsLine], time: int) -> list[Mmap]:
    """An MMAP2 record per executable line of a task's maps."""
    sid = SampleId(pid, pid, time)
    return [mmap(pid, line, sid) for line in lines if line.executable]


def mmap(pid: int, line: MapsLine, sid: SampleId) -> Mmap:
    prot = ((_PROT_READ if "r" in line.perms else 0) | (_PROT_WRITE if "w" in line.perms else 0)
            | (_PROT_EXEC if "x" in line.perms else 0))
    flags = _MAP_SHARED if line.perms[3:4] == "s" else _MAP_PRIVATE
    # perf calls anonymous memory //anon; a deleted file keeps its path (the
    # inode tells it from its replacement)
    return Mmap(pid, pid, line.start, line.end - line.start, line.offset, line.path or "//anon",
                line.maj, line.min, line.inode, prot=prot, flags=flags,
                executable=line.executable, sid=sid)


class Seen(NamedTuple):
    """One process as the host showed it: its records and what records
    cannot carry (read while it surely ran)."""

    pid: int
    records: list[Comm | Task | Mmap]
    ppid: int | None
    cmdline: list[str] | None
    exe: str | None


class Snapshot(NamedTuple):
    """The host's processes (and cgroups) at one moment: read once by the
    supervisor before it forks its collectors, each of which would
    otherwise read every process's /proc files itself."""

    processes: list[Seen]
    cgroups: list[Cgroup]


def seen(host: Host, pid: int, time: int) -> Seen | None:
    """``process`` and the process's parent, command line and executable."""
    records = process(host, pid, time)
    if not records:
        return None
    return Seen(pid, records, host.ppid(pid), host.cmdline(pid), host.exe(pid))


def snapshot(host: Host, time: int, with_cgroups: bool = True) -> Snapshot:
    """Every process the host shows now (and its cgroups)."""
    found = [s for s in (seen(host, pid, time) for pid in host.pids()) if s is not None]
    return Snapshot(found, cgroups(host, time) if with_cgroups else [])


def cgroups(host: Host, time: int) -> list[Cgroup]:
    """A CGROUP record per cgroup the host has now (its cgroup2 tree)."""
    sid = SampleId(0, 0, time)
    return [Cgroup(cid, path, sid) for cid, path in host.cgroups()]
