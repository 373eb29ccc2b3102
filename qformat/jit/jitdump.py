"""The jitdump format (perf's ``jit-PID.dump``), and what `.q` keeps of it.

A JIT (CPython 3.13 ``-X perf_jit``, a JVM agent, ...) appends records to
``jit-PID.dump`` and mmaps the file executable, so the kernel names it in an
MMAP2 record. Layout, little-endian (tools/perf/util/jitdump.h):

- header: magic u32 (0x4A695444), version u32, total_size u32 (of the
  header), elf_mach u32, pad1 u32, pid u32, timestamp u64, flags u64;
- records: id u32, total_size u32 (of the record), timestamp u64, then by id:
  0 CODE_LOAD: pid u32, tid u32, vma u64, code_addr u64, code_size u64,
  code_index u64, name (NUL-terminated), code bytes (code_size);
  1 CODE_MOVE: pid u32, tid u32, vma u64, old_code_addr u64,
  new_code_addr u64, code_size u64, code_index u64;
  2 CODE_DEBUG_INFO: code_addr u64, nr_entry u64, entries of addr u64,
  lineno i32, discrim i32, name (NUL-terminated);
  3 CODE_CLOSE: nothing;
  4 CODE_UNWINDING_INFO: unwinding_size u64, eh_frame_hdr_size u64,
  mapped_size u64, unwinding data (``.eh_frame`` then ``.eh_frame_hdr``,
  unwinding_size bytes), padding to 8.

Timestamps are CLOCK_MONOTONIC nanoseconds unless the header flag
JITDUMP_FLAGS_ARCH_TIMESTAMP says they are TSC ticks: such dumps are refused
(the collector's samples are on CLOCK_MONOTONIC and TSC conversion needs the
perf mmap page's time_* fields of the very CPU: not worth the risk of
attributing samples to the wrong code).

What `.q` keeps (``q:jitdump``): a file in this same format, the header
followed by the records of the process's dump in file order, whole records
only, cut before the first record past the size limit; records of unknown
type are dropped. perf can read it as it is.

Placements and synthetic addresses: JIT code addresses are reused (no unload
record: a later CODE_LOAD at the same address replaces the code from its
timestamp on). The collector decides at sample time which placement an
address belonged to and writes a synthetic address for it into `.stack` and
`.hist`: ``JIT_BASE + ordinal * JIT_STRIDE + offset``, where ``ordinal``
numbers the CODE_LOAD and CODE_MOVE records of the kept file in order (from
0) and ``offset`` is the distance from the code's start. The viewer numbers
the placements of the copy the same way, so no time needs to reach `.stack`.
JIT_BASE lies in the hole between user and kernel addresses of x86-64 and
aarch64: no real address can be mistaken for one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import NamedTuple, Union

from .jitaddr import (JIT_BASE, JIT_END, JIT_STRIDE, MAX_ORDINAL, is_synthetic,  # noqa: F401
                      split_synthetic, synthetic_address)

MAGIC = 0x4A695444
MAGIC_SWAPPED = 0x4454694A
FLAGS_ARCH_TIMESTAMP = 1

CODE_LOAD, CODE_MOVE, CODE_DEBUG_INFO, CODE_CLOSE, CODE_UNWINDING_INFO = range(5)

MAX_RECORD = 4 << 20  # a larger record is taken for corruption
MAX_HEADER = 4096

_HEADER = struct.Struct("<IIIIIIQQ")
_PREFIX = struct.Struct("<IIQ")
_LOAD = struct.Struct("<IIQQQQ")
_MOVE = struct.Struct("<IIQQQQQ")
_DEBUG = struct.Struct("<QQ")
_ENTRY = struct.Struct("<Qii")
_UNWIND = struct.Struct("<QQQ")


class JitdumpError(Exception):
    """Bytes that are not a jitdump, with the offset where reading stopped."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(f"offset {offset}: {message}")
        self.offset = offset
        self.message = message


