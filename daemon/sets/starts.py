"""Where the function that holds an address begins, as far as the collector
can tell without symbol tables: what ``--min-stack-share`` folds a rare
`.hist` address to (``SampleTally.fold_rare``, docs/q-format.md 5.2).

- A kernel address: the start of the text symbol at or below it in the
  run's kallsyms copy, which is the symbol q-view names it by.
- A user address: the start of the `.eh_frame` FDE that covers it, in the
  mapping the set noted it in (an aggregate's canonical one), by the
  unwind tables the collector already holds for that object: nothing is
  read for it. The collector's own processes are the exception: their
  samples are never unwound, so their objects' tables are loaded for it.

Anything else (an address outside every symbol or FDE, in JIT code, in
mappings that overlap, of an object whose tables are not loaded, as with
frame-pointer stacks) has no start here, and its address is kept.
"""

from __future__ import annotations

import bisect
import os
import re
from typing import TYPE_CHECKING, Callable, Iterable

from qtools.qformat import QDir
from qtools.qformat.files import read_at_most

from ..machine.tasks import Mapping, ObjectKey, Process

if TYPE_CHECKING:
    from ..unwind import ObjectCFI

StartOf = Callable[[int], "int | None"]
"""An address -> the first address of its function, or None: not known."""

# A text symbol's line in the kernel's layout (%px: lowercase, one width,
# 16 digits or 8 on a 32-bit kernel), found by the newline before it: the
# literal lets the expression skip from line to line.
_TEXT_LINES = {width: re.compile(rb"\n([0-9a-f]{%d}) [tTwW] " % width) for width in (8, 16)}


class KernelStarts:
    """The text symbols' starts of a kallsyms copy, as the copy writes
    them, sorted: with one width, text order is address order, so nothing
    is converted until a lookup finds its start."""

    def __init__(self, starts: list[bytes], width: int) -> None:
        self.starts = starts
        self.width = width

    @classmethod
    def from_text(cls, data: bytes) -> KernelStarts:
        """From a copy's text; lines not in the kernel's layout are left out,
        addresses 0 (kptr_restrict) too."""
        width = data.find(b" ")
        if width not in _TEXT_LINES:
            return cls([], 16)
        found = _TEXT_LINES[width].findall(b"\n" + data)
        found.sort()
        del found[:bisect.bisect_right(found, b"0" * width)]
        return cls(found, width)

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

    def first(self) -> int | None:
        """The lowest text symbol's start (None: the copy has none)."""
        return int(self.starts[0], 16) if self.starts else None

    def start(self, address: int) -> int | None:
        """The start of the symbol holding ``address``. The last symbol is
        taken to end at its start (nothing says where it ends), as q-view does."""
        starts, width = self.starts, self.width
        if not 0 <= address < 1 << 4 * width:
            return None
        key = b"%0*x" % (width, address)
        i = bisect.bisect_right(starts, key) - 1
        if i < 0 or (i == len(starts) - 1 and starts[i] != key):
            return None
        return int(starts[i], 16)


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


def start_finder(kernel: StartOf | None, kernel_from: int,
                 user: StartOf | None = None) -> StartOf | None:
    """One set's ``StartOf``: addresses at or above ``kernel_from`` by
    ``kernel``, the others by ``user`` (None: those addresses are kept)."""
    if kernel is None and user is None:
        return None

    def start_of(address: int) -> int | None:
        if address >= kernel_from:
            return kernel(address) if kernel is not None else None
        return user(address) if user is not None else None
    return start_of


class _Spans:
    """A set's mappings by address: the one holding an address, or None where
    none does or two do (a process that mapped another object over one it
    had sampled: which object it was is not known)."""

    def __init__(self, mappings: Iterable[Mapping]) -> None:
        self.spans = sorted(mappings, key=lambda m: (m.start, m.end))
        self.firsts = [m.start for m in self.spans]
        self.shared: set[int] = set()
        reach, reach_i = -1, -1
        for i, m in enumerate(self.spans):
            if m.start < reach:
                self.shared.update((i, reach_i))
            if m.end > reach:
                reach, reach_i = m.end, i

    def at(self, address: int) -> Mapping | None:
        i = bisect.bisect_right(self.firsts, address) - 1
        if i < 0 or i in self.shared or address >= self.spans[i].end:
            return None
        return self.spans[i]


