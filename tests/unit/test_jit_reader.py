"""The collector's jitdump reader on real files: incremental reads, the size
limit, bad records, and which files it agrees to open."""

from __future__ import annotations

import os

from qtools.daemon.machine.host import StaticHost
from qtools.daemon.frames.jitread import CHUNK, DumpReader, open_dump
from qtools.daemon.frames.jitindex import PlacementIndex
from qtools.daemon.machine.tasks import Mapping, ObjectKey, Process
from qtools.qformat.jit.jitdump import CodeLoad, Header, encode, encode_header, parse

HEADER = Header(version=1, elf_mach=62, pid=1, timestamp=0)


def load(i: int, addr: int = 0x1000, size: int = 16) -> bytes:
    return encode(CodeLoad(100 + i, 1, 1, addr + 0x100 * i, addr + 0x100 * i, size, i,
                           f"code{i}", bytes(size)))


def reader(path, limit: int = 1 << 20) -> DumpReader:
    return DumpReader(str(path), os.open(path, os.O_RDONLY), limit)


def test_reads_what_the_file_gains_and_keeps_whole_records(tmp_path):
    path = tmp_path / "jit-1.dump"
    first, second = load(0), load(1)
    path.write_bytes(encode_header(HEADER) + first + second[:10])
    r = reader(path)
    assert r.read_more() == 1
    with open(path, "ab") as f:
        f.write(second[10:])
    assert r.read_more() == 1 and r.read_more() == 0
    assert bytes(r.kept) == encode_header(HEADER) + first + second
    assert r.index.at(0x1100, 101).name == "code1" and r.problem is None
    r.close()


def test_stops_at_the_limit_with_a_reason_and_a_valid_copy(tmp_path):
    path = tmp_path / "jit-1.dump"
    path.write_bytes(encode_header(HEADER) + b"".join(load(i) for i in range(10)))
    r = reader(path, limit=40 + 3 * len(load(0)) + 5)
    r.read_more()
    assert len(r.placements.items) == 3 and "limit" in (r.problem or "")
    _h, records, pending = parse(bytes(r.kept))
    assert len(records) == 3 and pending == 0
    r.close()


def test_a_bad_record_keeps_the_loads_before_it(tmp_path):
    path = tmp_path / "jit-1.dump"
    path.write_bytes(encode_header(HEADER) + load(0) + b"\0\0\0\0\3\0\0\0" + bytes(8) + load(1))
    r = reader(path)
    r.read_more()
    assert [p.name for p in r.placements.items] == ["code0"]
    assert "record size 3 is too small; keeping the 1 code load " in (r.problem or "")
    r.close()


def test_overlapping_loads_beyond_the_index_bound_stop_reading(tmp_path):
    index = PlacementIndex(max_entries=8)
    from qtools.qformat.jit.jitdump import Placements
    pl = Placements()
    added = [index.add(pl.add(CodeLoad(i, 1, 1, 0x1000, 0x1000, 16, i, "x", b"")))
             for i in range(10)]
    assert added[0] and not all(added)


def _mapping(path) -> Mapping:
    st = os.stat(path)
    return Mapping(0x1000, 0x2000, 0, ObjectKey(str(path), (os.major(st.st_dev),
                                                            os.minor(st.st_dev)), st.st_ino))


def _gone() -> Process:
    # a pid that cannot exist: only the plain path is tried
    return Process(pid=1 << 30, comm="x", ended=True)


def test_only_a_regular_file_of_the_tasks_owner_with_the_mapped_inode(tmp_path):
    path = tmp_path / "jit-1.dump"
    path.write_bytes(encode_header(HEADER))
    m = _mapping(path)
    fd, why = open_dump(_gone(), m, os.getuid(), StaticHost(files=None))
    assert fd is not None and why is None
    os.close(fd)
    fd, why = open_dump(_gone(), m, os.getuid() + 1, StaticHost(files=None))
    assert fd is None and "not by the task's uid" in why
    # another file put in its place (the old one kept, so the inode differs)
    real = tmp_path / "real.dump"
    path.rename(real)
    path.write_bytes(encode_header(HEADER))
    assert open_dump(_gone(), m, os.getuid(), StaticHost(files=None))[0] is None
    # a symlink to the mapped file is not followed
    path.unlink()
    os.symlink(real, path)
    assert open_dump(_gone(), m, os.getuid(), StaticHost(files=None))[0] is None


def test_a_fifo_is_not_opened(tmp_path):
    path = tmp_path / "jit-1.dump"
    os.mkfifo(path)
    m = Mapping(0x1000, 0x2000, 0, ObjectKey(str(path)))
    assert open_dump(_gone(), m, os.getuid(), StaticHost(files=None))[0] is None


def test_a_dump_with_tsc_timestamps_is_refused_in_one_line(tmp_path):
    path = tmp_path / "jit-1.dump"
    path.write_bytes(encode_header(Header(1, 62, 1, 0, flags=1)) + load(0))
    r = reader(path)
    assert r.read_more() == 0 and not r.kept
    assert r.problem == ("TSC timestamps (JITDUMP_FLAGS_ARCH_TIMESTAMP) are not supported; "
                         "only CLOCK_MONOTONIC dumps; not read")
    r.close()


class Stepping:
    """A clock that is ``step`` seconds later each time it is read: the
    work between two looks at it takes time."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _many_loads(path, n: int) -> bytes:
    data = encode_header(HEADER) + b"".join(load(i, size=64) for i in range(n))
    path.write_bytes(data)
    return data


def test_a_read_stops_at_its_deadline_and_the_next_goes_on_from_there(tmp_path):
    path = tmp_path / "jit-1.dump"
    data = _many_loads(path, 3000)
    r = reader(path, limit=len(data))
    clock = Stepping(0.001)
    offsets = [0]
    while True:
        r.read_more(deadline=clock.now + 0.0015, clock=clock)
        offsets.append(r.offset)
        if not r.behind:
            break
    assert len(offsets) > 4  # deferred, chunk by chunk
    assert all(0 < b - a <= CHUNK for a, b in zip(offsets, offsets[1:-1]))
    assert len(r.placements.items) == 3000 and r.problem is None and bytes(r.kept) == data
    r.close()


def test_a_dump_that_takes_too_long_to_read_is_given_up_keeping_whole_records(tmp_path):
    path = tmp_path / "jit-1.dump"
    _many_loads(path, 3000)
    r = reader(path, limit=64 << 20)
    r.max_seconds = 0.005
    clock = Stepping(0.001)
    calls = 0
    while not r.stopped and calls < 100:
        r.read_more(deadline=clock.now + 0.0015, clock=clock)
        calls += 1
    assert r.problem == (f"reading it took more than 0.005 s; code loads after offset "
                         f"{r.parser.offset} are not kept")
    assert not r.behind and r.read_more(clock=clock) == 0
    _h, records, pending = parse(bytes(r.kept))
    assert 0 < len(records) == len(r.placements.items) < 3000 and pending == 0
    r.close()
