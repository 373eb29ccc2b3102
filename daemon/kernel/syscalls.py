"""The only ctypes calls of the collector: perf_event_open, its ioctls,
membarrier, and two process knobs (parent-death signal, auxv). Syscall
numbers come from daemon/kernel/arch.py."""

from __future__ import annotations

import ctypes
import fcntl
import os

from . import abi, arch


def _load_libc() -> ctypes.CDLL:
    """The C library, by its usual name first: ``ctypes.util.find_library``
    runs ``ldconfig -p`` (a fork and exec at every start)."""
    for name in ("libc.so.6", None):  # None: the symbols the interpreter has (musl)
        try:
            return ctypes.CDLL(name, use_errno=True)
        except OSError:
            pass
    from ctypes.util import find_library
    return ctypes.CDLL(find_library("c"), use_errno=True)


_libc = _load_libc()


def libc() -> ctypes.CDLL:
    return _libc
_libc.syscall.restype = ctypes.c_long
_libc.getauxval.restype = ctypes.c_ulong
_libc.getauxval.argtypes = [ctypes.c_ulong]

PR_SET_PDEATHSIG = 1
MEMBARRIER_CMD_PRIVATE_EXPEDITED = 1 << 3
MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED = 1 << 4
AT_SYSINFO_EHDR = 33


class PerfError(OSError):
    """perf_event_open or one of its ioctls failed; ``errno`` says why."""


def perf_event_open(attr: abi.Attr, pid: int, cpu: int, group_fd: int = -1,
                    flags: int = abi.FD_CLOEXEC) -> int:
    """Open an event; ``arch.UnsupportedMachine`` on a machine whose syscall
    number is not known (never a guess: the number may mean another call)."""
    data = attr.pack()
    buf = ctypes.create_string_buffer(data, len(data))
    return perf_event_open_raw(buf, pid, cpu, group_fd, flags)


def perf_event_open_raw(attr: ctypes.Array[ctypes.c_char] | None, pid: int, cpu: int,
                        group_fd: int, flags: int) -> int:
    """The syscall itself, ``attr`` a packed perf_event_attr (or None: NULL)."""
    fd = _libc.syscall(ctypes.c_long(arch.host().nr_perf_event_open), attr, ctypes.c_int(pid),
                       ctypes.c_int(cpu), ctypes.c_int(group_fd), ctypes.c_ulong(flags))
    if fd < 0:
        err = ctypes.get_errno()
        raise PerfError(err, os.strerror(err))
    return int(fd)


def membarrier(cmd: int) -> None:
    """membarrier(2) ``cmd`` with no flags; OSError if the kernel refuses."""
    if _libc.syscall(ctypes.c_long(arch.host().nr_membarrier), ctypes.c_int(cmd),
                     ctypes.c_uint(0), ctypes.c_int(0)) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def enable(fd: int) -> None:
    fcntl.ioctl(fd, abi.IOC_ENABLE, 0)


def disable(fd: int) -> None:
    fcntl.ioctl(fd, abi.IOC_DISABLE, 0)


def set_output(fd: int, into: int) -> None:
    """Have event ``fd`` write its records into the ring of event ``into``
    (same CPU): one ring for many tasks' events."""
    fcntl.ioctl(fd, abi.IOC_SET_OUTPUT, into)


def event_id(fd: int) -> int:
    """The id the kernel gives the event's samples (PERF_SAMPLE_IDENTIFIER)."""
    buf = bytearray(8)
    fcntl.ioctl(fd, abi.IOC_ID, buf)
    return int.from_bytes(buf, "little")


def set_parent_death_signal(signum: int) -> None:
    """Have the kernel send ``signum`` to this process when its parent dies."""
    _libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)


def vdso_address() -> int:
    """Start of this process's vdso image (0 if there is none)."""
    return int(_libc.getauxval(AT_SYSINFO_EHDR))


def read_own_memory(address: int, size: int) -> bytes:
    return ctypes.string_at(address, size)
