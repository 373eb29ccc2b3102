"""Readers of /proc and /sys: the collector's only window onto existing tasks.

Parsers are pure functions over text; the readers around them are thin and
return None (or empty) for tasks that vanished meanwhile, which is normal.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

from qtools.qformat.cgroup import proc_cgroup_path
from qtools.qformat.files import open_regular, read_at_most

from ..kernel import syscalls


class MapsLine(NamedTuple):
    """One line of /proc/PID/maps."""

    start: int
    end: int
    perms: str
    offset: int
    maj: int
    min: int
    inode: int
    path: str
    deleted: bool

    @property
    def executable(self) -> bool:
        return "x" in self.perms


_MAPS = re.compile(r"([0-9a-f]+)-([0-9a-f]+) (\S{4}) ([0-9a-f]+) ([0-9a-f]+):([0-9a-f]+) "
                   r"(\d+)\s*(.*)")


def parse_maps(text: str) -> list[MapsLine]:
    out = []
    for line in text.splitlines():
        m = _MAPS.match(line)
        if not m:
            continue
        path = m[8]
        deleted = path.endswith(" (deleted)")
        if deleted:
            path = path[:-len(" (deleted)")]
        out.append(MapsLine(int(m[1], 16), int(m[2], 16), m[3], int(m[4], 16), int(m[5], 16),
                            int(m[6], 16), int(m[7]), path, deleted))
    return out


def parse_cpu_list(text: str) -> list[int]:
    """'0-3,5,7-8' -> [0, 1, 2, 3, 5, 7, 8]."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return sorted(set(cpus))


def _read(path: str, limit: int = 1 << 26) -> str | None:
    try:
        with open(path, "rb", buffering=0) as f:
            return read_at_most(f, limit).decode("utf-8", "surrogateescape")
    except OSError:
        return None


def loaded_modules(path: str = "/proc/modules") -> frozenset[tuple[str, str]] | None:
    """(name, load address) of each loaded kernel module; None if unreadable.
    Use counts are left out: they change all the time, the symbols do not."""
    text = _read(path)
    if text is None:
        return None
    return frozenset((f[0], f[-1]) for f in (line.split() for line in text.splitlines()) if f)


def pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def threads(pid: int) -> list[int]:
    try:
        return [int(n) for n in os.listdir(f"/proc/{pid}/task") if n.isdigit()]
    except OSError:
        return []


def comm(pid: int) -> str | None:
    text = _read(f"/proc/{pid}/comm")
    return text.rstrip("\n") if text is not None else None


def thread_comm(pid: int, tid: int) -> str | None:
    text = _read(f"/proc/{pid}/task/{tid}/comm")
    return text.rstrip("\n") if text is not None else None


def cmdline(pid: int) -> list[str] | None:
    text = _read(f"/proc/{pid}/cmdline", 1 << 16)
    if not text:
        return None
    return text.rstrip("\0").split("\0")


def exe(pid: int) -> str | None:
    try:
        path = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    return path[:-len(" (deleted)")] if path.endswith(" (deleted)") else path


def maps(pid: int) -> list[MapsLine] | None:
    text = _read(f"/proc/{pid}/maps")
    return parse_maps(text) if text is not None else None


def ppid(pid: int) -> int | None:
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def tgid(pid: int) -> int | None:
    """The process a task id belongs to (itself for a process); None if gone."""
    status = _read(f"/proc/{pid}/status", 1 << 16)
    for line in (status or "").splitlines():
        key, _, value = line.partition(":")
        if key == "Tgid":
            return int(value) if value.strip().isdigit() else None
    return None


def owner(pid: int) -> int | None:
    """The user a process runs as, as /proc shows it (its effective uid; root
    for one that is not dumpable, such as a setuid program); None if gone."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def open_mapped_file(pid: int, start: int, end: int) -> int | None:
    """The file mapped at [start, end) in ``pid``, through /proc/PID/map_files
    (the kernel's own reference: deleted and replaced files, other mount
    namespaces; needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE), or None."""
    return _open_regular(f"/proc/{pid}/map_files/{start:x}-{end:x}")


def open_in_root(pid: int, path: str) -> int | None:
    """``path`` as ``pid`` sees it (its mount namespace and root), or None.
    The path may name another file by now: callers check what they got."""
    return _open_regular(f"/proc/{pid}/root{path}", follow=False) if path.startswith("/") \
        else None


def open_plain(path: str) -> int | None:
    """A regular file at an absolute path, not through a final symlink, or None."""
    return _open_regular(path, follow=False) if path.startswith("/") else None


def _open_regular(path: str, follow: bool = True) -> int | None:
    try:
        return open_regular(path, follow=follow)
    except OSError:
        return None


def online_cpus() -> list[int]:
    text = _read("/sys/devices/system/cpu/online")
    return parse_cpu_list(text) if text else list(range(os.cpu_count() or 1))


def sysctl_int(name: str) -> int | None:
    text = _read(f"/proc/sys/{name.replace('.', '/')}")
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def boot_id() -> str | None:
    """The kernel's random id of this boot (a UUID), or None."""
    text = (_read("/proc/sys/kernel/random/boot_id", 64) or "").strip()
    return text if len(text) == 36 and all(c in "0123456789abcdef-" for c in text) else None


