"""The jitdump decoder and its inverse, the placement numbering, and the
time-aware index that attributes an address to the code loaded there."""

from __future__ import annotations

import random
import struct

import pytest

from qtools.daemon.frames.jitindex import PlacementIndex
from qtools.qformat.jit.jitdump import (JIT_BASE, JIT_STRIDE, Close, CodeLoad, CodeMove,
                                        DebugEntry, DebugInfo, Header, JitdumpError, JitdumpParser,
                                        Placements, UnwindingInfo, Unknown, decode_record, encode,
                                        encode_header, is_synthetic, parse, split_synthetic,
                                        synthetic_address)

HEADER = Header(version=1, elf_mach=62, pid=4242, timestamp=123456)
RECORDS = [
    UnwindingInfo(10, 20, 80, bytes(range(48)) + bytes(20)),
    CodeLoad(11, 4242, 4243, 0x7F0000001000, 0x7F0000001000, 11, 1, "py::f4:/tmp/x.py",
             bytes.fromhex("4883ec08ffd14883c408c3")),
    CodeMove(12, 4242, 4243, 0x7F0000002000, 0x7F0000001000, 0x7F0000002000, 11, 1),
    DebugInfo(13, 0x7F0000002000, (DebugEntry(0x7F0000002000, 7, 0, "/tmp/x.py"),
                                   DebugEntry(0x7F0000002004, -1, 3, "é.py"))),
    CodeLoad(14, 4242, 4242, 0x7F0000001000, 0x7F0000001000, 3, 2, "second", b"\x90\x90\xc3"),
    Close(15),
]


def dump(records=RECORDS, header=HEADER) -> bytes:
    return encode_header(header) + b"".join(encode(r) for r in records)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_each_record_round_trips(record):
    raw = encode(record)
    assert struct.unpack_from("<I", raw, 4)[0] == len(raw)
    assert decode_record(raw) == record


def test_unwinding_info_is_padded_to_8_and_splits_into_eh_frame_and_hdr():
    rec = RECORDS[0]
    assert len(encode(rec)) % 8 == 0
    assert rec.eh_frame == bytes(range(48)) and rec.eh_frame_hdr == bytes(20)


def test_whole_file_and_any_split_into_pieces_give_the_same_records():
    data = dump()
    header, records, pending = parse(data)
    assert header == HEADER and records == RECORDS and pending == 0
    rng = random.Random(7)
    for _ in range(20):
        p = JitdumpParser()
        got, pos = [], 0
        while pos < len(data):
            step = rng.randint(1, 40)
            got += [r for _o, _s, r, _b in p.feed(data[pos:pos + step])]
            pos += step
        assert got == RECORDS and p.header == HEADER and p.error is None
        assert p.offset == len(data)


def test_record_bytes_and_offsets_are_those_of_the_file():
    data = dump()
    for offset, size, rec, raw in JitdumpParser().feed(data):
        assert data[offset:offset + size] == raw == encode(rec)


def test_unknown_record_types_are_skipped_not_fatal():
    odd = struct.pack("<IIQ", 99, 24, 5) + b"12345678"
    data = dump(RECORDS[:2]) + odd + encode(RECORDS[4])
    _h, records, _p = parse(data)
    assert records == [RECORDS[0], RECORDS[1], Unknown(99, 5, 24), RECORDS[4]]


def test_a_cut_file_keeps_its_whole_records_and_says_what_is_pending():
    data = dump()
    cut = data[:len(data) - 5]
    _h, records, pending = parse(cut)
    assert records == RECORDS[:-1] and pending == len(encode(RECORDS[-1])) - 5


@pytest.mark.parametrize("mutate,message", [
    (lambda d: b"XXXX" + d[4:], "bad magic"),
    (lambda d: d[:4][::-1] + d[4:], "big-endian"),
    (lambda d: d[:32] + struct.pack("<Q", 1) + d[40:], "TSC timestamps"),
    (lambda d: d[:8] + struct.pack("<I", 1 << 20) + d[12:], "header size"),
])
def test_bad_headers_are_refused_with_a_reason(mutate, message):
    with pytest.raises(JitdumpError, match=message):
        parse(mutate(dump()))


def _hostile(record_bytes: bytes) -> tuple[list, JitdumpError | None, int]:
    good = encode(RECORDS[1])
    p = JitdumpParser()
    got = p.feed(encode_header(HEADER) + good + record_bytes + good)
    return [r for _o, _s, r, _b in got], p.error, 40 + len(good)


