"""Shared fixtures: building workloads, and the perf_event_open gate.

Tests that need perf_event_open skip when it is not permitted here, unless
Q_REQUIRE_PERF=1 (CI sets it): then they fail. tests/ is put on sys.path so
test modules can import their helper modules (qsynth, ...) directly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Tests never judge elapsed time, and hypothesis' default 200 ms deadline per
# example is one: on a loaded 2-core machine it failed round trips that were
# right, only slow.
settings.register_profile("q-tools", deadline=None)
# CI (.ci/run sets Q_DERANDOMIZE=1) draws the same examples each run: a red
# CI then says the change broke something, not that the search was lucky;
# other runs keep drawing new examples, which is how the searches find bugs.
settings.register_profile("q-tools-ci", deadline=None, derandomize=True)
settings.load_profile("q-tools-ci" if os.environ.get("Q_DERANDOMIZE") == "1" else "q-tools")

sys.path.insert(0, os.path.dirname(__file__))

WORKLOADS = Path(__file__).parent / "workloads"

# q-syscollect options for tests that look at a workload's own sets: with the
# default --min-samples 100, a task with fewer samples on a CPU is folded into
# the pid-less PROG-cpuN set (no pid, no command line), and a 2 s p-fan on a
# loaded 2-core machine may get fewer than 100 samples on a CPU it ran on.
OWN_SETS = ("--min-samples", "1")


def perf_problem() -> str | None:
    """Why system-wide sampling cannot be used here, or None."""
    try:
        from qtools.daemon.kernel import abi, syscalls
        attr = abi.Attr(abi.TYPE_SOFTWARE, 0, 997, abi.SAMPLE_IP,
                        abi.FLAG_DISABLED | abi.FLAG_FREQ)
        fd = syscalls.perf_event_open(attr, -1, 0)
    except OSError as e:
        return f"system-wide perf_event_open is not permitted here: {e.strerror}"
    os.close(fd)
    return None


JIT_FILES = ("perf-*.map", "jit-*.dump")  # what JIT runtimes (Python -X perf...) leave in /tmp


@pytest.fixture(scope="session", autouse=True)
def jit_files_left_in_tmp():
    """Remove, after the session, the perf maps and jitdumps its programs
    left in /tmp (those of pids now gone): a later run's process that
    gets one of those pids would otherwise find a map that is not its own."""
    tmp = Path("/tmp")
    before = {p.name for pattern in JIT_FILES for p in tmp.glob(pattern)}
    yield
    for pattern in JIT_FILES:
        for path in tmp.glob(pattern):
            pid = path.stem.partition("-")[2]
            if path.name not in before and pid.isdigit() and not Path(f"/proc/{pid}").exists():
                path.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def perf() -> None:
    problem = perf_problem()
    if problem:
        if os.environ.get("Q_REQUIRE_PERF") == "1":
            pytest.fail(f"Q_REQUIRE_PERF=1 but {problem}")
        pytest.skip(problem)


@pytest.fixture(scope="session")
def build(tmp_path_factory):
    """build(name, *flags) -> path of tests/workloads/NAME.c compiled with cc,
    named NAME-TAG (under 16 characters for p-fan and jit, so it is the comm)."""
    out = tmp_path_factory.mktemp("workloads")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("a C compiler (cc) is needed to build the test workloads")
    made: dict[tuple[str, ...], Path] = {}
    # A name of this session's own: collections are system-wide, and a test
    # that selects its sets by command name must not pick up another p-fan.
    tag = f"{os.getpid() & 0xFFFF:04x}"

    def _build(name: str, *flags: str) -> Path:
        key = (name, *flags)
        if key not in made:
            exe = out / f"{name}-{tag}{len(made) or ''}"
            source = WORKLOADS / f"{name}.c"
            subprocess.run([cc, "-O2", "-fno-inline", *flags, "-o", str(exe), str(source),
                            "-lm", "-lpthread"], check=True)
            made[key] = exe
        return made[key]
    return _build


def command(name: str) -> str:
    """The installed console script ``name`` (q-syscollect, q-view).

    End-to-end tests run what users install: the scripts next to this
    interpreter (the test venv that `make test` made from the wheel), or
    those in $Q_BIN_DIR when set."""
    where = os.environ.get("Q_BIN_DIR") or os.path.dirname(sys.executable)
    path = os.path.join(where, name)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{name} is not installed in {where}: install q-tools there first")
    return path


def q_syscollect(*args: str, **kw) -> subprocess.CompletedProcess:
    """Run the installed q-syscollect."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 120)
    return subprocess.run([command("q-syscollect"), *args], **kw)


def q_syscollect_popen(*args: str, **kw) -> subprocess.Popen:
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("text", True)
    return subprocess.Popen([command("q-syscollect"), *args], **kw)


def q_view(*args: str, **kw) -> subprocess.CompletedProcess:
    """Run the installed q-view."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 300)
    return subprocess.run([command("q-view"), *args], **kw)


def q_view_popen(*args: str, **kw) -> subprocess.Popen:
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("text", True)
    return subprocess.Popen([command("q-view"), *args], **kw)
