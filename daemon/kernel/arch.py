"""The machine facts the collector depends on, one entry per architecture.

Each ``Machine`` says, for one ``uname -m``:

- the numbers of the syscalls called through libc's ``syscall()``
  (daemon/kernel/syscalls.py), perf_event_open and membarrier: x86_64 298 and 324
  (the kernel's arch/x86/entry/syscalls/syscall_64.tbl), aarch64 241 and
  283 (the generic table, include/uapi/asm-generic/unistd.h);
- its user register layout, the ``ArchRegs`` table of daemon/unwind/regs.py
  (perf register numbering, DWARF numbering, the sample_regs_user mask);
- the memory ordering the perf ring's reader relies on (daemon/kernel/ring.py).
  The kernel publishes records by writing them and then ``data_head`` (with
  a write barrier between); the reader must load ``data_head`` before it
  loads the records, and finish loading them before it stores
  ``data_tail``, which hands their space back to the kernel
  (include/uapi/linux/perf_event.h asks for an ``smp_rmb()`` after reading
  data_head and an ``smp_mb()`` before writing data_tail).
  x86_64 is TSO: loads are not reordered with older loads, and stores are
  not reordered with older loads, so program order is enough and nothing is
  added (``ordered=True``). aarch64 is weakly ordered: loads may pass older
  loads, so the ring reader issues a full barrier after reading data_head
  and before writing data_tail (``ordered=False``; how, in ring.py).

A machine not listed here cannot collect: ``host()`` raises
``UnsupportedMachine`` naming it, and q-syscollect says so at start instead
of calling a syscall number that means something else there.

What a reader of `.q` files needs to know about a machine (where kernel
addresses begin for files that do not say) is in ``qtools.qformat.kernelspace``.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from ..unwind.regs import AARCH64, X86_64, ArchRegs


class UnsupportedMachine(ValueError):
    """The collector does not know this machine's syscalls or registers."""


class Machine(NamedTuple):
    """What the collector must know about one architecture."""

    name: str  # uname -m
    nr_perf_event_open: int
    nr_membarrier: int
    regs: ArchRegs
    #: loads are not reordered with older loads nor stores with older loads
    #: (TSO): the ring protocol needs no barrier instruction
    ordered: bool


MACHINES: dict[str, Machine] = {m.name: m for m in (
    Machine("x86_64", nr_perf_event_open=298, nr_membarrier=324, regs=X86_64, ordered=True),
    Machine("aarch64", nr_perf_event_open=241, nr_membarrier=283, regs=AARCH64,
            ordered=False),
)}


def machine(name: str) -> Machine:
    """The facts of the machine ``name`` (uname -m)."""
    found = MACHINES.get(name)
    if found is None:
        raise UnsupportedMachine(
            f"this machine ({name or 'unknown'}) is not supported: q-syscollect knows the "
            f"syscalls and registers of {', '.join(MACHINES)} only")
    return found


def host() -> Machine:
    """The facts of the machine this process runs on."""
    return machine(os.uname().machine)
