"""The systemd unit's sandbox and limits, checked where systemd is not the
init: systemd-analyze reads the unit (security, syscall-filter), and the
daemon runs for real with the unit's arguments and every feature the unit
may be given, its system calls traced (strace) and its memory measured
(PSS). The unit itself was run under a real systemd by hand
(systemd/README.md says how)."""

from __future__ import annotations

import contextlib
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from qtools.daemon.sets.objects import CopyLimits
from tests.conftest import command
from tests.integration.test_push import DROP_IN, Ingest
from tests.integration.test_python_jit import PYSHARES, interpreter
from tests.integration.test_service import UNIT, _systemd_analyze, debian_tool

EXPOSURE_BEFORE = 4.3  # systemd-analyze security of the unit before this sandbox
MEMORY_MARGIN = 1.5  # the limit over the measured peak
GIB = 1 << 30


def unit_values(text: str, key: str) -> list[str]:
    """Every ``key=`` assignment of a unit's text, in order."""
    return re.findall(rf"^{key}=(.*)$", text, re.M)


def installed(text: str) -> str:
    return text.replace("/usr/local/bin/q-syscollect", command("q-syscollect"))


def exec_args(text: str, directory: Path) -> list[str]:
    """The arguments of the unit's command, writing into ``directory``."""
    line = [v for v in unit_values(text, "ExecStart") if v][-1]
    args = shlex.split(line)[1:]
    args[args.index("-d") + 1] = str(directory)
    return args


def exposure(tool: str, root: Path) -> float:
    """systemd-analyze's overall exposure of q-syscollect.service as
    installed under ``root`` (its drop-ins included)."""
    r = subprocess.run([tool, "security", "--offline=true", f"--root={root}",
                        "q-syscollect.service"], capture_output=True, text=True)
    level = re.search(r"Overall exposure level for q-syscollect\.service: (\d+\.\d+)", r.stdout)
    assert level, r.stdout + r.stderr
    return float(level[1])


def test_the_unit_is_less_exposed_with_and_without_the_push_drop_in(tmp_path: Path) -> None:
    tool = _systemd_analyze()
    system = tmp_path / "etc" / "systemd" / "system"
    system.mkdir(parents=True)
    (system / "q-syscollect.service").write_text(installed(UNIT.read_text()))
    assert exposure(tool, tmp_path) < EXPOSURE_BEFORE
    (system / "q-syscollect.service.d").mkdir()
    (system / "q-syscollect.service.d" / "push.conf").write_text(installed(DROP_IN.read_text()))
    assert exposure(tool, tmp_path) < EXPOSURE_BEFORE


def test_the_unit_leaves_kernel_symbols_readable() -> None:
    # systemd's ProtectKernelTunables= makes /proc/kallsyms an empty file, and
    # ProtectKernelLogs= drops CAP_SYSLOG (kallsyms then shows zero
    # addresses): either leaves every kernel frame unnamed. What they protect
    # must be protected by hand instead.
    text = UNIT.read_text()
    assert not unit_values(text, "ProtectKernelTunables")
    assert not unit_values(text, "ProtectKernelLogs")
    assert "CAP_SYSLOG" in unit_values(text, "CapabilityBoundingSet")[-1].split()
    read_only = " ".join(unit_values(text, "ReadOnlyPaths")).split()
    assert {"/sys", "/proc/sys"} <= set(read_only)
    hidden = {p.lstrip("-") for p in " ".join(unit_values(text, "InaccessiblePaths")).split()}
    assert {"/proc/kmsg", "/proc/kcore"} <= hidden


def syscall_groups(tool: str) -> dict[str, list[str]]:
    """Each @group of ``systemd-analyze syscall-filter`` and its members
    (system calls and groups)."""
    out = subprocess.run([tool, "syscall-filter"], capture_output=True, text=True,
                         check=True).stdout
    groups: dict[str, list[str]] = {}
    members: list[str] | None = None
    for line in out.splitlines():
        if line.startswith("@"):
            members = groups.setdefault(line.split()[0], [])
        elif members is not None and line.strip() and not line.lstrip().startswith("#"):
            members.append(line.split()[0])
    return groups


def expand(names: list[str], groups: dict[str, list[str]]) -> set[str]:
    calls: set[str] = set()
    for name in names:
        calls |= expand(groups[name], groups) if name.startswith("@") else {name}
    return calls


def allowed_syscalls(text: str, groups: dict[str, list[str]]) -> set[str]:
    """What the unit's SystemCallFilter= lines allow, read as systemd reads
    them: the first, an allow list, starts from @default; each later line
    adds its calls, or with ~ removes them."""
    lines = unit_values(text, "SystemCallFilter")
    assert lines and not lines[0].startswith("~"), lines
    allowed = expand(["@default"], groups)
    for line in lines:
        calls = expand(line.lstrip("~").split(), groups)
        allowed = allowed - calls if line.startswith("~") else allowed | calls
    return allowed


def traced_syscalls(summary: Path) -> set[str]:
    """The system calls of an ``strace -c`` table."""
    calls = set()
    for line in summary.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and re.fullmatch(r"[\d.]+", fields[0]) and fields[-1] != "total":
            calls.add(fields[-1])
    return calls


def _python_with_perf_trampolines() -> str | None:
    try:
        return interpreter("3.12")
    except pytest.skip.Exception:
        return None


