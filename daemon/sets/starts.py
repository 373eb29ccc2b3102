"""Where the function that holds an address begins, as far as the collector
can tell without symbol tables: what ``--min-stack-share`` folds a rare
`.hist` address to (``SampleTally.fold_rare``, docs/q-format.md 5.2).

- A kernel address: the start of the text symbol at or below it in the
  run's kallsyms copy, which is the symbol q-view names it by.
- A user pc of the collector's own processes: the start of the `.eh_frame`
  FDE that covers it. Nobody annotates the collector's interpreter by the
  instruction, and those pcs were the largest `.hist` of a long run.

Anything else (another program's user address, one outside every symbol,
a copy that cannot be read) has no start here, and its address is kept.
"""

from __future__ import annotations

import bisect
import os
import re
from array import array
from typing import TYPE_CHECKING, Callable

from qtools.qformat import QDir
from qtools.qformat.files import read_at_most

from ..machine.tasks import Mapping, Process

if TYPE_CHECKING:
    from ..unwind import ObjectCFI

StartOf = Callable[[int], "int | None"]
"""An address -> the first address of its function, or None: not known."""

_TEXT_LINE = re.compile(rb"^([0-9a-fA-F]{1,16}) [tTwW] ", re.M)


class KernelStarts:
    """The text symbols' starts of a kallsyms copy, sorted."""

    def __init__(self, starts: array) -> None:
        self.starts = starts

    @classmethod
    def from_text(cls, data: bytes) -> KernelStarts:
        """From a copy's text; lines not in the kernel's layout are left out,
        addresses 0 (kptr_restrict) too."""
        found = {int(m, 16) for m in _TEXT_LINE.findall(data)}
        found.discard(0)
        return cls(array("Q", sorted(found)))

    @classmethod
    def from_copy(cls, qdir: QDir, name: str, limit: int) -> KernelStarts | None:
        """From the copy ``name`` in ``qdir``, or None where it cannot be read
        (or is larger than ``limit``)."""
        try:
            with os.fdopen(qdir.open_read(name), "rb") as f:
                data = read_at_most(f, limit + 1)
        except (OSError, ValueError):
            return None
        return cls.from_text(data) if len(data) <= limit else None

    def start(self, address: int) -> int | None:
        """The start of the symbol holding ``address``. The last symbol is
        taken to end at its start (nothing says where it ends), as q-view does."""
        starts = self.starts
        i = bisect.bisect_right(starts, address) - 1
        if i < 0 or (i == len(starts) - 1 and address != starts[i]):
            return None
        return starts[i]


def fde_start(cfi: ObjectCFI, m: Mapping, address: int) -> int | None:
    """The start of the FDE covering ``address``, mapped by ``m`` from ``cfi``'s
    object, in the same mapping; None if no FDE covers it."""
    vaddr = cfi.vaddr_of_offset(address - m.start + m.pgoff)
    if vaddr is None:
        return None
    fde = cfi.fde_at(vaddr)
    if fde is None:
        return None
    start = address - (vaddr - fde.pc_begin)
    return start if m.start <= start <= address else None


def start_finder(kernel: KernelStarts | None, kernel_from: int,
                 user: Callable[[int], int | None] | None = None) -> StartOf | None:
    """One set's ``StartOf``: addresses at or above ``kernel_from`` by
    ``kernel``, the others by ``user`` (None: user addresses are kept)."""
    if kernel is None and user is None:
        return None

    def start_of(address: int) -> int | None:
        if address >= kernel_from:
            return kernel.start(address) if kernel is not None else None
        return user(address) if user is not None else None
    return start_of


class FunctionStarts:
    """A collector's ``StartOf`` per set: the kernel's starts from the run's
    kallsyms copy (read again when the run makes a new copy), the FDEs of
    the collector's own processes' objects through ``cfi_for`` (None: the
    run has no CFI tables, as with frame-pointer stacks)."""

    def __init__(self, qdir: QDir, limit: int,
                 cfi_for: Callable[[Process, Mapping], ObjectCFI | None] | None) -> None:
        self.qdir = qdir
        self.limit = limit
        self.cfi_for = cfi_for
        self._kernel: tuple[str, KernelStarts | None] | None = None

    def kernel(self, kallsyms: str | None) -> KernelStarts | None:
        if kallsyms is None:
            return None
        if self._kernel is None or self._kernel[0] != kallsyms:
            self._kernel = (kallsyms, KernelStarts.from_copy(self.qdir, kallsyms, self.limit))
        return self._kernel[1]

    def for_set(self, kallsyms: str | None, process: Process | None,
                kernel_from: int) -> StartOf | None:
        """The ``StartOf`` of a set of ``process`` (None: an aggregate or the
        kernel's set) whose kernel addresses start at ``kernel_from``."""
        cfi_for = self.cfi_for
        if cfi_for is None or process is None or not process.own:
            return start_finder(self.kernel(kallsyms), kernel_from, None)

        def user(address: int, proc: Process = process) -> int | None:
            m = proc.maps.find(address)
            if m is None or m.obj.special:
                return None
            cfi = cfi_for(proc, m)
            return fde_start(cfi, m, address) if cfi is not None else None
        return start_finder(self.kernel(kallsyms), kernel_from, user)
