"""The ring reader's protocol, on a memfd that plays the kernel's part."""

from __future__ import annotations

import mmap
import os
import struct

from qtools.daemon.kernel import abi, arch

from qtools.daemon.decode import synth
from qtools.daemon.decode.layout import SampleLayout
from qtools.daemon.decode.records import Lost, Sample, SampleId
from qtools.daemon.kernel.ring import RingReader

PAGES = 2
LAYOUT = SampleLayout(abi.SAMPLE_IP | abi.SAMPLE_TID | abi.SAMPLE_TIME | abi.SAMPLE_CALLCHAIN)


class FakeKernel:
    """Writes records into a perf-shaped buffer the way the kernel does."""

    def __init__(self) -> None:
        self.fd = os.memfd_create("ring")
        os.ftruncate(self.fd, (1 + PAGES) * abi.PAGE_SIZE)
        self.mm = mmap.mmap(self.fd, (1 + PAGES) * abi.PAGE_SIZE)
        struct.pack_into("<QQ", self.mm, 1040, abi.PAGE_SIZE, PAGES * abi.PAGE_SIZE)
        self.head = 0

    def tail(self) -> int:
        return struct.unpack_from("<Q", self.mm, 1032)[0]

    def write(self, record: bytes) -> None:
        size = PAGES * abi.PAGE_SIZE
        assert self.head + len(record) - self.tail() <= size, "ring full"
        for i, byte in enumerate(record):
            self.mm[abi.PAGE_SIZE + (self.head + i) % size] = byte
        self.head += len(record)
        struct.pack_into("<Q", self.mm, 1024, self.head)


def _sample(i: int) -> bytes:
    return synth.encode_sample(LAYOUT, Sample(ip=0x1000 + i, pid=i, tid=i, time=i,
                                              callchain=tuple(range(i % 40))))


def test_records_that_wrap_are_stitched():
    kernel = FakeKernel()
    ring = RingReader(kernel.fd, PAGES)
    expected = [_sample(i) for i in range(400)]
    got: list[bytes] = []
    wrapped = 0
    pending = list(expected)
    while pending or ring.pending():
        while pending and kernel.head + len(pending[0]) - kernel.tail() <= PAGES * 4096 // 2:
            start = kernel.head % (PAGES * 4096)
            wrapped += start + len(pending[0]) > PAGES * 4096
            kernel.write(pending.pop(0))
        batch = ring.read()
        got += [bytes(r) for r in batch]
        del batch
        ring.release()
    assert got == expected
    assert wrapped > 3  # the test did exercise the wrap
    assert kernel.tail() == kernel.head
    for rec, i in zip(got, range(400)):
        assert LAYOUT.decode(rec).ip == 0x1000 + i
    ring.close()


def test_nothing_is_released_before_release():
    kernel = FakeKernel()
    ring = RingReader(kernel.fd, PAGES)
    kernel.write(_sample(1))
    assert len(ring.read()) == 1
    assert kernel.tail() == 0  # the kernel may not overwrite what is being read
    assert ring.read() == []
    ring.release()
    assert kernel.tail() == kernel.head
    ring.close()


def test_lost_record_passes_through():
    kernel = FakeKernel()
    ring = RingReader(kernel.fd, PAGES)
    kernel.write(synth.encode_lost(LAYOUT, Lost(4917, 3, SampleId())))
    (rec,) = ring.read()
    assert LAYOUT.decode(rec) == Lost(4917, 3, SampleId())
    del rec
    ring.close()


def test_corrupt_header_skips_to_head_instead_of_looping():
    kernel = FakeKernel()
    ring = RingReader(kernel.fd, PAGES)
    kernel.write(b"\x09\x00\x00\x00\x00\x00\x03\x00" + b"\0" * 8)  # size 3: impossible
    assert ring.read() == []
    assert ring.corrupt == 1 and ring.pending() == 0
    ring.close()


def test_a_fenced_reader_orders_head_records_and_tail():
    # What a weakly ordered machine gets: a barrier after data_head is read
    # and before data_tail is written, once per call, not per record.
    kernel = FakeKernel()
    ring = RingReader(kernel.fd, PAGES)
    seen: list[tuple[int, int]] = []  # (kernel's tail, records read so far) at each fence
    got: list[bytes] = []
    ring.fence = lambda: seen.append((kernel.tail(), len(got)))
    for i in range(3):
        kernel.write(_sample(i))
    got += [bytes(r) for r in ring.read()]
    assert seen == [(0, 0)]  # before any record was read
    ring.release()
    assert seen[1] == (0, 3)  # after every record, before the tail moved
    assert kernel.tail() == kernel.head
    assert got == [_sample(i) for i in range(3)]
    ring.close()


def test_no_barrier_on_a_machine_that_keeps_load_order():
    kernel = FakeKernel()
    ring = RingReader(kernel.fd, PAGES)
    assert (ring.fence is None) == arch.host().ordered
    ring.close()
