"""q-syscollect -p without the kernel: which processes -p names, which tasks
get events, what those events inherit, and what the run says it does."""

from __future__ import annotations

import errno
import os

import pytest

from qtools.daemon import attach
from qtools.daemon.cli import config_from, parser
from qtools.daemon.kernel import abi
from qtools.daemon.kernel.source import SourceSpec
from qtools.daemon.machine.host import HostProcess, StaticHost
from qtools.daemon.messages import start_line
from qtools.daemon.plan import CollectError, attach_refusal

HOST = StaticHost({10: HostProcess("server", thread_names={11: "worker", 12: "worker"}),
                   20: HostProcess("other")}, cpus=2)


def test_a_thread_stands_for_its_process_and_each_is_named_once():
    assert attach.processes([11, 10, 20, 12], HOST) == (10, 20)


def test_a_process_that_is_not_there_is_named():
    with pytest.raises(CollectError, match=r"^-p 30: no such process$"):
        attach.processes([10, 30], HOST)


def test_every_thread_of_every_process_gets_an_event():
    assert attach.threads(HOST, (10, 20)) == (10, 11, 12, 20)


def test_the_snapshot_holds_the_processes_attached_to_only():
    snap = attach.snapshot(HOST, (10,), 0, with_cgroups=False)
    assert [seen.pid for seen in snap.processes] == [10]


def _flags(**kw: object) -> int:
    return SourceSpec(abi.builtin_event("cpu-clock"), 0, [0, 1], **kw).sampling_attr().flags


def test_attached_events_are_inherited_by_threads_and_by_processes_with_children():
    threads_only = _flags(attach=(10,), children=False)
    assert threads_only & abi.FLAG_INHERIT and threads_only & abi.FLAG_INHERIT_THREAD
    assert not threads_only & abi.FLAG_ENABLE_ON_EXEC  # running already: enabled at once
    with_children = _flags(attach=(10,), children=True)
    assert with_children & abi.FLAG_INHERIT and not with_children & abi.FLAG_INHERIT_THREAD
    assert not _flags() & (abi.FLAG_INHERIT | abi.FLAG_INHERIT_THREAD)  # system-wide


@pytest.mark.parametrize("argv,what", [
    (["-p", "10"], "sampling pid 10 and its threads on 2 CPUs"),
    (["-p", "11,20", "--children"],
     "sampling pids 10, 20, their threads and the processes they start on 2 CPUs"),
])
def test_the_start_line_says_what_is_attached_to(argv, what):
    cfg = config_from(parser().parse_args(["-d", "q", *argv]), argv, HOST)
    line = start_line(cfg, "cpu-clock", 997, False)
    assert line.startswith(what + " with cpu-clock"), line
    assert line.endswith("until it exits" if len(cfg.attach) == 1
                         else "until the last of them exits"), line


class _Paranoid(StaticHost):
    def sysctl_int(self, name: str) -> int | None:
        return 3 if name == "kernel.perf_event_paranoid" else None


def test_a_refusal_says_whose_process_it_is_or_what_the_machine_forbids():
    denied = OSError(errno.EACCES, os.strerror(errno.EACCES))
    me, other = os.geteuid(), os.geteuid() + 1
    host = _Paranoid({10: HostProcess("server", uid=other), 20: HostProcess("mine", uid=me)})
    line = attach_refusal(10, denied, host)
    assert line.startswith(f"cannot profile process 10 (server): it runs as uid {other}, not "
                           f"as you (uid {me}); only root or a holder of CAP_PERFMON or "
                           "CAP_SYS_PTRACE may"), line
    line = attach_refusal(20, denied, host)
    assert "kernel.perf_event_paranoid (now 3) to 2 or less" in line and "CAP_PERFMON" in line
    assert "to 1 or less" in attach_refusal(20, denied, host, kernel=True)  # -k
    assert all("\n" not in attach_refusal(pid, denied, host) for pid in (10, 20))
