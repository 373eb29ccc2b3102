"""Names of JIT code from the `.q` copy of a jitdump (qformat.jitdump).

The collector wrote each sample's JIT frames as synthetic addresses that
number the dump's placements (CODE_LOAD and CODE_MOVE records, in file
order); the same numbering of the copy gives each its name.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Callable

from qtools.qformat import open_regular
from qtools.qformat.jit.jitdump import (JitdumpError, JitdumpParser, Placements, split_synthetic,
                                        synthetic_address)

MAX_COPY = 128 << 20  # bytes of a copy read; the collector keeps 64 MiB by default

MAX_NAME = 4096
Warn = Callable[[str], None]


class JitNames:
    """Placement names by ordinal, and by runtime address for raw addresses."""

    def __init__(self, names: list[tuple[str, int]], addrs: list[int] | None = None) -> None:
        self._names = names  # (name, size) per ordinal
        order = sorted(range(len(names)), key=lambda i: ((addrs or [])[i], i)) if addrs else []
        self._by_addr = [(addrs[i], i) for i in order] if addrs else []
        self._starts = [a for a, _i in self._by_addr]

    def __len__(self) -> int:
        return len(self._names)

    def lookup(self, address: int) -> tuple[str, int] | None:
        """(name, start) of the placement a synthetic address lies in."""
        ordinal, offset = split_synthetic(address)
        if 0 <= ordinal < len(self._names):
            name, size = self._names[ordinal]
            if offset <= max(size, 1):  # a return address may sit just past the code
                return name, synthetic_address(ordinal, 0)
        return None


    def lookup_raw(self, address: int) -> tuple[str, int] | None:
        """(name, start) of the code last loaded over a runtime address: for a
        sample the collector could not attribute in time (its record came
        too late), so it kept the address as it was."""
        i = bisect_right(self._starts, address)
        best: tuple[int, int] | None = None  # (ordinal, start)
        for start, ordinal in self._by_addr[max(0, i - 16):i]:  # the few loads around it
            if address < start + max(self._names[ordinal][1], 1) and (
                    best is None or ordinal > best[0]):
                best = (ordinal, start)
        return (self._names[best[0]][0], best[1]) if best else None


def load_jitdump(path: str, warn: Warn, name: str | None = None) -> JitNames | None:
    """The names of a copy; a bad record ends the list (with one warning
    naming the copy as ``name``, default its path)."""
    shown = name or path
    parser = JitdumpParser()
    placements = Placements()
    try:
        with open(open_regular(path), "rb", closefd=True) as f:
            remaining = MAX_COPY
            while remaining > 0:
                chunk = f.read(min(1 << 20, remaining))
                if not chunk:
                    break
                remaining -= len(chunk)
                for _off, _size, rec, _raw in parser.feed(chunk):
                    placements.add(rec)
                if parser.error is not None:
                    raise parser.error
            if remaining <= 0:
                warn(f"{shown}: larger than {MAX_COPY >> 20} MiB; later JIT code is unknown")
    except JitdumpError as e:
        warn(f"{shown}: {e}; JIT code after it is unknown")
    except OSError as e:
        warn(f"{shown}: cannot read: {e.strerror}")
        return None
    if parser.pending and parser.error is None:
        warn(f"{shown}: ends inside a record; JIT code after it is unknown")
    return JitNames([(p.name[:MAX_NAME], p.size) for p in placements.items],
                    [p.addr for p in placements.items])