def cpu_max_freq_hz() -> float | None:
    """The nominal clock of CPU 0, to turn cycles into seconds."""
    text = _read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if text and text.strip().isdigit():
        return int(text) * 1e3
    try:
        import psutil  # rarely needed (cycles without cpufreq): not imported at start
        freq = psutil.cpu_freq()
    except (ImportError, OSError, NotImplementedError, AttributeError):
        freq = None
    if freq and freq.max:
        return float(freq.max) * 1e6
    text = _read("/proc/cpuinfo") or ""
    m = _MHZ.search(text)
    return float(m[1]) * 1e6 if m else None


def own_vdso() -> tuple[int, bytes] | None:
    """(start, bytes) of this process's vdso image, which every task shares."""
    start = syscalls.vdso_address()
    for line in maps(os.getpid()) or []:
        if line.path == "[vdso]" and (not start or line.start == start):
            return line.start, syscalls.read_own_memory(line.start, line.end - line.start)
    return None


def machine() -> dict[str, str]:
    u = os.uname()
    return {"hostname": u.nodename, "kernel_release": u.release,
            "arch": os.uname().machine}


def tracepoint_id(name: str) -> int | None:
    """Id of tracepoint ``sys:event`` from tracefs (mounted or not)."""
    system, _, event = name.partition(":")
    if not system or not event or "/" in name or ".." in name:
        return None
    for root in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        text = _read(f"{root}/events/{system}/{event}/id")
        if text and text.strip().isdigit():
            return int(text)
    return None


def tracefs_root() -> str | None:
    for root in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        if os.path.isdir(f"{root}/events"):
            return root
    return None


def tracepoints() -> list[str]:
    """``system:event`` of every tracepoint tracefs lists, sorted."""
    root = tracefs_root()
    if root is None:
        return []
    found: list[str] = []
    try:
        systems = sorted(os.listdir(f"{root}/events"))
    except OSError:
        return found
    for system in systems:
        path = f"{root}/events/{system}"
        if not os.path.isdir(path):
            continue
        for event in sorted(os.listdir(path)):
            if os.path.exists(f"{path}/{event}/id"):
                found.append(f"{system}:{event}")
    return found


