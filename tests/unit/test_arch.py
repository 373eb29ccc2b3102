"""The machine facts in one place (daemon/kernel/arch.py, qformat/kernelspace.py): the
syscall numbers agree with the kernel headers of this machine, every machine
names its register table, an unknown machine is refused by name, and the
reader's fallback is the same one value per architecture."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from qtools.daemon.kernel import arch, ring
from qtools.daemon.unwind.regs import ARCHES
from qtools.qformat import TaskInfo
from qtools.qformat.kernelspace import DEFAULT_KERNEL_FALLBACK, KERNEL_FALLBACK, kernel_start

# Where the kernel's uapi headers keep each machine's syscall numbers.
HEADERS = {"x86_64": ["/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
                      "/usr/include/asm/unistd_64.h"],
           "aarch64": ["/usr/include/asm-generic/unistd.h"]}


def _header_number(machine: str, name: str) -> int | None:
    for path in HEADERS[machine]:
        p = Path(path)
        if p.is_file():
            m = re.search(rf"#define __NR_{name}\s+(\d+)", p.read_text())
            if m:
                return int(m.group(1))
    return None


@pytest.mark.parametrize("machine", sorted(arch.MACHINES))
def test_syscall_numbers_match_the_uapi_headers(machine):
    facts = arch.machine(machine)
    checked = 0
    for name, number in (("perf_event_open", facts.nr_perf_event_open),
                         ("membarrier", facts.nr_membarrier)):
        found = _header_number(machine, name)
        if found is not None:
            assert found == number, (machine, name)
            checked += 1
    if not checked:
        pytest.skip(f"no uapi headers of {machine} here")


def test_every_machine_names_its_register_table_and_ordering():
    assert set(arch.MACHINES) == set(ARCHES)
    for name, facts in arch.MACHINES.items():
        assert facts.regs is ARCHES[name]
    assert arch.machine("x86_64").ordered  # TSO: the ring needs no barrier
    assert not arch.machine("aarch64").ordered


def test_an_unknown_machine_is_refused_by_name():
    with pytest.raises(arch.UnsupportedMachine, match="sparc64.*x86_64, aarch64"):
        arch.machine("sparc64")


def test_the_host_is_known_here():
    assert arch.host().name == os.uname().machine


def test_the_barrier_of_a_weakly_ordered_machine_runs_on_this_kernel():
    assert ring.choose_fence(True) is None
    fence = ring.choose_fence(False)
    # membarrier(2) is in every kernel since 4.14: the fallback is for older ones
    assert fence is ring.membarrier_fence
    for _ in range(3):
        fence()
    ring.lock_fence()


def test_the_reader_uses_the_collectors_decision_first():
    assert kernel_start(TaskInfo(arch="x86_64", kernel_from=0xFF11_0000_0000_1000)) \
        == 0xFF11_0000_0000_1000
    assert kernel_start(TaskInfo(arch="aarch64", kernel_from=0xFFFF_0000_0808_0000)) \
        == 0xFFFF_0000_0808_0000


def test_the_fallback_of_older_files_keeps_every_user_address_a_user_one():
    # 5-level x86-64 user space ends below 2^56, 52-bit aarch64 below 2^52;
    # the kernel halves start at 2^64 - 2^56 and 2^64 - 2^52 at the lowest.
    x86 = kernel_start(TaskInfo(arch="x86_64"))
    a64 = kernel_start(TaskInfo(arch="aarch64"))
    assert (1 << 56) <= x86 <= 0xFFFF_8000_0000_0000
    assert (1 << 52) <= a64 <= 0xFFFF_0000_0000_0000
    assert x86 == KERNEL_FALLBACK["x86_64"] and a64 == KERNEL_FALLBACK["aarch64"]
    assert kernel_start(TaskInfo(arch=None)) == DEFAULT_KERNEL_FALLBACK
    assert kernel_start(TaskInfo(arch="riscv64")) == DEFAULT_KERNEL_FALLBACK


def test_q_syscollect_refuses_an_unknown_machine_at_start(monkeypatch, capsys):
    # The one mock: this machine cannot be another one.
    from qtools.daemon import cli, plan
    real = os.uname()
    monkeypatch.setattr(os, "uname", lambda: os.uname_result((*real[:4], "sparc64")))
    argv = ["-t", "1"]
    with pytest.raises(plan.CollectError, match=r"this machine \(sparc64\) is not supported"):
        plan.plan(cli.config_from(cli.parser().parse_args(argv), argv), print)
    assert cli.main(["-l"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("q-syscollect: this machine (sparc64) is not supported") \
        and err.count("\n") == 1
