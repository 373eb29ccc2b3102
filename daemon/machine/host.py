"""The host seam: everything the daemon learns from the live machine.

``LiveHost`` is the only class that reads /proc and /sys (through procfs's
readers). Every other module takes a ``Host``: the collector, the task
table (owners), the object copier (map_files, a task's root, perf maps,
kallsyms), the JIT reader (a task's memory), and the supervisor's and the
command line's questions about the machine. Tests and benches replay a
recorded stream with a ``StaticHost`` and nothing of the machine they run
on leaks into what they write.

What the collector learns about processes comes as records synthesized
from a host (synthesize.py); what records cannot carry (cmdline, exe,
owner, parent, counters) is asked here, when it is needed.
"""

from __future__ import annotations

from collections import abc
from types import MappingProxyType
from typing import Container, NamedTuple, Protocol

from . import procfs
from .procfs import MapsLine


class Host(Protocol):
    """What the daemon asks of the machine. Process questions answer None
    (or empty) for a task that is gone, which is normal."""

    # processes and threads
    def pids(self) -> list[int]: ...
    def threads(self, pid: int) -> list[int]: ...
    def comm(self, pid: int, tid: int | None = None) -> str | None: ...
    def maps(self, pid: int) -> list[MapsLine] | None: ...
    def cmdline(self, pid: int) -> list[str] | None: ...
    def exe(self, pid: int) -> str | None: ...
    def ppid(self, pid: int) -> int | None: ...
    def tgid(self, pid: int) -> int | None: ...
    def owner(self, pid: int) -> int | None: ...
    def task_counters(self, pid: int) -> dict[str, float] | None: ...
    def read_memory(self, pid: int, address: int, size: int) -> bytes | None: ...
    def task_cgroup(self, pid: int) -> str | None: ...

    # files, as a task or the machine sees them (each a checked regular file)
    def open_mapped_file(self, pid: int, start: int, end: int) -> int | None: ...
    def open_in_root(self, pid: int, path: str) -> int | None: ...
    def open_plain(self, path: str) -> int | None: ...

    # the machine
    def cpu_counters(self, cpu: int) -> dict[str, float] | None: ...
    def loaded_modules(self, path: str = "/proc/modules") -> frozenset[tuple[str, str]] | None: ...
    def online_cpus(self) -> list[int]: ...
    def sysctl_int(self, name: str) -> int | None: ...
    def boot_id(self) -> str | None: ...
    def cpu_max_freq_hz(self) -> float | None: ...
    def own_vdso(self) -> tuple[int, bytes] | None: ...
    def machine(self) -> dict[str, str]: ...
    def tracepoint_id(self, name: str) -> int | None: ...
    def tracefs_root(self) -> str | None: ...
    def tracepoints(self) -> list[str]: ...
    def cgroups(self) -> list[tuple[int, str]]: ...


class LiveHost:
    """The machine this runs on: /proc, /sys and tracefs."""

    def pids(self) -> list[int]:
        return procfs.pids()

    def threads(self, pid: int) -> list[int]:
        return procfs.threads(pid)

    def comm(self, pid: int, tid: int | None = None) -> str | None:
        return procfs.comm(pid) if tid is None or tid == pid else procfs.thread_comm(pid, tid)

    def maps(self, pid: int) -> list[MapsLine] | None:
        return procfs.maps(pid)

    def cmdline(self, pid: int) -> list[str] | None:
        return procfs.cmdline(pid)

    def exe(self, pid: int) -> str | None:
        return procfs.exe(pid)

    def ppid(self, pid: int) -> int | None:
        return procfs.ppid(pid)

    def tgid(self, pid: int) -> int | None:
        return procfs.tgid(pid)

    def owner(self, pid: int) -> int | None:
        return procfs.owner(pid)

    def task_counters(self, pid: int) -> dict[str, float] | None:
        return procfs.task_counters(pid)

    def read_memory(self, pid: int, address: int, size: int) -> bytes | None:
        return procfs.read_memory(pid, address, size)

    def task_cgroup(self, pid: int) -> str | None:
        return procfs.task_cgroup(pid)

    def cgroups(self) -> list[tuple[int, str]]:
        return procfs.cgroups()

    def open_mapped_file(self, pid: int, start: int, end: int) -> int | None:
        return procfs.open_mapped_file(pid, start, end)

    def open_in_root(self, pid: int, path: str) -> int | None:
        return procfs.open_in_root(pid, path)

    def open_plain(self, path: str) -> int | None:
        return procfs.open_plain(path)

    def cpu_counters(self, cpu: int) -> dict[str, float] | None:
        return procfs.cpu_counters(cpu)

    def loaded_modules(self, path: str = "/proc/modules") -> frozenset[tuple[str, str]] | None:
        return procfs.loaded_modules(path)

    def online_cpus(self) -> list[int]:
        return procfs.online_cpus()

    def sysctl_int(self, name: str) -> int | None:
        return procfs.sysctl_int(name)

    def boot_id(self) -> str | None:
        return procfs.boot_id()

    def cpu_max_freq_hz(self) -> float | None:
        return procfs.cpu_max_freq_hz()

    def own_vdso(self) -> tuple[int, bytes] | None:
        # Read once: a forked collector has its supervisor's address space,
        # vdso included, and inherits the answer instead of parsing its maps.
        if not hasattr(self, "_vdso"):
            self._vdso = procfs.own_vdso()
        return self._vdso

    def machine(self) -> dict[str, str]:
        return procfs.machine()

    def tracepoint_id(self, name: str) -> int | None:
        return procfs.tracepoint_id(name)

    def tracefs_root(self) -> str | None:
        return procfs.tracefs_root()

    def tracepoints(self) -> list[str]:
        return procfs.tracepoints()