class Header(NamedTuple):
    version: int
    elf_mach: int
    pid: int
    timestamp: int  # CPython: wall-clock microseconds; nothing depends on it
    flags: int = 0
    size: int = _HEADER.size
    pad1: int = 0


class CodeLoad(NamedTuple):
    time: int
    pid: int
    tid: int
    vma: int
    code_addr: int
    code_size: int
    code_index: int
    name: str
    code: bytes = b""  # the code bytes as written (empty where they were not kept)


class CodeMove(NamedTuple):
    time: int
    pid: int
    tid: int
    vma: int
    old_code_addr: int
    new_code_addr: int
    code_size: int
    code_index: int


class DebugEntry(NamedTuple):
    addr: int
    line: int
    discrim: int
    name: str


class DebugInfo(NamedTuple):
    time: int
    code_addr: int
    entries: tuple[DebugEntry, ...]


class UnwindingInfo(NamedTuple):
    time: int
    eh_frame_hdr_size: int
    mapped_size: int
    data: bytes  # .eh_frame then .eh_frame_hdr (the hdr is the last eh_frame_hdr_size bytes)

    @property
    def eh_frame(self) -> bytes:
        return self.data[:len(self.data) - self.eh_frame_hdr_size]

    @property
    def eh_frame_hdr(self) -> bytes:
        return self.data[len(self.data) - self.eh_frame_hdr_size:]


class Close(NamedTuple):
    time: int


class Unknown(NamedTuple):
    kind: int
    time: int
    size: int


Record = Union[CodeLoad, CodeMove, DebugInfo, UnwindingInfo, Close, Unknown]


def _cstring(data: bytes | bytearray | memoryview, pos: int, end: int, where: int
             ) -> tuple[str, int]:
    raw = bytes(data[pos:end])
    nul = raw.find(b"\0")
    if nul < 0:
        raise JitdumpError(where, "name without a terminating NUL")
    return raw[:nul].decode("utf-8", "replace"), pos + nul + 1


def decode_header(data: bytes | bytearray | memoryview) -> Header:
    """The file header (``data`` holds at least its fixed 40 bytes)."""
    if len(data) < _HEADER.size:
        raise JitdumpError(0, "shorter than a jitdump header")
    magic, version, size, mach, pad1, pid, ts, flags = _HEADER.unpack_from(data, 0)
    if magic == MAGIC_SWAPPED:
        raise JitdumpError(0, "a big-endian jitdump (not supported)")
    if magic != MAGIC:
        raise JitdumpError(0, "not a jitdump (bad magic)")
    if not _HEADER.size <= size <= MAX_HEADER:
        raise JitdumpError(8, f"header size {size} out of range")
    if flags & FLAGS_ARCH_TIMESTAMP:
        raise JitdumpError(32, "TSC timestamps (JITDUMP_FLAGS_ARCH_TIMESTAMP) are not "
                               "supported; only CLOCK_MONOTONIC dumps")
    return Header(version, mach, pid, ts, flags, size, pad1)


