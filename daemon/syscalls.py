"""The only ctypes calls of the collector: perf_event_open, its ioctls, and
two process knobs (parent-death signal, auxv)."""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import platform
import struct

from . import abi

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.getauxval.restype = ctypes.c_ulong
_libc.getauxval.argtypes = [ctypes.c_ulong]

NR_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241, "i686": 336, "i386": 336}.get(
    platform.machine(), 298)
PR_SET_PDEATHSIG = 1
AT_SYSINFO_EHDR = 33


class PerfError(OSError):
    """perf_event_open or one of its ioctls failed; ``errno`` says why."""


def perf_event_open(attr: abi.Attr, pid: int, cpu: int, group_fd: int = -1,
                    flags: int = abi.FD_CLOEXEC) -> int:
    data = attr.pack()
    buf = ctypes.create_string_buffer(data, len(data))
    fd = _libc.syscall(ctypes.c_long(NR_PERF_EVENT_OPEN), buf, ctypes.c_int(pid),
                       ctypes.c_int(cpu), ctypes.c_int(group_fd), ctypes.c_ulong(flags))
    if fd < 0:
        err = ctypes.get_errno()
        raise PerfError(err, os.strerror(err))
    return int(fd)


def enable(fd: int) -> None:
    fcntl.ioctl(fd, abi.IOC_ENABLE, 0)


def disable(fd: int) -> None:
    fcntl.ioctl(fd, abi.IOC_DISABLE, 0)


def event_id(fd: int) -> int:
    buf = bytearray(8)
    fcntl.ioctl(fd, abi.IOC_ID, buf, True)
    return int(struct.unpack("<Q", buf)[0])


def set_parent_death_signal(signum: int) -> None:
    """Have the kernel send ``signum`` to this process when its parent dies."""
    _libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)


def vdso_address() -> int:
    """Start of this process's vdso image (0 if there is none)."""
    return int(_libc.getauxval(AT_SYSINFO_EHDR))


def read_own_memory(address: int, size: int) -> bytes:
    return ctypes.string_at(address, size)