@pytest.mark.parametrize("bad,message", [
    (struct.pack("<IIQ", 0, 3, 0), "too small"),
    (struct.pack("<IIQ", 0, 1 << 30, 0), "exceeds"),
    (struct.pack("<IIQ", 0, 16 + 40 + 4, 0) + bytes(40) + b"abcd", "NUL"),
    (struct.pack("<IIQ", 0, 16 + 40 + 2, 0) + struct.pack("<IIQQQQ", 1, 1, 0, 0, 999, 1)
     + b"a\0", "code_size"),
    (struct.pack("<IIQ", 2, 32 + 8, 0) + struct.pack("<QQ", 0, 1 << 40) + bytes(8), "entries"),
    (struct.pack("<IIQ", 4, 40 + 8, 0) + struct.pack("<QQQ", 100, 4, 0) + bytes(8), "sizes"),
    (struct.pack("<IIQ", 1, 20, 0) + bytes(4), "too short"),
])
def test_hostile_records_stop_reading_at_their_offset_and_keep_what_came_before(bad, message):
    records, error, offset = _hostile(bad)
    assert records == [RECORDS[1]]
    assert error is not None and message in error.message and error.offset == offset


def test_a_failed_parser_reads_nothing_more():
    p = JitdumpParser()
    p.feed(encode_header(HEADER) + struct.pack("<IIQ", 0, 3, 0))
    assert p.error is not None
    assert p.feed(encode(RECORDS[1])) == []


def test_placements_number_loads_and_moves_and_take_the_preceding_unwinding_info():
    pl = Placements()
    for r in RECORDS:
        pl.add(r)
    first, moved, second = pl.items
    assert [p.ordinal for p in pl.items] == [0, 1, 2]
    assert first.name == "py::f4:/tmp/x.py" and first.unwind == RECORDS[0]
    assert moved.addr == 0x7F0000002000 and moved.name == first.name and moved.unwind == RECORDS[0]
    assert second.unwind is None  # the unwinding info went to the load after it


def test_synthetic_addresses_name_a_placement_and_an_offset():
    a = synthetic_address(5, 0x123)
    assert is_synthetic(a) and split_synthetic(a) == (5, 0x123)
    assert not is_synthetic(0x7FFF_FFFF_F000) and not is_synthetic(0xFFFF_8000_0000_0000)
    assert synthetic_address(0, JIT_STRIDE - 1) < synthetic_address(1, 0)
    assert JIT_BASE > 1 << 57  # above every user address of x86-64 (LA57) and aarch64


def _load(ordinal: int, time: int, addr: int, size: int, name: str):
    pl = Placements()
    pl.items = [None] * ordinal  # type: ignore[list-item]
    return pl.add(CodeLoad(time, 1, 1, addr, addr, size, ordinal, name, b""))


def test_reused_address_goes_to_the_code_loaded_there_at_sample_time():
    index = PlacementIndex()
    a = _load(0, 100, 0x1000, 0x40, "first")
    b = _load(1, 200, 0x1000, 0x40, "second")
    index.add(a)
    index.add(b)
    assert index.at(0x1010, 50) is None  # before any load
    assert index.at(0x1010, 150) is a
    assert index.at(0x1010, 200) is b
    assert index.at(0x1010, 10**12) is b
    assert index.at(0x1010) is b  # no time: the latest
    assert index.at(0x1040, 150) is None


def test_partly_overlapping_reuse_splits_the_old_range():
    index = PlacementIndex()
    a = _load(0, 100, 0x1000, 0x100, "a")
    b = _load(1, 200, 0x1080, 0x100, "b")
    index.add(a)
    index.add(b)
    assert index.at(0x1010, 300) is a  # the part of a that b did not cover
    assert index.at(0x1090, 150) is a and index.at(0x1090, 300) is b
    assert index.at(0x1170, 150) is None and index.at(0x1170, 300) is b


def test_records_written_out_of_time_order_still_attribute_by_time():
    index = PlacementIndex()
    late = _load(0, 300, 0x1000, 0x10, "late")
    early = _load(1, 100, 0x1000, 0x10, "early")
    index.add(late)
    index.add(early)
    assert index.at(0x1000, 200) is early and index.at(0x1000, 400) is late