def decode_record(data: bytes | bytearray | memoryview, offset: int = 0) -> Record:
    """One whole record (``data`` from its first byte to its end); ``offset``
    is where it sits in the file, for messages."""
    kind, size, ts = _PREFIX.unpack_from(data, 0)
    body = _PREFIX.size
    if kind == CODE_LOAD:
        if size < body + _LOAD.size + 1:
            raise JitdumpError(offset, f"CODE_LOAD of {size} bytes is too short")
        pid, tid, vma, addr, csize, index = _LOAD.unpack_from(data, body)
        name, pos = _cstring(data, body + _LOAD.size, size, offset)
        if csize > size - pos:
            raise JitdumpError(offset, f"CODE_LOAD code_size {csize} exceeds its record")
        return CodeLoad(ts, pid, tid, vma, addr, csize, index, name, bytes(data[pos:pos + csize]))
    if kind == CODE_MOVE:
        if size < body + _MOVE.size:
            raise JitdumpError(offset, f"CODE_MOVE of {size} bytes is too short")
        return CodeMove(ts, *_MOVE.unpack_from(data, body))
    if kind == CODE_DEBUG_INFO:
        if size < body + _DEBUG.size:
            raise JitdumpError(offset, f"CODE_DEBUG_INFO of {size} bytes is too short")
        addr, count = _DEBUG.unpack_from(data, body)
        pos = body + _DEBUG.size
        if count > (size - pos) // (_ENTRY.size + 1):
            raise JitdumpError(offset, f"CODE_DEBUG_INFO claims {count} entries")
        entries = []
        for _ in range(count):
            if pos + _ENTRY.size > size:
                raise JitdumpError(offset, "CODE_DEBUG_INFO entries exceed the record")
            a, line, disc = _ENTRY.unpack_from(data, pos)
            name, pos = _cstring(data, pos + _ENTRY.size, size, offset)
            entries.append(DebugEntry(a, line, disc, name))
        return DebugInfo(ts, addr, tuple(entries))
    if kind == CODE_UNWINDING_INFO:
        if size < body + _UNWIND.size:
            raise JitdumpError(offset, f"CODE_UNWINDING_INFO of {size} bytes is too short")
        usize, hsize, msize = _UNWIND.unpack_from(data, body)
        pos = body + _UNWIND.size
        if usize > size - pos or hsize > usize:
            raise JitdumpError(offset, "CODE_UNWINDING_INFO sizes exceed the record")
        return UnwindingInfo(ts, hsize, msize, bytes(data[pos:pos + usize]))
    if kind == CODE_CLOSE:
        return Close(ts)
    return Unknown(kind, ts, size)


@dataclass
class JitdumpParser:
    """Byte-fed reader: ``feed`` any pieces of the file in order, get whole
    records back as soon as they are complete. No I/O inside. ``offset`` is
    the file offset just past the last whole record (where a copy may be
    cut). Bad bytes set ``error`` (a JitdumpError with their offset): the
    records before them are still returned, nothing after them is read."""

    header: Header | None = None
    header_bytes: bytes = b""
    offset: int = 0
    error: JitdumpError | None = None
    _buf: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes | memoryview) -> list[tuple[int, int, Record, bytes]]:
        """(file offset, size, record, its bytes) of each record completed by ``data``."""
        if self.error is not None:
            return []
        self._buf += data
        out: list[tuple[int, int, Record, bytes]] = []
        try:
            self._drain(out)
        except JitdumpError as e:
            self.error = e
        except struct.error as e:  # a bug guard: the checks above should make this unreachable
            self.error = JitdumpError(self.offset, str(e))
        if self.error is not None:
            self._buf.clear()
        return out

    @property
    def pending(self) -> int:
        """Bytes of an incomplete record waiting for the rest."""
        return len(self._buf)

    def _drain(self, out: list[tuple[int, int, Record, bytes]]) -> None:
        buf = self._buf
        pos = 0
        try:
            if self.header is None:
                if len(buf) < _HEADER.size:
                    return
                header = decode_header(buf)
                if len(buf) < header.size:
                    return
                self.header = header
                self.header_bytes = bytes(buf[:header.size])
                pos = self.offset = header.size
            while len(buf) - pos >= _PREFIX.size:
                _kind, size, _ts = _PREFIX.unpack_from(buf, pos)
                if size < _PREFIX.size:
                    raise JitdumpError(self.offset, f"record size {size} is too small")
                if size > MAX_RECORD:
                    raise JitdumpError(self.offset,
                                       f"record of {size} bytes exceeds {MAX_RECORD}")
                if len(buf) - pos < size:
                    break
                raw = bytes(buf[pos:pos + size])
                out.append((self.offset, size, decode_record(raw, self.offset), raw))
                pos += size
                self.offset += size
        finally:
            del buf[:pos]


