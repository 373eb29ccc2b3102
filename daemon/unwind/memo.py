"""Walks remembered: a sample whose stack holds what an earlier one's did
where that one's walk looked is not unwound again.

A walk of the fast walker depends on nothing but its start (the lookup
address, SP and FP), the compiled rules of the space (fixed while its
``serial`` is), and the stack words it reads, all at or above SP: the same
start and the same values in those words take it down the same path, word
for word, to the same end (and if it ran off the copy, a copy that ends no
later ends it the same way). So a walk is remembered with the offsets of
the words it read and their values, and recalled when one unpack of those
words (a struct of them, padding between: C speed) gives the same values.
Locals and saved registers between them may change freely: a loop's
callers, sampled thousands of times, are walked once.

Entries are made for two starts of a walk: the sample's own (pc, SP, FP),
and the state after its first step (the caller's return address, SP, FP),
which every sample of the same function invocation shares whatever its pc.
"""

from __future__ import annotations

import struct
from typing import Any

MEMO_ENTRIES = 4096
"""Walks remembered per unwinder (per collector: one CPU), oldest forgotten first."""

MEMO_BYTES = 4 << 20
"""Memory the remembered walks' words may take, about (8 bytes a word, 64 an entry)."""

Key = tuple[int, int, int, int]
"""(space serial, depth 1 or 2, lookup address, SP) of a walk's start."""

# An entry: (the bytes from the start's SP to the end of the last word read,
# those words as one struct, their values, their offsets from the start's
# SP, the address of a read that ran off the copy or -1, the frame pointer
# the walk used before it read one, or None, what the walk gave from there).
Entry = tuple[bytes, struct.Struct, tuple[int, ...], tuple[int, ...], int, "int | None", Any]

_ENTRY_BYTES = 96
_NO_WORDS = struct.Struct("")


class WalkMemo:
    """Remembered walks, bounded by MEMO_ENTRIES and MEMO_BYTES."""

    __slots__ = ("entries", "size", "max_entries", "max_bytes", "hits", "_layouts", "_met")

    def __init__(self, max_entries: int = MEMO_ENTRIES, max_bytes: int = MEMO_BYTES) -> None:
        self.entries: dict[Key, Entry] = {}
        self.size = 0  # bytes the entries take, about
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.hits = 0  # walks recalled
        self._layouts: dict[tuple[int, ...], struct.Struct] = {}
        self._met: dict[Key, None] = {}  # starts walked once, not remembered (yet)

    def recall(self, key: Key, mv: memoryview | bytes | bytearray, base: int, nbytes: int,
               fp: int) -> Any:
        """What the walk from ``key`` gave, if this stack (``mv``: ``nbytes``
        bytes from address ``base``) holds the values that walk read (and FP
        is the one it used); else None.

        The span of bytes is compared first (a memcmp: a loop's callers
        rarely change); when it differs, the words read alone."""
        entry = self.entries.get(key)
        if entry is None:
            return None
        span, layout, words, offsets, fail_at, fp_used, value = entry
        if fp_used is not None and fp != fp_used:
            return None
        off = key[3] - base
        end = off + len(span)
        if end > nbytes or (fail_at >= 0 and base + nbytes > fail_at):
            return None
        if span:
            now = bytes(mv[off:end])
            if now != span:
                if layout.unpack_from(mv, off) != words:
                    return None
                # the same words among other bytes: those bytes are compared next
                self.entries[key] = (now, layout, words, offsets, fail_at, fp_used, value)
        self.hits += 1
        return value

    def again(self, key: Key) -> bool:
        """Whether a walk from ``key`` is worth remembering: True the second
        time it is walked (and after). Most starts of a program that never
        runs the same code at the same depth twice (an interpreter's) come
        once: remembering them would cost more than it saves."""
        met = self._met
        if key in met or key in self.entries:
            met.pop(key, None)
            return True
        if len(met) >= 2 * self.max_entries:
            del met[next(iter(met))]
        met[key] = None
        return False

    def offsets(self, key: Key) -> tuple[int, ...]:
        return self.entries[key][3]

    def fail_at(self, key: Key) -> int:
        return self.entries[key][4]

    def uses_fp(self, key: Key) -> bool:
        return self.entries[key][5] is not None

    def keep(self, key: Key, mv: memoryview, base: int, offsets: tuple[int, ...],
             fail_at: int, fp_used: int | None, value: Any) -> None:
        """Remember the walk from ``key``, which read the words at ``offsets``
        (ascending, in bytes from the start's SP) of this stack, and used
        ``fp_used`` as the frame pointer before it read one (None: it did not)."""
        layout = self._layout(offsets)
        off = key[3] - base
        span = mv[off:off + layout.size].tobytes()
        words = layout.unpack_from(mv, off) if offsets else ()
        cost = _ENTRY_BYTES + len(span) + 8 * len(offsets)
        entries = self.entries
        old = entries.pop(key, None)
        if old is not None:
            self.size -= _cost(old)
        if cost > self.max_bytes:
            return
        while entries and (len(entries) >= self.max_entries or self.size + cost > self.max_bytes):
            self.size -= _cost(entries.pop(next(iter(entries))))
        entries[key] = (span, layout, words, offsets, fail_at, fp_used, value)
        self.size += cost

    def _layout(self, offsets: tuple[int, ...]) -> struct.Struct:
        layout = self._layouts.get(offsets)
        if layout is None:
            if not offsets:
                return _NO_WORDS
            fmt, at = ["="], 0
            for off in offsets:
                if off > at:
                    fmt.append(f"{off - at}x")
                fmt.append("Q")
                at = off + 8
            if len(self._layouts) >= self.max_entries:
                self._layouts.clear()  # stacks of another shape: made again when met
            layout = self._layouts[offsets] = struct.Struct("".join(fmt))
        return layout


def _cost(entry: Entry) -> int:
    return _ENTRY_BYTES + len(entry[0]) + 8 * len(entry[3])
