"""Choosing the event and the perf_event options of a run, and checking up
front that this machine lets them be opened, so that a run that cannot
collect says why in one line before anything starts."""

from __future__ import annotations

import errno
import os
from typing import Callable

from .config import Config
from .kernel import abi, arch, events, syscalls
from .kernel.abi import EventSpec
from .kernel.source import SourceSpec, ring_pages
from .machine.host import LIVE, Host
from .unwind import Unwinder


class CollectError(Exception):
    """Collection cannot start; the message is for the user."""


def permission_message(err: OSError, paranoid: int | None) -> str:
    level = "unknown" if paranoid is None else str(paranoid)
    return ("system-wide sampling is not permitted here: run as root, or grant CAP_PERFMON "
            f"(CAP_SYS_ADMIN on kernels before 5.8), or lower kernel.perf_event_paranoid "
            f"(now {level}) to 0 or less; to profile just one command and its children as "
            f"yourself, use: q-syscollect -i -- CMD ({os.strerror(err.errno or 0)})")


def attach_refusal(pid: int, err: OSError, host: Host, kernel: bool = False) -> str:
    """Why ``-p pid`` may not be profiled (``kernel``: its kernel samples
    were asked for, -k), and what would let it, in one line."""
    why = os.strerror(err.errno or 0)
    comm = host.comm(pid) or "?"
    owner = host.owner(pid)
    if owner is not None and owner != os.geteuid():
        # the kernel's ptrace rule (PTRACE_MODE_READ_REALCREDS), which /proc's
        # owner follows: another user's process, or one that is not dumpable
        return (f"cannot profile process {pid} ({comm}): it runs as uid {owner}, not as you "
                f"(uid {os.geteuid()}); only root or a holder of CAP_PERFMON or "
                f"CAP_SYS_PTRACE may profile another user's process ({why})")
    paranoid = host.sysctl_int("kernel.perf_event_paranoid")
    level = "unknown" if paranoid is None else str(paranoid)
    return (f"cannot profile process {pid} ({comm}): profiling is not permitted here: run "
            f"as root, or grant CAP_PERFMON, or lower kernel.perf_event_paranoid (now "
            f"{level}) to {1 if kernel else 2} or less ({why})")


def _spec_for(cfg: Config, spec: EventSpec, cpu: int, target: int, exclude_kernel: bool,
              branches: bool, pages: int) -> SourceSpec:
    dwarf = cfg.call_graph == "dwarf" and not cfg.kernel_only
    stacks = cfg.call_graph != "none"
    return SourceSpec(spec, cpu, cfg.cpus, cfg.frequency, target,
                      exclude_kernel=exclude_kernel, exclude_user=cfg.kernel_only,
                      callchain=stacks and not (dwarf and exclude_kernel),
                      user_callchain=not dwarf, branches=branches,
                      regs_user_mask=Unwinder(os.uname().machine).regs_mask if dwarf else 0,
                      stack_user=cfg.stack_size if dwarf else 0,
                      enable_on_exec=target != -1, ring_pages=pages,
                      sideband_pages=16 if len(cfg.cpus) <= 16 else 4,
                      attach=tuple(cfg.attach), children=cfg.children or not cfg.attach)


def _try_open(spec: SourceSpec, pid: int | None = None) -> OSError | None:
    """Whether the sampling event opens (on ``pid``, else the spec's own probe)."""
    try:
        fd = syscalls.perf_event_open(spec._replace(enable_on_exec=False).sampling_attr(),
                                      spec.probe_pid if pid is None else pid, spec.cpu)
    except syscalls.PerfError as e:
        return e
    os.close(fd)
    return None


def _by_threads(source: SourceSpec, note: Callable[[str], None]) -> SourceSpec:
    """-p without --children: events inherited by new threads alone, where
    the kernel has them (attr.inherit_thread, Linux 5.13: before, its
    unknown bit is EINVAL whoever asks); else by new processes too."""
    if source.children:
        return source
    err = _try_open(source)
    if err is None or err.errno != errno.EINVAL:
        return source
    err = _try_open(source._replace(children=True))
    if err is not None and err.errno == errno.EINVAL:
        return source  # something else is wrong: said as for any event
    note("this kernel cannot follow new threads without new processes "
         "(perf_event_attr.inherit_thread, Linux 5.13): the processes they start "
         "are profiled too, as with --children")
    return source._replace(children=True)


def _attachable(source: SourceSpec, host: Host, kernel: bool) -> None:
    """-p: every process attached to opens with these options; one that
    does not is an error naming it."""
    for pid in source.attach:
        err = _try_open(source, pid)
        if err is not None and err.errno in (errno.EACCES, errno.EPERM):
            raise CollectError(attach_refusal(pid, err, host, kernel))
        if err is not None and err.errno == errno.ESRCH:
            raise CollectError(f"-p {pid}: no such process")