def user_starts(mappings: Iterable[Mapping],
                cfi_of: Callable[[Mapping], ObjectCFI | None]) -> StartOf:
    """The FDE starts of user addresses in ``mappings``, by ``cfi_of``; an
    address that two of them hold has no start (``_Spans``)."""
    spans = _Spans(mappings)

    def start(address: int) -> int | None:
        m = spans.at(address)
        cfi = cfi_of(m) if m is not None else None
        return fde_start(cfi, m, address) if cfi is not None and m is not None else None
    return start


def object_lines(kernel_line: Callable[[], int | None], kernel_from: int,
                 mappings: Iterable[Mapping]) -> StartOf:
    """Where the rare functions of an address's object go in a set kept by
    function (``SampleTally.fold_rare``, docs/q-format.md 5.2): a kernel
    address to ``kernel_line()``, a user one to the first address of the
    mapping that holds it (none: where ``_Spans`` knows no one mapping)."""
    spans = _Spans(mappings)

    def line(address: int) -> int | None:
        if address >= kernel_from:
            return kernel_line()
        m = spans.at(address)
        return m.start if m is not None else None
    return line


class FunctionStarts:
    """A collector's ``StartOf`` per set: the kernel's starts from the run's
    kallsyms copy (read again when the run makes a new copy), user ones by
    the FDEs of the unwind tables that ``loaded`` holds, or for the
    collector's own processes that ``load`` makes (None: the run has no
    CFI tables, as with frame-pointer stacks)."""

    def __init__(self, qdir: QDir, limit: int,
                 loaded: Callable[[ObjectKey], ObjectCFI | None] | None,
                 load: Callable[[Process, Mapping], ObjectCFI | None] | None = None) -> None:
        self.qdir = qdir
        self.limit = limit
        self.loaded = loaded
        self.load = load
        self._kernel: tuple[str, KernelStarts | None] | None = None

    def kernel(self, kallsyms: str | None) -> StartOf | None:
        """Kernel addresses' starts by the copy ``kallsyms``, read at the
        first lookup: a run may never fold one."""
        if kallsyms is None:
            return None

        def start(address: int) -> int | None:
            starts = self._kernel_starts(kallsyms)
            return starts.start(address) if starts is not None else None
        return start

    def _kernel_starts(self, kallsyms: str) -> KernelStarts | None:
        if self._kernel is None or self._kernel[0] != kallsyms:
            self._kernel = (kallsyms, KernelStarts.from_copy(self.qdir, kallsyms, self.limit))
        return self._kernel[1]

    def for_set(self, kallsyms: str | None, mappings: Iterable[Mapping],
                kernel_from: int, process: Process | None = None) -> StartOf | None:
        """The ``StartOf`` of a set of ``process`` (None: an aggregate or the
        kernel's set) whose user addresses lie in ``mappings`` and whose
        kernel addresses start at ``kernel_from``."""
        loaded, load = self.loaded, self.load
        user: StartOf | None = None
        if process is not None and process.own and load is not None:
            own = process
            user = user_starts(mappings, lambda m: load(own, m))
        elif loaded is not None:
            user = user_starts(mappings, lambda m: loaded(m.obj))
        return start_finder(self.kernel(kallsyms), kernel_from, user)

    def object_lines(self, kallsyms: str | None, mappings: Iterable[Mapping],
                     kernel_from: int) -> StartOf:
        """Where a set kept by function (the collector's own) puts its rare
        functions, one line per object (``object_lines``); the kernel's at
        the first text symbol of the copy ``kallsyms``, which no sample
        meets after boot."""
        def kernel_line() -> int | None:
            starts = self._kernel_starts(kallsyms) if kallsyms is not None else None
            return starts.first() if starts is not None else None
        return object_lines(kernel_line, kernel_from, mappings)
