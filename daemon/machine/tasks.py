"""The task table: which processes exist and what they have mapped.

Modelled as perf models it (machine -> process -> threads, maps -> map ->
dso): the table changes only by applying records (COMM, FORK, EXIT, MMAP2),
those from the kernel's rings and those synthesized from the host for the
processes that existed before (synthesize.py), so tests build a machine
from records alone. Each exec starts a new ``Process`` object (an
incarnation) for the same pid: what ran before the exec and what runs after
are different profiles.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Any, Callable, Iterable, NamedTuple

from ..decode.records import Comm, Mmap, Task

_serial = itertools.count(1)
MAX_THREADS = 4096  # threads remembered per process; the oldest ended ones go first


class ObjectKey(NamedTuple):
    """Identity of a mapped file: path plus device/inode (or build-id)."""

    path: str
    dev: tuple[int, int] = (0, 0)
    ino: int = 0
    build_id: bytes | None = None

    @property
    def special(self) -> bool:
        """``[vdso]``, ``[heap]``, anonymous memory (perf calls it ``//anon``):
        no file to copy."""
        return not self.path.startswith("/") or self.path.startswith("//")


class Mapping:
    """One executable mapping, never changed once made. Compared by
    identity: it is hashed for every sampled frame, and two mappings of the
    same range are still two."""

    __slots__ = ("start", "end", "pgoff", "obj")

    def __init__(self, start: int, end: int, pgoff: int, obj: ObjectKey) -> None:
        self.start = start
        self.end = end
        self.pgoff = pgoff
        self.obj = obj

    def __repr__(self) -> str:
        return f"Mapping({self.start:#x}-{self.end:#x} {self.pgoff:#x} {self.obj!r})"

    def contains(self, address: int) -> bool:
        return self.start <= address < self.end


class AddressMap:
    """The executable mappings of one address space, sorted by start.

    A new mapping replaces whatever it overlaps, as mmap(MAP_FIXED) does;
    partly covered mappings are trimmed.
    """

    def __init__(self, mappings: Iterable[Mapping] = ()) -> None:
        self._maps: list[Mapping] = []
        self._starts: list[int] = []
        for m in sorted(mappings, key=lambda m: m.start):
            self.add(m)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._maps)

    def __len__(self) -> int:
        return len(self._maps)

    def copy(self) -> AddressMap:
        clone = AddressMap()
        clone._maps = list(self._maps)
        clone._starts = list(self._starts)
        return clone

    def find(self, address: int) -> Mapping | None:
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0:
            m = self._maps[i]
            if address < m.end:
                return m
        return None

    def add(self, new: Mapping) -> None:
        if new.end <= new.start:
            return
        kept: list[Mapping] = []
        lo = bisect.bisect_left(self._starts, new.start)
        i = max(lo - 1, 0)
        while i < len(self._maps) and self._maps[i].start < new.end:
            old = self._maps[i]
            if old.end > new.start:
                del self._maps[i]
                del self._starts[i]
                if old.start < new.start:
                    kept.append(Mapping(old.start, new.start, old.pgoff, old.obj))
                if old.end > new.end:
                    kept.append(Mapping(new.end, old.end, old.pgoff + (new.end - old.start),
                                        old.obj))
                continue
            i += 1
        for m in (*kept, new):
            j = bisect.bisect_left(self._starts, m.start)
            self._maps.insert(j, m)
            self._starts.insert(j, m.start)


class Thread:
    """One thread of a process, with its own name (a COMM of its tid). An
    ended thread keeps its name for the reports until the process goes."""

    __slots__ = ("tid", "name", "ended")

    def __init__(self, tid: int, name: str, ended: bool = False) -> None:
        self.tid = tid
        self.name = name
        self.ended = ended

    def __repr__(self) -> str:
        return f"Thread({self.tid}, {self.name!r}{', ended' if self.ended else ''})"


class Process:
    """One incarnation of a process: from fork (or exec) to exit (or exec).

    Its threads are remembered with their names until it is forgotten, at
    most MAX_THREADS of them: a process that makes threads all the time
    would otherwise grow without end. Compared by identity."""

    def __init__(self, pid: int, comm: str, *, maps: AddressMap | None = None,
                 threads: dict[int, Thread] | Iterable[int] = (), since: int = 0,
                 ended: bool = False, exec_seen: bool = False, began: int = 0,
                 cmdline: list[str] | None = None, exe: str | None = None,
                 ppid: int | None = None, uid: int | None = None, stub: bool = False,
                 maps_version: int = 0) -> None:
        self.pid = pid
        self.comm = comm
        self.maps = AddressMap() if maps is None else maps
        #: tid -> Thread, the main thread (tid == pid) always included (a set of
        #: tids is taken too, each named after the process)
        self.threads: dict[int, Thread] = threads if isinstance(threads, dict) else {
            tid: Thread(tid, comm) for tid in threads}
        if pid not in self.threads:
            self.threads[pid] = Thread(pid, comm)
        self.since = since  # perf time (CLOCK_MONOTONIC ns) from which records apply
        self.ended = ended  # exited, or replaced by an exec
        self.exec_seen = exec_seen  # began with an exec we saw: cmdline/exe are this program's
        #: perf time (ns) of the fork or exec this image began with, as a ring
        #: record told it; 0 when it began before we looked
        self.began = began
        self.serial = next(_serial)
        self.cmdline = cmdline
        self.exe = exe
        self.maps_loaded_at = 0.0  # monotonic seconds of the last read of the host's maps
        self.maps_version = maps_version  # bumped whenever the maps change
        self.stub = stub  # made up for a sample before any record or the host told about it
        self.ppid = ppid
        self.unwind: object = None  # the user-stack unwinder's per-process state
        self.jit: Any = None  # the JIT tracker's per-process state (found per sample: no lookup)
        self.own = False  # one of the collector's own processes (frames/dwarf.py): kept by pc
        self.uid = uid  # its owner as first seen (seed, fork, exec): kept after it ends
        #: ended threads other than the main one, the first ended first: the first to forget
        self._ended_threads: dict[int, None] = {}

    def __repr__(self) -> str:
        return f"Process({self.pid}, {self.comm!r}{', ended' if self.ended else ''})"

    @property
    def live_threads(self) -> set[int]:
        return {tid for tid, t in self.threads.items() if not t.ended}

    def add_thread(self, tid: int, name: str) -> Thread:
        """A new thread (or a new one with the tid of an ended one)."""
        self._ended_threads.pop(tid, None)
        thread = self.threads[tid] = Thread(tid, name)
        if len(self.threads) > MAX_THREADS:
            self._forget_a_thread()
        return thread

    def name_thread(self, tid: int, name: str) -> None:
        thread = self.threads.get(tid)
        if thread is None or thread.ended:
            self.add_thread(tid, name)
        else:
            thread.name = name

    def end_thread(self, tid: int) -> None:
        thread = self.threads.get(tid)
        if thread is not None and not thread.ended:
            thread.ended = True
            if tid != self.pid:  # the main thread is the process's: never forgotten
                self._ended_threads[tid] = None

    def _forget_a_thread(self) -> None:
        if self._ended_threads:
            tid = next(iter(self._ended_threads))
            del self._ended_threads[tid]
        else:  # all alive: the oldest other than the main thread
            tid = next(t for t in self.threads if t != self.pid)
        del self.threads[tid]


def mapping_from_record(m: Mmap) -> Mapping:
    return Mapping(m.addr, m.addr + m.len, m.pgoff,
                   ObjectKey(m.filename, (m.maj, m.min), m.ino, m.build_id))


def _no_owner(pid: int) -> int | None:
    return None


class TaskTable:
    """All known processes of a machine, keyed by pid (current incarnation)."""

    def __init__(self, on_end: Callable[[Process], None] | None = None,
                 owner: Callable[[int], int | None] = _no_owner) -> None:
        self.procs: dict[int, Process] = {}
        self.on_end = on_end or (lambda p: None)
        # Who owns a pid now (the host's Host.owner): asked at an exec, the
        # one moment records cannot tell (a setuid program); a fork inherits
        # its parent's.
        self.owner = owner
        # the seed applies a record per thread and map: the handler of each, found once
        self._handlers: dict[type, Callable[[Any], None]] = {
            Mmap: self.on_mmap, Comm: self.on_comm, Task: self.on_task}

    def __len__(self) -> int:
        return len(self.procs)

    def get(self, pid: int) -> Process | None:
        return self.procs.get(pid)

    def refresh_maps(self, proc: Process, mmaps: Iterable[Mmap]) -> None:
        """Replace a process's maps with what the host shows now (as records)."""
        proc.maps = AddressMap(mapping_from_record(m) for m in mmaps if m.executable)
        proc.maps_version += 1

    def _install(self, proc: Process, old: Process | None) -> None:
        if old is not None and old is not proc:
            self._end(old)
        self.procs[proc.pid] = proc

    def _end(self, proc: Process) -> None:
        if not proc.ended:
            proc.ended = True
            self.on_end(proc)

    def forget(self, proc: Process) -> None:
        """Drop an ended process once everything about it has been written."""
        if self.procs.get(proc.pid) is proc:
            del self.procs[proc.pid]

    # ------------------------------------------------------------ records

    def apply(self, record: Comm | Task | Mmap) -> None:
        """Feed one record to this table's handler for it (the collector's
        drains hand the same records to the same handlers: routes.Handlers)."""
        self._handlers[type(record)](record)

    # The handlers of the records routes.ROUTES feeds this table.
    def on_mmap(self, m: Mmap) -> None:
        self._mmap(m)

    def on_comm(self, c: Comm) -> None:
        self._comm(c)

    def on_task(self, t: Task) -> None:
        self._fork(t) if t.fork else self._exit(t)

    def _stale(self, proc: Process | None, time: int) -> bool:
        # Records from before a process was seeded describe what the seed
        # already holds; applying them again would, e.g., restart a profile.
        # A stub holds nothing: every record completes it.
        return proc is not None and not proc.stub and time and time < proc.since  # type: ignore

    def _complete(self, stub: Process, comm: str, parent: Process | None) -> None:
        """Fill in a stub from the records that describe it, in place: the
        samples already counted for it stay with it."""
        stub.comm = comm
        stub.threads[stub.pid].name = comm
        stub.stub = False
        if parent is not None:
            stub.ppid = parent.pid
            stub.maps = parent.maps.copy()
            stub.maps_version += 1
            stub.cmdline = stub.cmdline or parent.cmdline
            stub.exe = stub.exe or parent.exe
            stub.uid = parent.uid
        else:
            stub.uid = self.owner(stub.pid)

    def _mmap(self, m: Mmap) -> None:
        if not m.executable:
            return
        proc = self.procs.get(m.pid)
        if proc is None or self._stale(proc, m.sid.time):
            return
        proc.maps.add(mapping_from_record(m))
        proc.maps_version += 1

    def _comm(self, c: Comm) -> None:
        proc = self.procs.get(c.pid)
        if self._stale(proc, c.sid.time):
            return
        if proc is not None and proc.stub:
            self._complete(proc, c.comm, None)
            proc.exec_seen = c.exec
            if c.exec and c.seen:
                proc.began = c.sid.time
            proc.name_thread(c.tid, c.comm)
        elif c.exec:
            # exec: same pid, new program, empty address space (the new
            # image's MMAP2 records follow).
            uid = self.owner(c.pid)
            new = Process(c.pid, c.comm, since=c.sid.time, exec_seen=True,
                          began=c.sid.time if c.seen else 0,
                          ppid=proc.ppid if proc else None,
                          uid=uid if uid is not None else proc.uid if proc else None)
            self._install(new, proc)
        elif proc is None:
            new = Process(c.pid, c.comm, since=c.sid.time, uid=self.owner(c.pid))
            new.name_thread(c.tid, c.comm)
            self._install(new, None)
        else:
            if c.tid == c.pid:
                proc.comm = c.comm
            proc.name_thread(c.tid, c.comm)  # COMM of another tid names that thread

    def _fork(self, t: Task) -> None:
        parent = self.procs.get(t.ppid)
        if t.pid == t.ppid:  # a new thread of an existing process
            if parent is not None and not self._stale(parent, t.time):
                creator = parent.threads.get(t.ptid)  # a new thread has its creator's name
                parent.add_thread(t.tid, creator.name if creator else parent.comm)
            return
        existing = self.procs.get(t.pid)
        if existing is not None and existing.stub:
            self._complete(existing, parent.comm if parent else existing.comm, parent)
            existing.began = t.time
            return
        if self._stale(existing, t.time):
            return
        child = Process(t.pid, parent.comm if parent else "", since=t.time, began=t.time,
                        cmdline=parent.cmdline if parent else None,
                        exe=parent.exe if parent else None, ppid=t.ppid,
                        uid=parent.uid if parent else self.owner(t.pid))
        if parent is not None:
            child.maps = parent.maps.copy()
        self._install(child, existing)

    def _exit(self, t: Task) -> None:
        proc = self.procs.get(t.pid)
        if proc is None or self._stale(proc, t.time):
            return
        proc.end_thread(t.tid)
        if t.tid == t.pid:
            self._end(proc)
