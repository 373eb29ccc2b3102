"""Remembered walks (daemon/unwind/memo.py) give what a fresh walk gives.

A walk is recalled only when the stack holds, from the start's SP up to the
last word the first walk read, the same bytes; these cases change one word
inside or outside that range, shorten the copy, change the mappings and fill
the memo past its bounds, and compare each answer with an unwinder that
remembers nothing.
"""

from __future__ import annotations

import pytest

from cfi_builder import ElfSpec, Stack, build_elf, rt, x86_regs
from qtools.daemon.unwind import Unwinder
from qtools.daemon.unwind.memo import WalkMemo
from test_unwind_walk import (BASE_FDES, CIES, FPF, LEAF, MID, SP0, space_of,
                              standard_stack)


@pytest.fixture(scope="module")
def image() -> bytes:
    return build_elf(ElfSpec(BASE_FDES, cies=CIES))


def both(memo: Unwinder, space, regs, stack):
    """The remembering unwinder's answer, checked against a fresh one's."""
    got = memo.unwind(space, regs, stack)
    assert got == Unwinder(memo=False).unwind(space, regs, stack)
    return got


def twice(memo: Unwinder, space, regs, stack):
    """Walked twice: a start is remembered the second time it is met."""
    first = both(memo, space, regs, stack)
    assert both(memo, space, regs, stack) == first and memo.memo.hits == 0
    return first


def test_same_start_same_bytes_is_recalled(image):
    st, _ = standard_stack()
    u, space = Unwinder(), space_of(image)
    regs = x86_regs(rt(LEAF + 0x10), SP0, bp=0x1234)
    first = twice(u, space, regs, st.bytes())
    assert first.complete
    again = both(u, space, regs, st.bytes())
    assert again == first and u.memo.hits == 1
    assert both(u, space, regs, st.bytes()) is again  # the very result, recalled


def test_a_changed_word_that_was_read_is_walked_again(image):
    st, lay = standard_stack()
    u, space = Unwinder(), space_of(image)
    regs = x86_regs(rt(LEAF + 0x10), SP0, bp=0x1234)
    first = twice(u, space, regs, st.bytes())
    st.put(lay["cfa1"] - 8, rt(LEAF + 0x31))  # mid's return address, now into leaf
    second = both(u, space, regs, st.bytes())
    assert second.frames[:2] == first.frames[:2] and second.frames != first.frames
    assert u.memo.hits == 0


def test_a_changed_word_above_the_walk_still_recalls(image):
    st, _ = standard_stack()
    u, space = Unwinder(), space_of(image)
    regs = x86_regs(rt(LEAF + 0x10), SP0, bp=0x1234)
    first = twice(u, space, regs, st.bytes())
    st.put(SP0 + 0x200, 0xDEAD)  # above fpf's frame: no walk reads that far
    assert both(u, space, regs, st.bytes()) == first and u.memo.hits == 1


def test_a_changed_local_between_the_words_read_still_recalls(image):
    # only the words a walk read are compared: a local of mid's (below its
    # saved registers) and its saved rbx change from call to call
    st, lay = standard_stack()
    u, space = Unwinder(), space_of(image)
    regs = x86_regs(rt(LEAF + 0x10), SP0, bp=0x1234)
    first = twice(u, space, regs, st.bytes())
    st.put(lay["cfa1"] - 32, 0xBEEF)
    st.put(lay["cfa1"] - 16, 0xB1B1)
    assert both(u, space, regs, st.bytes()) == first and u.memo.hits == 1


def test_a_changed_saved_frame_pointer_is_walked_again(image):
    st, lay = standard_stack()
    u, space = Unwinder(), space_of(image)
    regs = x86_regs(rt(LEAF + 0x10), SP0, bp=0x1234)
    first = twice(u, space, regs, st.bytes())
    # mid's saved rbp is fpf's frame pointer: elsewhere, fpf's frame is garbage
    st.put(lay["cfa1"] - 24, lay["r"] + 0x40)
    got = both(u, space, regs, st.bytes())
    assert got != first and u.memo.hits == 0