@contextlib.contextmanager
def machine_load(build: Callable[..., Path]) -> Iterator[None]:
    """What the collector meets on a real machine: a compute-bound program,
    a JIT with its perf map, CPython's perf trampolines (read from the
    process's memory) where a CPython 3.12 is installed, and short-lived
    processes."""
    cmds = [[str(build("p-fan")), "120"], [str(build("jit")), "120"],
            ["sh", "-c", "while :; do /bin/true; seq 2000 >/dev/null; sleep 0.05; done"]]
    python = _python_with_perf_trampolines()
    if python:
        cmds.append([python, "-X", "perf", str(PYSHARES), "100000"])
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL) for c in cmds]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _daemon(proc: subprocess.Popen) -> psutil.Process | None:
    """The q-syscollect of ``proc``: itself, or the child strace started."""
    with contextlib.suppress(psutil.NoSuchProcess):
        for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children()]:
            if "q-syscollect" in " ".join(p.cmdline()[:2]):
                return p
    return None


def _pss(daemon: psutil.Process) -> int:
    """Proportional set size of the daemon, its collectors and its q-push."""
    total = 0
    with contextlib.suppress(psutil.NoSuchProcess):
        for p in [daemon, *daemon.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                total += p.memory_full_info().pss
    return total


def run_as_the_unit(args: list[str], prefix: tuple[str, ...] = (), seconds: float = 20
                    ) -> tuple[subprocess.CompletedProcess, int]:
    """q-syscollect with ``args`` for ``seconds`` (``prefix``: the command
    it runs under), sent SIGHUP (a reload) half way; its exit and its peak
    PSS, sampled throughout."""
    proc = subprocess.Popen([*prefix, command("q-syscollect"), *args, "-t", str(seconds)],
                            stderr=subprocess.PIPE, text=True)
    peak, reloaded = 0, False
    start = time.monotonic()
    try:
        while proc.poll() is None:
            daemon = _daemon(proc)
            if daemon is not None:
                peak = max(peak, _pss(daemon))
                if not reloaded and time.monotonic() - start > seconds / 2:
                    daemon.send_signal(signal.SIGHUP)
                    reloaded = True
            time.sleep(0.2)
        err = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", err), peak


def test_every_system_call_of_a_real_run_is_allowed(perf: None, build: Callable[..., Path],
                                                     tmp_path: Path) -> None:
    tool = _systemd_analyze()
    strace = debian_tool("strace", "strace")
    text = UNIT.read_text()
    allowed = allowed_syscalls(text, syscall_groups(tool))
    # Every feature a drop-in may add: off-CPU time, pushing, slices closed
    # and compressed and retention run, checkpoints, a reload; then -k.
    ingest = Ingest()
    used: set[str] = set()
    try:
        with machine_load(build):
            runs = [["--off-cpu", "--push", ingest.url, "--checkpoint", "1", "--rotate", "4"],
                    ["-k", "--checkpoint", "1"]]
            for n, extra in enumerate(runs):
                summary = tmp_path / f"strace-{n}"
                r, _peak = run_as_the_unit(
                    [*exec_args(text, tmp_path / f"q{n}"), *extra],
                    (strace, "-f", "-qq", "-c", "-o", str(summary)), seconds=14 - 6 * n)
                assert r.returncode == 0, r.stderr
                used |= traced_syscalls(summary)
    finally:
        ingest.close()
    assert ingest.attempts, "q-push sent nothing: its calls were not traced"
    assert {"perf_event_open", "execve", "memfd_create"} <= used  # the collectors were traced
    assert not used - allowed, sorted(used - allowed)


def size(value: str) -> int:
    """A systemd size (1G, 512M, 4096) in bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(float(value.rstrip("KMGT")) * units.get(value[-1:], 1))


def memory_max_at(value: str, cpus: int, per_cpu: int) -> int:
    """MemoryMax= in bytes on a machine of ``cpus`` CPUs and ``per_cpu``
    bytes of memory for each."""
    if value.endswith("%"):
        return int(float(value[:-1]) / 100 * cpus * per_cpu)
    return size(value)


def test_the_memory_limit_holds_a_measured_run_and_never_throttles(
        perf: None, build: Callable[..., Path], tmp_path: Path) -> None:
    text = UNIT.read_text()
    # A throttle (MemoryHigh=, CPUQuota=) stretches whatever the daemon is
    # doing into a stall: the limit is a hard one, and swap cannot stand in.
    assert not unit_values(text, "MemoryHigh") and not unit_values(text, "CPUQuota")
    assert unit_values(text, "MemorySwapMax") == ["0"]
    cpus = psutil.cpu_count()
    limit = memory_max_at(unit_values(text, "MemoryMax")[-1], cpus, GIB)
    ingest = Ingest()
    try:
        with machine_load(build):
            r, peak = run_as_the_unit([*exec_args(text, tmp_path / "q"), "--push", ingest.url,
                                       "--checkpoint", "2", "--rotate", "5"])
    finally:
        ingest.close()
    assert r.returncode == 0, r.stderr
    assert ingest.received, r.stderr  # q-push ran, and is counted
    # the unit's limit on a machine with as many CPUs and 1 GiB for each
    assert limit > MEMORY_MARGIN * peak, (limit >> 20, peak >> 20)


def test_no_file_within_the_daemons_limits_reaches_the_file_size_limit() -> None:
    # the largest files: object copies (--max-object-size), kallsyms, perf maps
    limit = size(unit_values(UNIT.read_text(), "LimitFSIZE")[-1])
    defaults = CopyLimits()
    assert limit >= 2 * max(defaults.object_size, defaults.kallsyms_size, defaults.map_size)