def parse(data: bytes) -> tuple[Header, list[Record], int]:
    """A whole (possibly cut) dump: header, whole records, and the number of
    trailing bytes that did not make a whole record. Raises JitdumpError."""
    p = JitdumpParser()
    records = [r for _o, _s, r, _b in p.feed(data)]
    if p.error is not None:
        raise p.error
    if p.header is None:
        raise JitdumpError(0, "shorter than a jitdump header")
    return p.header, records, p.pending


# ---------------------------------------------------------------- encoding (the inverse)

def encode_header(h: Header) -> bytes:
    raw = _HEADER.pack(MAGIC, h.version, h.size, h.elf_mach, h.pad1, h.pid, h.timestamp, h.flags)
    return raw + bytes(max(0, h.size - len(raw)))


def _prefixed(kind: int, time: int, body: bytes) -> bytes:
    return _PREFIX.pack(kind, _PREFIX.size + len(body), time) + body


def encode(rec: Record) -> bytes:
    """Bytes of one record, as a JIT writes it (unwinding info padded to 8)."""
    if isinstance(rec, CodeLoad):
        body = (_LOAD.pack(rec.pid, rec.tid, rec.vma, rec.code_addr, rec.code_size,
                           rec.code_index) + rec.name.encode() + b"\0" + rec.code)
        return _prefixed(CODE_LOAD, rec.time, body)
    if isinstance(rec, CodeMove):
        return _prefixed(CODE_MOVE, rec.time, _MOVE.pack(
            rec.pid, rec.tid, rec.vma, rec.old_code_addr, rec.new_code_addr, rec.code_size,
            rec.code_index))
    if isinstance(rec, DebugInfo):
        body = _DEBUG.pack(rec.code_addr, len(rec.entries)) + b"".join(
            _ENTRY.pack(e.addr, e.line, e.discrim) + e.name.encode() + b"\0"
            for e in rec.entries)
        return _prefixed(CODE_DEBUG_INFO, rec.time, body)
    if isinstance(rec, UnwindingInfo):
        body = _UNWIND.pack(len(rec.data), rec.eh_frame_hdr_size, rec.mapped_size) + rec.data
        body += bytes(-(len(body) + _PREFIX.size) % 8)
        return _prefixed(CODE_UNWINDING_INFO, rec.time, body)
    if isinstance(rec, Close):
        return _prefixed(CODE_CLOSE, rec.time, b"")
    raise ValueError(f"cannot encode {rec!r}")


# ---------------------------------------------------------------- placements

class Placement(NamedTuple):
    """Code at an address from a time on: one CODE_LOAD or CODE_MOVE."""

    ordinal: int
    time: int
    addr: int
    size: int
    name: str
    code_index: int
    unwind: UnwindingInfo | None = None


class Placements:
    """Numbers the CODE_LOAD and CODE_MOVE records of a dump in file order.

    A CODE_UNWINDING_INFO applies to the CODE_LOAD that follows it (as
    ``perf inject --jit`` takes it); a CODE_MOVE keeps the name and unwinding
    information of the latest load of its code index.
    """

    def __init__(self) -> None:
        self.items: list[Placement] = []
        self._unwind: UnwindingInfo | None = None
        self._by_index: dict[int, Placement] = {}

    def add(self, rec: Record) -> Placement | None:
        if len(self.items) >= MAX_ORDINAL:
            return None
        if isinstance(rec, UnwindingInfo):
            self._unwind = rec
            return None
        if isinstance(rec, CodeLoad):
            p = Placement(len(self.items), rec.time, rec.code_addr, rec.code_size, rec.name,
                          rec.code_index, self._unwind)
            self._unwind = None
            self._by_index[rec.code_index] = p
        elif isinstance(rec, CodeMove):
            old = self._by_index.get(rec.code_index)
            p = Placement(len(self.items), rec.time, rec.new_code_addr, rec.code_size,
                          old.name if old else f"code-{rec.code_index}", rec.code_index,
                          old.unwind if old else None)
            self._by_index[rec.code_index] = p
        else:
            return None
        self.items.append(p)
        return p

