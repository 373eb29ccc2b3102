"""The doorbell of an idle collector (PerfSource.doorbell), against the real
kernel: a task started on the CPU makes its ring readable while it is on,
and the kernel writes nothing to it while it is off."""

from __future__ import annotations

import os
import select
import subprocess

from qtools.daemon.kernel import events
from qtools.daemon.kernel.source import PerfSource, SourceSpec


def _start_on(cpu: int) -> None:
    """A short program that execs and exits on ``cpu``."""
    subprocess.run(["/bin/true"], check=True,
                   preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))


def _ringing(fd: int) -> bool:
    p = select.poll()
    p.register(fd, select.POLLIN)
    return any(events & select.POLLIN for _fd, events in p.poll(0))


def test_the_doorbell_rings_for_a_task_started_on_its_cpu_only_while_it_is_on(perf):
    cpu = sorted(os.sched_getaffinity(0))[-1]
    spec = SourceSpec(events.resolve("cpu-clock"), cpu, [cpu], callchain=False, ring_pages=16)
    source = PerfSource(spec)
    try:
        assert source.bell is not None, "a system-wide source has a doorbell"
        fd, ring = source.bell
        _start_on(cpu)
        assert ring.pending() == 0 and not _ringing(fd)  # made off

        assert source.doorbell(True)
        _start_on(cpu)
        assert ring.pending() > 0 and _ringing(fd)
        source.wait(0)  # what woke it is handed back unread: the bell can ring again
        assert ring.pending() == 0
        _start_on(cpu)
        assert ring.pending() > 0

        assert not source.doorbell(False)
        _ringing(fd)  # a poll takes the last wake-up
        ring.skip()
        _start_on(cpu)
        assert ring.pending() == 0 and not _ringing(fd)
    finally:
        source.close()


def test_a_source_of_one_process_has_no_doorbell(perf):
    """-p/-- COMMAND: its own records wake it; doorbell() says it stays off."""
    child = subprocess.Popen(["sleep", "30"])
    try:
        cpu = sorted(os.sched_getaffinity(0))[0]
        spec = SourceSpec(events.resolve("cpu-clock"), cpu, [cpu], callchain=False,
                          ring_pages=16, target_pid=child.pid)
        source = PerfSource(spec)
        try:
            assert source.bell is None and source.doorbell(True) is False
        finally:
            source.close()
    finally:
        child.kill()
        child.wait()
