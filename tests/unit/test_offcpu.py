"""Off-CPU accounting (daemon/sets/offcpu.py) and the `.threads` file
(qformat/threads.py): waits split into S/D/W, matched whatever CPU ends
them, counted up to a checkpoint; the file round-trips."""

from __future__ import annotations

import io

import pytest

from qtools.daemon.sets.offcpu import OffCpu, off_kind
from qtools.qformat import QFormatError, ThreadName, ThreadWeight, read_threads, thread_lines

STACK = (0xffffffff81000010, 0x401136, 0x401178)


def test_states() -> None:
    assert off_kind(0) == "W"
    assert off_kind(1) == "S"
    assert off_kind(2) == "D"
    assert off_kind(0x80) == "S"  # TASK_IDLE-like report bits count as a sleep
    assert off_kind(0x10) is None and off_kind(0x20) is None


def test_sleep_then_wait_then_run() -> None:
    off = OffCpu()
    off.switch_out(7, 1, 1_000, "set", STACK)
    off.wake(7, 5_000)      # woken from another CPU
    off.switch_in(7, 5_300)  # and run on a third one
    assert off.take() == {("set", "S", 7, STACK): 4_000, ("set", "W", 7, STACK): 300}
    assert not off.pending


def test_preempted_counts_as_wait_and_unwoken_sleep_counts_whole() -> None:
    off = OffCpu()
    off.switch_out(8, 0, 0, "a", STACK)
    off.wake(8, 10)  # a runnable thread woken again stays runnable
    off.switch_in(8, 100)
    off.switch_out(9, 2, 0, "a", STACK)
    off.switch_in(9, 50)  # its wake-up lost: all of it is D
    assert off.take() == {("a", "W", 8, STACK): 100, ("a", "D", 9, STACK): 50}


def test_checkpoint_counts_up_to_it_and_goes_on_in_the_next_set() -> None:
    off = OffCpu()
    off.switch_out(7, 1, 0, "v0", STACK)
    off.checkpoint(1_000)
    assert off.take() == {("v0", "S", 7, STACK): 1_000}
    off.retarget("v0", "v1")
    off.wake(7, 1_500)
    off.switch_in(7, 1_600)
    assert off.take() == {("v1", "S", 7, STACK): 500, ("v1", "W", 7, STACK): 100}


def test_exit_while_off_and_short_waits() -> None:
    off = OffCpu(min_stack_ns=1_000)
    off.switch_out(7, 1, 0, "s", STACK)
    off.exit(7)
    off.switch_in(7, 5_000)
    off.switch_out(8, 1, 0, "s", STACK)
    off.switch_in(8, 10)
    off.switch_out(9, 0x10, 0, "s", STACK)  # dead: nothing
    off.switch_in(9, 10)
    assert off.take() == {("s", "S", 8, ()): 10}
    assert off.switches == 3


def test_threads_file_round_trips() -> None:
    weights = {("cpu", 5, STACK): 2_000_000, ("S", 5, STACK): 800, ("W", 5, ()): 3,
               ("D", 6, (0x10,)): 0}
    data = b"".join(thread_lines({5: "my worker\\", 6: "ok"}, weights))
    assert data.splitlines()[0] == b"thread 5 my\\x20worker\\x5c"
    got = list(read_threads(io.BytesIO(data)))
    assert got[:2] == [ThreadName(5, "my worker\\"), ThreadName(6, "ok")]
    assert got[2:] == [ThreadWeight("cpu", 5, 2_000_000, STACK), ThreadWeight("S", 5, 800, STACK),
                       ThreadWeight("W", 5, 3, ())]


@pytest.mark.parametrize("line", [b"X 1 2 0x1", b"S 1 2", b"S -1 2 0x1", b"S 1 2 zz",
                                  b"thread 1", b"thread 1 a\\q"])
def test_bad_threads_lines_name_the_line(line: bytes) -> None:
    with pytest.raises(QFormatError, match=r"x\.threads#0:2: "):
        list(read_threads(io.BytesIO(b"thread 1 a\n" + line + b"\n"), name="x.threads#0"))


def test_an_end_read_before_its_start_is_matched() -> None:
    """Another CPU's wake-up and switch-in in one batch, this CPU's switch-out
    in the next (each ring is read in turn)."""
    off = OffCpu()
    off.wake(7, 5_000)
    off.switch_in(7, 5_300)
    off.switch_out(7, 1, 1_000, "set", STACK)
    assert off.take() == {("set", "S", 7, STACK): 4_000, ("set", "W", 7, STACK): 300}
    assert not off.pending
    off.switch_in(8, 100)  # an old switch-in is no end of a later switch-out
    off.switch_out(8, 1, 200, "set", STACK)
    assert 8 in off.pending and not off.take()
