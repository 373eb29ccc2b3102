"""The machine facts of daemon/kernel/arch.py checked against the running kernel:
the perf_event_open number (through the collector's own syscall path), the
register layout (a real sample's SP and IP), and the kernel/user split of a
real system-wide collection (q:kernel-from)."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from pathlib import Path

import pytest

from qtools.daemon.kernel import arch, events, syscalls
from qtools.daemon.decode.records import RecordError, Sample
from qtools.daemon.kernel.source import PerfSource, SourceSpec
from qtools.daemon.unwind.regs import sample_positions
from qtools.qformat import read_hist, read_info, read_stacks
from qtools.viewer.naming.addrspace import AddressSpace
from qtools.viewer.naming.symbols import KERNEL_OBJECT, KERNEL_UNKNOWN, Symbols
from qtools.viewer.naming.symcache import SymbolCache
from tests.conftest import OWN_SETS, q_syscollect


def test_the_perf_event_open_number_is_perf_event_open(perf):
    # A NULL attr: perf_event_open must refuse it (EFAULT copying it in);
    # a wrong number would be another syscall, or ENOSYS.
    with pytest.raises(syscalls.PerfError) as e:
        syscalls.perf_event_open_raw(None, 0, -1, -1, 0)
    assert e.value.errno in (errno.EFAULT, errno.EINVAL), e.value


def test_the_membarrier_number_is_membarrier():
    # Registering is always allowed (since 4.14); a wrong number fails or
    # does something else, and the barrier after it would say EPERM.
    syscalls.membarrier(syscalls.MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED)
    syscalls.membarrier(syscalls.MEMBARRIER_CMD_PRIVATE_EXPEDITED)


def _maps(pid: int) -> list[tuple[int, int, str, str]]:
    out = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        out.append((lo, hi, fields[1], fields[5] if len(fields) > 5 else ""))
    return out


def _regs_of(source: PerfSource, pid: int) -> list[tuple[tuple[int, ...], int, bool]]:
    """User registers of ``pid``'s samples now in the ring (copied out: the
    ring's views must be gone before it is released and closed)."""
    out = []
    for data in source.read():
        try:
            rec = source.layout.decode(data)
        except RecordError:
            continue
        if isinstance(rec, Sample) and rec.pid == pid and rec.regs_abi:
            out.append((tuple(rec.regs), rec.ip, rec.in_kernel))
    source.release()
    return out


def test_the_register_layout_is_the_kernels(perf):
    machine = arch.host()
    regs = machine.regs
    busy = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    sources = []
    try:
        event = events.resolve("cpu-clock")
        cpus = sorted(os.sched_getaffinity(0))
        for cpu in cpus:
            spec = SourceSpec(event, cpu, [cpu], callchain=False, regs_user_mask=regs.sample_mask,
                              ring_pages=16)
            source = PerfSource(spec)
            source.enable()
            sources.append(source)
        samples: list[tuple[tuple[int, ...], int, bool]] = []  # (regs, ip, in kernel)
        deadline = time.monotonic() + 20
        while len(samples) < 30 and time.monotonic() < deadline:
            time.sleep(0.2)
            for source in sources:
                samples += _regs_of(source, busy.pid)
        maps = _maps(busy.pid)
    finally:
        busy.kill()
        busy.wait()
        for source in sources:
            source.close()
    assert len(samples) >= 30, len(samples)
    stack = [(lo, hi) for lo, hi, _p, name in maps if name == "[stack]"]
    code = [(lo, hi) for lo, hi, perms, _n in maps if "x" in perms[:3]]
    at = sample_positions(regs, regs.sample_mask)
    for values, sample_ip, in_kernel in samples:
        assert len(values) == regs.sample_mask.bit_count()
        sp, ip = values[at[regs.sp]], values[at[regs.ip]]
        assert any(lo <= sp < hi for lo, hi in stack), hex(sp)
        assert any(lo <= ip < hi for lo, hi in code), hex(ip)
        if not in_kernel:
            assert ip == sample_ip


def test_a_real_collection_splits_kernel_and_user_by_cpumode(perf, tmp_path):
    # dd spends its time in read and write: kernel-mode samples in its set,
    # user-mode ones too; the idle task's in the kernel sets.
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), *OWN_SETS, "--", "sh", "-c",
                     "timeout 2 dd if=/dev/zero of=/dev/null bs=4k 2>/dev/null; exit 0")
    assert r.returncode == 0, r.stderr
    infos = {n: read_info(q / n) for n in os.listdir(q) if ".info#" in n}
    symbols = Symbols(SymbolCache(None), [], lambda _m: None)
    dd_kernel = 0
    for name, info in infos.items():
        if not info.task.samples:
            continue
        low = info.task.kernel_from
        hist = dict(read_hist(q / info.histogram.file))
        addresses = set(hist)
        if info.call_stacks:
            addresses |= {a for s in read_stacks(q / info.call_stacks.file) for a in s.frames}
        if name.startswith("kernel-"):
            assert low is not None and min(hist) >= low, name
        if low is None:
            continue
        space = AddressSpace(symbols, str(q), info)
        maps = [m for o in info.objects for m in o.maps]
        for a in addresses:
            loc = space.lookup(a)
            if a >= low:  # the kernel's: named through the set's kallsyms copy
                assert (loc.object, loc.kernel) != (KERNEL_OBJECT, False), (name, hex(a))
                assert loc.kernel and loc.name != KERNEL_UNKNOWN \
                    and not loc.name.startswith("0x"), (name, hex(a), loc)
            elif a in hist and info.task.comm == "dd":
                # user space: sampled pcs lie in the set's recorded mappings
                # (stacks may hold garbage from a frame-pointer walk of code without)
                assert any(m.contains(a) for m in maps), (name, hex(a))
        if info.task.comm == "dd":
            dd_kernel += sum(c for a, c in hist.items() if a >= low)
    assert dd_kernel > 0  # dd's own sets did hold kernel-mode samples