def read_memory(pid: int, address: int, size: int) -> bytes | None:
    """``size`` bytes of a task's memory at ``address``, or None."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.pread(fd, size, address)
    except OSError:
        return None
    finally:
        os.close(fd)


# ---------------------------------------------------------------- global data

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# /proc/cpuinfo's fields, compiled at import (before the collectors fork)
_MHZ = re.compile(r"^cpu MHz\s*:\s*([\d.]+)", re.M)
_PROCESSOR = re.compile(r"^processor\s*:\s*(\d+)", re.M)


def task_counters(pid: int) -> dict[str, float] | None:
    """Cumulative counters of a process: CPU times and page faults of all its
    threads, context switches of its main thread (as psutil reports them).

    Read straight from /proc/PID/stat and /proc/PID/status: psutil's Process
    takes four reads and 0.17 ms a look, and the collector looks at every
    process it samples once a second."""
    stat = _read(f"/proc/{pid}/stat", 4096)
    status = _read(f"/proc/{pid}/status", 1 << 16)
    return None if stat is None or status is None else parse_task_counters(stat, status)


def parse_task_counters(stat: str, status: str) -> dict[str, float] | None:
    fields = stat[stat.rfind(")") + 2:].split()  # the comm may hold spaces and parentheses
    switches: dict[str, int] = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
            switches[key] = int(value) if value.strip().isdigit() else 0
    try:
        minflt, majflt, utime, stime = (int(fields[i]) for i in (7, 9, 11, 12))
    except (IndexError, ValueError):
        return None
    return {"user-seconds": utime / _CLOCK_TICKS, "system-seconds": stime / _CLOCK_TICKS,
            "voluntary-switches": switches.get("voluntary_ctxt_switches", 0),
            "involuntary-switches": switches.get("nonvoluntary_ctxt_switches", 0),
            "minor-faults": minflt, "major-faults": majflt}


def cpu_counters(cpu: int) -> dict[str, float] | None:
    """Cumulative time counters of one CPU, and its current clock in MHz.

    Read straight from /proc/stat and cpufreq (/proc/cpuinfo without it),
    as psutil's cpu_times and cpu_freq read them: importing psutil is a
    good share of the start-up."""
    times = parse_cpu_times(_read("/proc/stat", 1 << 22) or "", cpu)
    if times is None:
        return None
    out = cpu_time_split(times)
    mhz = cpu_mhz(cpu)
    if mhz:
        out["frequency-mhz"] = mhz
    return out


def cpu_time_split(times: list[float]) -> dict[str, float]:
    """A CPU's /proc/stat times as the collector keeps them: ``total`` (user
    to steal: guest time is in user and nice already, as psutil and top
    count it), ``idle`` (idle and iowait: the CPU ran nothing), ``iowait``
    and ``steal`` (a hypervisor ran something else), where the kernel
    gives them."""
    out = {"total": sum(times[:8]), "idle": times[3] + (times[4] if len(times) > 4 else 0.0)}
    for key, at in (("iowait", 4), ("steal", 7)):
        if len(times) > at:
            out[key] = times[at]
    return out


def parse_cpu_times(stat: str, cpu: int) -> list[float] | None:
    """The seconds of CPU ``cpu``'s line of /proc/stat (user, nice, system,
    idle, iowait, irq, softirq, steal, guest, guest_nice), or None."""
    prefix = f"cpu{cpu} "
    for line in stat.splitlines():
        if line.startswith(prefix):
            try:
                return [int(f) / _CLOCK_TICKS for f in line.split()[1:]]
            except ValueError:
                return None
    return None


def cpu_mhz(cpu: int) -> float | None:
    """The current clock of CPU ``cpu`` (cpufreq, else /proc/cpuinfo)."""
    text = _read(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq")
    if text and text.strip().isdigit():
        return int(text) / 1e3
    return parse_cpuinfo_mhz(_read("/proc/cpuinfo", 1 << 24) or "", cpu)


def parse_cpuinfo_mhz(cpuinfo: str, cpu: int) -> float | None:
    for block in cpuinfo.split("\n\n"):
        number = _PROCESSOR.search(block)
        if number and int(number[1]) == cpu:
            m = _MHZ.search(block)
            return float(m[1]) if m and float(m[1]) else None
    return None


def counters_delta(start: dict[str, float], end: dict[str, float]) -> dict[str, float]:
    """What happened between two snapshots of task_counters."""
    return {k: round(end[k] - start.get(k, 0), 6) for k in end}


def cpu_summary(start: dict[str, float], end: dict[str, float]) -> dict[str, float]:
    """Busy, iowait and steal shares and clock of a CPU over an interval
    (from cpu_counters): busy includes steal, not iowait, so the CPU's
    time is busy less steal, steal, iowait and the rest idle."""
    total = end["total"] - start["total"]
    out: dict[str, float] = {}
    if total > 0:
        out["busy"] = round(max(0.0, 1.0 - (end["idle"] - start["idle"]) / total), 4)
        for key in ("iowait", "steal"):
            if key in start and key in end:
                out[key] = round(min(1.0, max(0.0, (end[key] - start[key]) / total)), 4)
        out["seconds"] = round(total, 3)
    if "frequency-mhz" in end:
        out["frequency-mhz"] = end["frequency-mhz"]
    return out


MAX_CGROUP_DIRS = 1 << 14  # cgroups told at start; the rest come as records or not at all
MAX_CGROUP_DEPTH = 32


def task_cgroup(pid: int) -> str | None:
    """The task's cgroup path (the unified hierarchy's where there is one)."""
    text = _read(f"/proc/{pid}/cgroup", 1 << 16)
    return proc_cgroup_path(text) if text is not None else None


def perf_cgroup_root(mounts: str = "/proc/self/mounts") -> str | None:
    """Where the hierarchy that samples' cgroup ids come from is mounted:
    the perf_event controller's. A v1 mount of it wins (an older hybrid
    setup); else the cgroup2 hierarchy, where the controller is otherwise."""
    unified = None
    for line in (_read(mounts, 1 << 22) or "").splitlines():
        fields = line.split()
        if len(fields) < 4 or not fields[1].startswith("/"):
            continue
        where = fields[1].replace("\\040", " ")
        if fields[2] == "cgroup" and "perf_event" in fields[3].split(","):
            return where
        if fields[2] == "cgroup2" and unified is None:
            unified = where
    return unified


def cgroups(root: str | None = None, limit: int = MAX_CGROUP_DIRS) -> list[tuple[int, str]]:
    """(id, path) of each cgroup directory of the perf_event controller's
    hierarchy, at most ``limit``: the id is the directory's inode number,
    what PERF_SAMPLE_CGROUP carries (a 64-bit kernfs id); links are not
    followed."""
    root = root or perf_cgroup_root()
    if root is None:
        return []
    try:
        out = [(os.stat(root, follow_symlinks=False).st_ino, "/")]
    except OSError:
        return []
    todo = [(root, "", 0)]
    while todo and len(out) < limit:
        where, rel, depth = todo.pop()
        try:
            with os.scandir(where) as it:
                for entry in it:
                    if len(out) >= limit:
                        break
                    if not entry.is_dir(follow_symlinks=False):
                        continue
                    path = f"{rel}/{entry.name}"
                    out.append((entry.inode(), path))
                    if depth + 1 < MAX_CGROUP_DEPTH:
                        todo.append((entry.path, path, depth + 1))
        except OSError:
            continue  # removed meanwhile, or not readable
    return out
