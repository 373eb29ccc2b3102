"""The index of JIT code placements under what a jitdump's writer may
choose: addresses in any order, times in any order, loads over loads. Each
record costs about the same wherever it lands, and the memory held is the
entries counted against the cap."""

from __future__ import annotations

import bisect

from hypothesis import given, settings
from hypothesis import strategies as st

from qtools.daemon.frames import sortedblocks
from qtools.daemon.frames.jitindex import MAX_ENTRIES, PlacementIndex
from qtools.daemon.frames.sortedblocks import SortedBlocks
from qtools.qformat.jit.jitdump import JIT_STRIDE, Placement

BASE = 0x1000_0000_0000


def _placement(ordinal: int, time: int, addr: int, size: int) -> Placement:
    return Placement(ordinal, time, addr, size, f"code{ordinal}", ordinal)


# ---------------------------------------------------------------- SortedBlocks

ops = st.lists(st.tuples(st.sampled_from(["add", "floor", "between"]),
                         st.integers(0, 3000), st.integers(0, 3000), st.integers(0, 40)),
               max_size=2000)


@settings(max_examples=60)
@given(ops)
def test_sorted_blocks_answer_as_a_sorted_list_would(script):
    blocks: SortedBlocks[int] = SortedBlocks()
    model: list[int] = []
    for op, a, b, most in script:
        if op == "add":
            if a not in model:
                blocks.add(a)
                bisect.insort(model, a)
        elif op == "floor":
            i = bisect.bisect_right(model, a)
            assert blocks.floor(a) == (model[i - 1] if i else None)
        else:
            low, high = min(a, b), max(a, b)
            inside = [k for k in model if low < k < high][:most]
            assert blocks.between(low, high, most) == inside
    assert len(blocks) == len(model)
    assert blocks.copy().between(-1, 1 << 20, len(model)) == model


@settings(max_examples=60)
@given(st.lists(st.integers(0, 50), max_size=3000))
def test_sorted_blocks_by_key_keep_equal_keys_in_the_order_added(keys):
    blocks: SortedBlocks[tuple[int, int]] = SortedBlocks(key=lambda item: item[0])
    for n, k in enumerate(keys):
        blocks.add((k, n))
    assert blocks.between(-1, 51, len(keys)) == sorted((k, n) for n, k in enumerate(keys))
    for k in range(52):
        equal_or_below = [(kk, n) for n, kk in enumerate(keys) if kk <= k]
        assert blocks.floor(k) == (max(equal_or_below) if equal_or_below else None)


def test_items_added_in_descending_order_fill_blocks_of_bounded_size():
    # What makes an insert at the front cost what one at the end does: it
    # moves the items of one block, never more than twice BLOCK of them.
    blocks: SortedBlocks[int] = SortedBlocks()
    n = 100_000
    for k in range(n, 0, -1):
        blocks.add(k)
    sizes = [len(b) for b in blocks._items]
    assert max(sizes) <= 2 * sortedblocks.BLOCK and sum(sizes) == n
    assert blocks.floor(n + 5) == n and blocks.floor(1) == 1 and blocks.floor(0) is None


# ---------------------------------------------------------------- the index

def _oracle(placements: list[Placement], address: int, time: int | None) -> Placement | None:
    """What the index must answer: of the placements covering ``address``
    at ``time``, the latest (equal times: the later in the file)."""
    covering = [p for p in placements
                if p.addr <= address < p.addr + max(1, min(p.size, JIT_STRIDE))
                and (time is None or p.time <= time)]
    return max(covering, key=lambda p: (p.time, p.ordinal), default=None)


@settings(max_examples=150)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60), st.integers(0, 40)),
                min_size=1, max_size=60),
       st.lists(st.tuples(st.integers(-5, 270), st.one_of(st.none(), st.integers(0, 45))),
                min_size=1, max_size=40))
def test_any_placements_in_any_order_answer_as_a_scan_would(loads, questions):
    index = PlacementIndex()
    placements = [_placement(i, time, BASE + addr, size)
                  for i, (addr, size, time) in enumerate(loads)]
    for p in placements:
        assert index.add(p)
    assert index.held() == index.entries
    for offset, time in questions:
        assert index.at(BASE + offset, time) == _oracle(placements, BASE + offset, time)


def test_code_moves_at_descending_addresses_are_each_found():
    index = PlacementIndex()
    n = 131_072
    moves = [_placement(i, 100 + i, BASE + (n - i) * 64, 64) for i in range(n)]
    for p in moves:
        assert index.add(p)
    assert index.entries == index.held() == n
    for p in moves[::97]:
        assert index.at(p.addr + 63, p.time) is p and index.at(p.addr, p.time - 1) is None
    starts = index._starts._items
    assert max(len(b) for b in starts) <= 2 * sortedblocks.BLOCK


def test_cutting_a_long_history_counts_the_copies_against_the_cap():
    # 100,000 moves over one 16 MiB range, then one-byte moves inside it:
    # each cuts the range twice, and each cut copies its history.
    index = PlacementIndex()
    big = [_placement(i, i, BASE, 16 << 20) for i in range(100_000)]
    for p in big:
        assert index.add(p)
    added = []
    for j in range(2_000):
        before = index.held()
        small = _placement(100_000 + j, 200_000 + j, BASE + 1 + 2 * j, 1)
        added.append(index.add(small))
        if not added[-1]:
            assert index.held() == before  # refused whole: nothing was cut
    assert index.held() == index.entries <= MAX_ENTRIES
    assert added[:4] == [True] * 4 and not any(added[4:])  # 200,000 entries a move
    assert index.at(BASE + 3, 10**9).ordinal == 100_001
    assert index.at(BASE + 4, 10**9) is big[-1] and index.at(BASE + 4, 50) is big[50]


def test_a_history_written_backwards_is_searched_by_time():
    index = PlacementIndex()
    n = 20_000
    backwards = [_placement(i, 2 * (n - i), BASE, 16) for i in range(n)]
    for p in backwards:
        assert index.add(p)
    tie = _placement(n, 2 * 500, BASE, 16)  # the same time as an earlier record: later in file wins
    assert index.add(tie)
    assert index.at(BASE + 4, 1) is None
    assert index.at(BASE + 4, 2 * 777 + 1) is backwards[n - 777]
    assert index.at(BASE + 4, 2 * 500) is tie
    assert index.at(BASE + 4) is backwards[0]  # the latest in time
    assert index.held() == index.entries == n + 1
