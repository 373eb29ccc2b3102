"""Which events exist here: resolving ``-e NAME``, the default, ``-l``."""

from __future__ import annotations

import errno
import os

from ..machine.host import LIVE, Host
from . import abi, syscalls
from .abi import EventSpec


class EventError(Exception):
    """An event that cannot be used; the message is for the user."""


def resolve(name: str, host: Host = LIVE) -> EventSpec:
    spec = abi.builtin_event(name)
    if spec is not None:
        return spec
    if ":" in name:
        tp = host.tracepoint_id(name)
        if tp is None:
            hint = "" if host.tracefs_root() else \
                " (tracefs is not mounted: mount -t tracefs nodev /sys/kernel/tracing)"
            raise EventError(f"unknown tracepoint {name!r}{hint}")
        return EventSpec(name, abi.TYPE_TRACEPOINT, tp, "events")
    raise EventError(f"unknown event {name!r}; q-syscollect -l lists the events of this machine")


def mount_tracefs() -> None:
    """Mount tracefs where perf looks for it, when nothing is mounted there
    (as perf does); quietly nothing where that is not permitted."""
    syscalls.libc().mount(b"nodev", b"/sys/kernel/tracing", b"tracefs", 0, None)


def probe(spec: EventSpec, frequency: int = 997) -> int | None:
    """Try the event on this process, user space only; None if it works,
    else the errno. (Works unprivileged: it tells what exists, not what is
    permitted.)"""
    flags = abi.FLAG_DISABLED | abi.FLAG_EXCLUDE_KERNEL | abi.FLAG_EXCLUDE_HV
    sample = 1
    if spec.type != abi.TYPE_TRACEPOINT:
        flags |= abi.FLAG_FREQ
        sample = frequency
    attr = abi.Attr(spec.type, spec.config, sample, abi.SAMPLE_IP, flags)
    try:
        fd = syscalls.perf_event_open(attr, 0, -1)
    except syscalls.PerfError as e:
        return e.errno
    os.close(fd)
    return None


def default_event() -> EventSpec:
    """``cycles`` where the CPU has a PMU, else ``cpu-clock``."""
    cycles = _builtin("cycles")
    if probe(cycles) is None:
        return cycles
    return _builtin("cpu-clock")


def _builtin(name: str) -> EventSpec:
    spec = abi.builtin_event(name)
    if spec is None:  # a name of abi's own tables: a broken install, not bad input
        raise LookupError(f"no built-in event {name!r}")
    return spec


def explain_unsupported(spec: EventSpec, err: int) -> str:
    if err in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
        why = "no hardware PMU for it on this machine" if spec.is_hardware else "not supported"
        return f"event {spec.name!r} is not supported here ({why}); q-syscollect -l lists " \
               "the events this machine offers"
    return f"event {spec.name!r} cannot be opened: {os.strerror(err)}"


def listing(host: Host = LIVE) -> list[str]:
    """Lines of ``q-syscollect -l``."""
    lines = ["Events this machine offers (use with -e):"]
    for group, names in (("hardware", abi.HARDWARE_EVENTS), ("software", abi.SOFTWARE_EVENTS)):
        for name in names:
            if probe(_builtin(name)) is None:
                lines.append(f"  {name:<28} [{group}]")
    if host.tracefs_root() is None:
        lines.append("  (tracepoints: tracefs is not mounted; mount -t tracefs nodev "
                     "/sys/kernel/tracing to use SYSTEM:EVENT tracepoints)")
        return lines
    for name in host.tracepoints():
        system, _, event = name.partition(":")
        lines.append(f"  {system}:{event:<27} [tracepoint]")
    return lines