LIVE: Host = LiveHost()


class HostProcess(NamedTuple):
    """What a ``StaticHost`` says about one process."""

    comm: str
    maps: tuple[MapsLine, ...] = ()
    thread_names: abc.Mapping[int, str] = MappingProxyType({})  # tid -> name, besides the pid
    cmdline: tuple[str, ...] | None = None
    exe: str | None = None
    ppid: int | None = None
    uid: int | None = None
    counters: dict[str, float] | None = None
    memory: abc.Mapping[int, bytes] = MappingProxyType({})  # start address -> bytes
    cgroup: str | None = None  # its cgroup path, as /proc/PID/cgroup would say


class StaticHost:
    """A made-up machine for tests and benches: the processes it is given
    and nothing else. Only the files in ``files`` can be opened, by plain
    path (``None``: any regular file outside /proc and /sys, through
    procfs's checked opener); nothing is reached through a task. Its CPUs
    run at 1 GHz, ``busy`` (a share), and are a second older at each look."""

    def __init__(self, procs: dict[int, HostProcess] | None = None,
                 files: Container[str] | None = (), cpus: int = 1, busy: float = 0.5,
                 cgroups: dict[int, str] | None = None) -> None:
        self.procs = dict(procs or {})
        self.cgroup_paths = dict(cgroups or {})  # id -> path
        self.files = files
        self.cpus = cpus
        self.busy = busy
        self._looks = 0

    def pids(self) -> list[int]:
        return sorted(self.procs)

    def threads(self, pid: int) -> list[int]:
        p = self.procs.get(pid)
        return [pid, *sorted(t for t in p.thread_names if t != pid)] if p else []

    def comm(self, pid: int, tid: int | None = None) -> str | None:
        p = self.procs.get(pid)
        if p is None:
            return None
        return p.comm if tid is None or tid == pid else p.thread_names.get(tid)

    def maps(self, pid: int) -> list[MapsLine] | None:
        p = self.procs.get(pid)
        return list(p.maps) if p else None

    def cmdline(self, pid: int) -> list[str] | None:
        p = self.procs.get(pid)
        return list(p.cmdline) if p and p.cmdline is not None else None

    def exe(self, pid: int) -> str | None:
        p = self.procs.get(pid)
        return p.exe if p else None

    def ppid(self, pid: int) -> int | None:
        p = self.procs.get(pid)
        return p.ppid if p else None

    def tgid(self, pid: int) -> int | None:
        if pid in self.procs:
            return pid
        return next((p for p, proc in self.procs.items() if pid in proc.thread_names), None)

    def owner(self, pid: int) -> int | None:
        p = self.procs.get(pid)
        return p.uid if p else None

    def task_counters(self, pid: int) -> dict[str, float] | None:
        p = self.procs.get(pid)
        return dict(p.counters) if p and p.counters is not None else None

    def read_memory(self, pid: int, address: int, size: int) -> bytes | None:
        p = self.procs.get(pid)
        for start, data in (p.memory.items() if p else ()):
            if start <= address and address + size <= start + len(data):
                return data[address - start:address - start + size]
        return None

    def task_cgroup(self, pid: int) -> str | None:
        p = self.procs.get(pid)
        return p.cgroup if p else None

    def cgroups(self) -> list[tuple[int, str]]:
        return sorted(self.cgroup_paths.items())

    def open_mapped_file(self, pid: int, start: int, end: int) -> int | None:
        return None

    def open_in_root(self, pid: int, path: str) -> int | None:
        return None

    def _may_open(self, path: str) -> bool:
        if self.files is not None:
            return path in self.files
        return not path.startswith(("/proc/", "/sys/"))

    def open_plain(self, path: str) -> int | None:
        return procfs.open_plain(path) if self._may_open(path) else None

    def cpu_counters(self, cpu: int) -> dict[str, float] | None:
        if not 0 <= cpu < self.cpus:
            return None
        self._looks += 1
        return {"total": float(self._looks), "idle": self._looks * (1.0 - self.busy),
                "frequency-mhz": 1000.0}

    def loaded_modules(self, path: str = "/proc/modules") -> frozenset[tuple[str, str]] | None:
        # a module list given as a file (tests) is read; the machine's is not
        return procfs.loaded_modules(path) if self._may_open(path) else None

    def online_cpus(self) -> list[int]:
        return list(range(self.cpus))

    def sysctl_int(self, name: str) -> int | None:
        return None

    def boot_id(self) -> str | None:
        return None

    def cpu_max_freq_hz(self) -> float | None:
        return None

    def own_vdso(self) -> tuple[int, bytes] | None:
        return None

    def machine(self) -> dict[str, str]:
        return {"hostname": "static", "kernel_release": "0", "arch": "x86_64"}

    def tracepoint_id(self, name: str) -> int | None:
        return None

    def tracefs_root(self) -> str | None:
        return None

    def tracepoints(self) -> list[str]:
        return []