def _sched(cfg: Config, source: SourceSpec, note: Callable[[str], None],
           host: Host) -> SourceSpec:
    """--off-cpu: the scheduler's tracepoints, tracefs mounted as perf does
    when it is not; each one checked up front."""
    if host.tracefs_root() is None:
        events.mount_tracefs()
    switch = host.tracepoint_id("sched:sched_switch")
    waking = host.tracepoint_id("sched:sched_waking") or \
        host.tracepoint_id("sched:sched_wakeup")
    per_task = cfg.inherit_only or bool(cfg.attach)
    if switch is None and per_task:
        note("--off-cpu: no sched:sched_switch tracepoint readable here (tracefs): "
             "the CPU profile by thread only")
        return source
    if switch is None:
        raise CollectError("--off-cpu needs the sched:sched_switch tracepoint, and tracefs "
                           "(mount -t tracefs nodev /sys/kernel/tracing) could not be read")
    out = source._replace(sched_switch=switch, sched_waking=waking or 0,
                  switch_stack_user=min(cfg.switch_stack_size, source.stack_user))
    for attr in (out.switch_attr(), out.sched_attr(waking or switch)):
        try:
            now = attr._replace(flags=attr.flags & ~abi.FLAG_ENABLE_ON_EXEC)
            fd = syscalls.perf_event_open(now, out.probe_pid, out.cpu)
        except syscalls.PerfError as e:
            if e.errno in (errno.EACCES, errno.EPERM) and per_task:
                note("--off-cpu: the scheduler's tracepoints are not permitted here (raw "
                     "tracepoint fields need root or CAP_PERFMON): no off-CPU or "
                     "wait-for-CPU time, the CPU profile by thread only")
                return source
            if e.errno in (errno.EACCES, errno.EPERM):
                raise CollectError("--off-cpu: the scheduler's tracepoints are not permitted "
                                   "(raw tracepoint fields need root or CAP_PERFMON)") from None
            raise CollectError(f"--off-cpu: cannot open the scheduler's tracepoints: "
                               f"{e.strerror}") from None
        os.close(fd)
    if not waking:
        note("no sched:sched_waking here: off-CPU time is not split from wait-for-CPU time")
    return out


def plan(cfg: Config, note: Callable[[str], None], host: Host = LIVE) -> SourceSpec:
    """Choose event and options, checking up front that they can be opened;
    ``note`` tells the user of a fallback."""
    try:
        arch.host()
    except arch.UnsupportedMachine as e:
        raise CollectError(str(e)) from None
    try:
        spec = events.resolve(cfg.event, host) if cfg.event else events.default_event()
    except events.EventError as e:
        raise CollectError(str(e)) from None
    root = os.geteuid() == 0
    record = 600 + (cfg.stack_size if cfg.call_graph == "dwarf" else 1024)
    pages = cfg.ring_pages or ring_pages(cfg.frequency, record, root, len(cfg.cpus))
    target = 0 if cfg.inherit_only else -1
    per_task = cfg.inherit_only or bool(cfg.attach)
    exclude_kernel = cfg.user_only
    branches = spec.is_hardware and cfg.call_graph != "none"
    source = _by_threads(_spec_for(cfg, spec, cfg.cpus[0], target, exclude_kernel, branches,
                                   pages), note)
    err = _try_open(source)
    if err is not None and branches:
        branches = False  # no branch sampling (LBR) here: plain samples
        source = source._replace(branches=False)
        err = _try_open(source)
    if err is not None and err.errno in (errno.EACCES, errno.EPERM) and per_task \
            and not exclude_kernel and not cfg.kernel_only:
        source = source._replace(exclude_kernel=True)
        err = _try_open(source)
        if err is None:
            note("kernel samples are not permitted (kernel.perf_event_paranoid="
                 f"{host.sysctl_int('kernel.perf_event_paranoid')}); "
                 "collecting user space only")
    if err is None and cfg.attach:
        _attachable(source, host, cfg.kernel_only)
    if err is None and cfg.off_cpu:
        source = _sched(cfg, source, note, host)
    if err is not None:
        if err.errno in (errno.EACCES, errno.EPERM) and cfg.attach:
            raise CollectError(attach_refusal(cfg.attach[0], err, host, cfg.kernel_only))
        if err.errno == errno.ESRCH and cfg.attach:
            raise CollectError(f"-p {cfg.attach[0]}: no such process")
        if err.errno in (errno.EACCES, errno.EPERM):
            raise CollectError(permission_message(
                err, host.sysctl_int("kernel.perf_event_paranoid")))
        if err.errno in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
            raise CollectError(events.explain_unsupported(spec, err.errno))
        rate = host.sysctl_int("kernel.perf_event_max_sample_rate")
        if err.errno == errno.EINVAL and rate is not None and cfg.frequency > rate:
            raise CollectError(f"-c {cfg.frequency} is above the kernel's limit of {rate} Hz "
                               "(kernel.perf_event_max_sample_rate)")
        raise CollectError(f"cannot open event {spec.name!r}: {err.strerror}")
    return source
