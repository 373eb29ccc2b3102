"""A sorted sequence whose inserts cost the same wherever they land.

A plain list kept sorted with ``bisect.insort`` moves every item after the
insert: items arriving in descending order cost n**2 in all, and a
jitdump's writer chooses the order. ``SortedBlocks`` keeps its items in
blocks of at most ``2 * BLOCK``, with the first key of each block in a list
of its own: a lookup is two bisects, an insert moves one block's tail (and,
when a block is split, a pointer per block). Written here rather than taken
from sortedcontainers, whose general API (``irange``, positional indexes)
costs several times a bisect for the one question asked per sampled JIT
frame: which item is the last at or below a key.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar, cast

T = TypeVar("T")

BLOCK = 256  # items per block after a split (a block holds up to twice as many)


class SortedBlocks(Generic[T]):
    """Items in the order of their integer ``key`` (items equal in key in
    the order they were added). Without ``key`` the items are their own keys."""

    def __init__(self, items: Iterable[T] = (), key: Callable[[T], int] | None = None) -> None:
        self._key = key
        self._items: list[list[T]] = []
        self._keys: list[list[int]] = []  # the same lists as _items when there is no key
        self._firsts: list[int] = []  # the first key of each block
        self._len = 0
        for item in items:
            self.add(item)

    def __len__(self) -> int:
        return self._len

    def _key_of(self, item: T) -> int:
        return cast(int, item) if self._key is None else self._key(item)

    def add(self, item: T) -> None:
        """Insert ``item`` after every item whose key is less or equal."""
        k = self._key_of(item)
        self._len += 1
        if not self._firsts:
            block = [item]
            self._items.append(block)
            self._keys.append(cast(list[int], block) if self._key is None else [k])
            self._firsts.append(k)
            return
        b = max(0, bisect_right(self._firsts, k) - 1)
        keys, items = self._keys[b], self._items[b]
        i = bisect_right(keys, k)
        items.insert(i, item)
        if keys is not items:
            keys.insert(i, k)
        if i == 0:
            self._firsts[b] = k
        if len(items) > 2 * BLOCK:
            self._split(b)

    def _split(self, b: int) -> None:
        items = self._items[b]
        tail = items[BLOCK:]
        del items[BLOCK:]
        keys = self._keys[b]
        if keys is items:
            tail_keys = cast(list[int], tail)
        else:
            tail_keys = keys[BLOCK:]
            del keys[BLOCK:]
        self._items.insert(b + 1, tail)
        self._keys.insert(b + 1, tail_keys)
        self._firsts.insert(b + 1, tail_keys[0])

    def floor(self, key: int) -> T | None:
        """The last item whose key is ``key`` or less; None if there is none."""
        b = bisect_right(self._firsts, key) - 1
        if b < 0:
            return None
        return self._items[b][bisect_right(self._keys[b], key) - 1]

    def last(self) -> T:
        """The item with the greatest key (the last added among equals)."""
        return self._items[-1][-1]

    def between(self, low: int, high: int, most: int) -> list[T]:
        """Up to ``most`` items with keys strictly between ``low`` and ``high``, in order."""
        out: list[T] = []
        b = max(0, bisect_right(self._firsts, low) - 1)
        i = bisect_right(self._keys[b], low) if b < len(self._keys) else 0
        while b < len(self._keys) and len(out) < most:
            keys = self._keys[b]
            j = bisect_left(keys, high, i)
            out += self._items[b][i:min(j, i + most - len(out))]
            if j < len(keys):
                break
            b, i = b + 1, 0
        return out

    def copy(self) -> SortedBlocks[T]:
        twin: SortedBlocks[T] = SortedBlocks(key=self._key)
        twin._items = [list(block) for block in self._items]
        twin._keys = (cast(list[list[int]], list(twin._items)) if self._key is None
                      else [list(block) for block in self._keys])
        twin._firsts = list(self._firsts)
        twin._len = self._len
        return twin