def test_another_pc_in_the_same_frame_shares_the_callers(image):
    st, _ = standard_stack()
    u, space = Unwinder(), space_of(image)
    twice(u, space, x86_regs(rt(LEAF + 0x10), SP0, bp=0x1234), st.bytes())
    got = both(u, space, x86_regs(rt(LEAF + 0x14), SP0, bp=0x1234), st.bytes())
    assert got.frames[0] == rt(LEAF + 0x14) and got.complete
    assert u.memo.hits == 1  # the walk from mid's return address on


@pytest.mark.parametrize("cut", [0x38, 0x40, 0x108])
def test_a_shorter_copy_ends_where_a_fresh_walk_ends(image, cut):
    st, _ = standard_stack()
    u, space = Unwinder(), space_of(image)
    regs = x86_regs(rt(LEAF + 0x10), SP0, bp=0x1234)
    full = twice(u, space, regs, st.bytes())
    short = both(u, space, regs, st.bytes()[:cut])
    assert both(u, space, regs, st.bytes()[:cut]) == short  # now remembered as it ended
    assert short.reason == "end-of-stack" and len(short.frames) < len(full.frames)
    # and a walk that ran off a short copy is not recalled for a longer one
    assert both(u, space, regs, st.bytes()) == full


def test_new_mappings_forget_the_walks(image):
    st, _ = standard_stack()
    u, space = Unwinder(), space_of(image)
    regs = x86_regs(rt(LEAF + 0x10), SP0, bp=0x1234)
    first = twice(u, space, regs, st.bytes())
    space.remove(rt(MID), rt(MID) + 1)  # the object unmapped: a new serial, no walk recalled
    got = both(u, space, regs, st.bytes())
    assert got != first and u.memo.hits == 0


def test_bounds_forget_the_oldest_first():
    mv = memoryview(bytes(1024))
    memo = WalkMemo(max_entries=3, max_bytes=3 * 128 + 32)  # an entry of 2 words: 128
    for n in range(5):
        memo.keep((1, 1, n, SP0), mv, SP0, (0, 8), -1, None, n)  # 96 + 16 bytes of span + 2 words
    assert sorted(k[2] for k in memo.entries) == [2, 3, 4] and memo.size == 384
    memo.keep((1, 1, 9, SP0), mv, SP0, tuple(range(0, 96, 8)), -1, None, 9)  # 288: two go
    assert sorted(k[2] for k in memo.entries) == [4, 9] and memo.size == 128 + 288
    memo.keep((1, 1, 10, SP0), mv, SP0, tuple(range(0, 1024, 8)), -1, None, 10)  # larger than all
    assert (1, 1, 10, SP0) not in memo.entries and memo.size <= 416


def test_a_start_met_once_is_not_remembered(image):
    st, _ = standard_stack()
    u, space = Unwinder(), space_of(image)
    for pc in range(0x10, 0x30):  # every pc once: the walks from the callers are met again
        both(u, space, x86_regs(rt(LEAF + pc), SP0, bp=0x1234), st.bytes())
    assert not any(key[1] == 1 for key in u.memo.entries)
    assert [key[1] for key in u.memo.entries] == [2] and u.memo.hits == 0x1e


def test_a_full_memo_still_answers_right(image):
    st, _ = standard_stack()
    u, space = Unwinder(), space_of(image)
    u.memo = WalkMemo(max_entries=2, max_bytes=1 << 20)
    for pc in (LEAF + 0x10, LEAF + 0x11, FPF + 0x40, MID + 0x30, LEAF + 0x10):
        both(u, space, x86_regs(rt(pc), SP0, bp=0x1234), Stack.bytes(st))
    assert len(u.memo.entries) <= 2
