"""How the bytes of one event's records become records: ``SampleLayout``.

The layout of a sample follows from ``sample_type`` (and read_format,
branch_sample_type, the register masks), so it is computed once per event
and then applied to every record; for the layouts the collector opens, one
decoding function is compiled for it (``_compile_sample``). Offsets and
field order are those of perf-event-abi.md sections 4 and 5; the records
themselves are in ``records``.
"""

from __future__ import annotations

import functools
import operator
import struct
import types
from typing import Any, Callable, Container, Sequence

from ..kernel import abi
from .idle import IdleProbe
from .records import NO_ID, Branch, Other, Record, RecordError, Sample, SampleId
from .routes import ROUTES

_HEADER = struct.Struct("<IHH")
_U64 = struct.Struct("<Q")

_SLOT = {name: i for i, name in enumerate(Sample._fields)}
_DEFAULTS = tuple(Sample._field_defaults[name] for name in Sample._fields)
_new_sample = tuple.__new__


def _sample_maker(fields: list[str]) -> Callable[..., Sample]:
    """``make(misc, h, chain, regs_abi, regs, stack, cgroup)``: the Sample
    whose fields are these expressions over those names (``h``: the
    prefix's values) or constants, in field order. Compiled once per
    layout, as namedtuple compiles its __new__: a tuple display is the
    cheapest way to make the thousands a second the collector decodes.
    The expressions are field names, ``h[i]`` and reprs of the defaults."""
    src = ("def make(misc, h, chain, regs_abi, regs, stack, cgroup):\n"
           f"    return _new(Sample, ({', '.join(fields)},))\n")
    namespace: dict[str, Any] = {"_new": tuple.__new__, "Sample": Sample}
    exec(src, namespace)  # noqa: S102 (no outside text in it: see above)
    return namespace["make"]  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=512)
def _u64s(n: int) -> struct.Struct:
    return struct.Struct(f"<{n}Q")


class SampleLayout:
    """How samples (and sample_id trailers) of one event are laid out.
    Immutable: equal (and hashed) by the attributes it is made of."""

    __slots__ = ("sample_type", "read_format", "branch_sample_type", "regs_user_mask",
                 "regs_intr_mask", "sample_id_all", "_prefix", "_gather", "_steps", "_id_fields",
                 "_decoders", "idle_probe")

    def __init__(self, sample_type: int, read_format: int = 0, branch_sample_type: int = 0,
                 regs_user_mask: int = 0, regs_intr_mask: int = 0,
                 sample_id_all: bool = True) -> None:
        self.sample_type = sample_type
        self.read_format = read_format
        self.branch_sample_type = branch_sample_type
        self.regs_user_mask = regs_user_mask
        self.regs_intr_mask = regs_intr_mask
        self.sample_id_all = sample_id_all
        self._prepare()

    def _key(self) -> tuple[int, int, int, int, int, bool]:
        return (self.sample_type, self.read_format, self.branch_sample_type,
                self.regs_user_mask, self.regs_intr_mask, self.sample_id_all)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not SampleLayout:
            return NotImplemented
        return self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return ("SampleLayout(sample_type={}, read_format={}, branch_sample_type={}, "
                "regs_user_mask={}, regs_intr_mask={}, sample_id_all={})".format(*self._key()))

    def _prepare(self) -> None:
        st = self.sample_type
        fmt, names = "<", []
        for bit, code, name in ((abi.SAMPLE_IDENTIFIER, "Q", "identifier"),
                                (abi.SAMPLE_IP, "Q", "ip"), (abi.SAMPLE_TID, "II", "pid tid"),
                                (abi.SAMPLE_TIME, "Q", "time"), (abi.SAMPLE_ADDR, "Q", "addr"),
                                (abi.SAMPLE_ID, "Q", "id"),
                                (abi.SAMPLE_STREAM_ID, "Q", "stream_id"),
                                (abi.SAMPLE_CPU, "II", "cpu _res"),
                                (abi.SAMPLE_PERIOD, "Q", "period")):
            if st & bit:
                fmt += code
                names += name.split()
        self._prefix = struct.Struct(fmt)
        self.idle_probe = IdleProbe.of(fmt, names)
        # One C-speed itemgetter picks every Sample field, in order, out of
        # (misc, *prefix values, *defaults).
        where = {n: 1 + i for i, n in enumerate(names) if n in _SLOT}
        tail = 1 + len(names)
        picks = [0] + [where.get(n, tail + k) for k, n in enumerate(Sample._fields) if k]
        self._gather = operator.itemgetter(*picks)
        steps = [fn for bit, fn in (
            (abi.SAMPLE_READ, SampleLayout._read_values),
            (abi.SAMPLE_CALLCHAIN, SampleLayout._callchain),
            (abi.SAMPLE_RAW, SampleLayout._raw),
            (abi.SAMPLE_BRANCH_STACK, SampleLayout._branches),
            (abi.SAMPLE_REGS_USER, SampleLayout._regs_user),
            (abi.SAMPLE_STACK_USER, SampleLayout._stack_user),
            (abi.SAMPLE_WEIGHT | abi.SAMPLE_WEIGHT_STRUCT, SampleLayout._u64_field("weight")),
            (abi.SAMPLE_DATA_SRC, SampleLayout._u64_field("data_src")),
            (abi.SAMPLE_TRANSACTION, SampleLayout._u64_field("transaction")),
            (abi.SAMPLE_REGS_INTR, SampleLayout._regs_intr),
            (abi.SAMPLE_PHYS_ADDR, SampleLayout._u64_field("phys_addr")),
            (abi.SAMPLE_CGROUP, SampleLayout._u64_field("cgroup"))) if st & bit]
        self._steps = tuple(steps)
        ids = []
        for bit, name in ((abi.SAMPLE_TID, "tid"), (abi.SAMPLE_TIME, "time"),
                          (abi.SAMPLE_ID, "id"), (abi.SAMPLE_STREAM_ID, "stream_id"),
                          (abi.SAMPLE_CPU, "cpu"), (abi.SAMPLE_IDENTIFIER, "identifier")):
            if st & bit:
                ids.append(name)
        self._id_fields = tuple(ids)
        # each of the routing table's decoders bound to this layout once;
        # samples straight to this layout's own
        decoders: dict[int, Callable[..., Record]] = {
            r.number: types.MethodType(r.decode, self) for r in ROUTES}
        fast = self._compile_sample(names)
        # the collector's layouts: one decoder made for them
        decoders[abi.RECORD_SAMPLE] = fast if fast is not None else self.sample_body
        self._decoders = decoders

    def _compile_sample(self, names: list[str]) -> Callable[..., Sample] | None:
        """sample_body for a layout whose fields after the prefix are among
        the callchain, user registers and stack, and the cgroup (every
        layout the collector opens): one function, no step calls, the
        prefix and the callchain's length in one unpack, the Sample made by
        one tuple display. It decodes what sample_body decodes, and fails where
        it fails; only the registers come as a view of the record's words
        (read as a tuple's items; like the stack, valid while the record is)."""
        st = self.sample_type
        if st & ~_FAST_SAMPLE_BITS:
            return None
        cc, ru = bool(st & abi.SAMPLE_CALLCHAIN), bool(st & abi.SAMPLE_REGS_USER)
        su, cg = bool(st & abi.SAMPLE_STACK_USER), bool(st & abi.SAMPLE_CGROUP)
        head = struct.Struct(self._prefix.format + ("Q" if cc else ""))
        where = {n: f"h[{i}]" for i, n in enumerate(names) if n in _SLOT}
        where.update(misc="misc", callchain="chain", regs_abi="regs_abi", regs="regs",
                     stack="stack", cgroup="cgroup")
        make = _sample_maker([where.get(n, repr(Sample._field_defaults[n]))
                              for n in Sample._fields])
        nregs = self.regs_user_mask.bit_count()
        first = 8 + self._prefix.size
        u64 = _U64.unpack_from
        abi_and_size = struct.Struct(f"<Q{8 * nregs}xQ")  # the common case in one unpack
        dyn_and_cgroup = _u64s(2).unpack_from

        def body(rec: bytes | memoryview, type_: int, misc: int, size: int) -> Sample:
            h = head.unpack_from(rec, 8)
            off = first
            chain: tuple[int, ...] = ()
            regs_abi = cgroup = 0
            regs: Sequence[int] = ()
            stack: bytes | memoryview = b""
            if cc:
                nr = h[-1]
                if off + 8 + 8 * nr > size:
                    raise RecordError("callchain runs past the record")
                if nr:
                    chain = _u64s(nr).unpack_from(rec, off + 8)
                off += 8 + 8 * nr
            stack_size = -1
            if ru:
                if su and off + abi_and_size.size <= size:
                    regs_abi, stack_size = abi_and_size.unpack_from(rec, off)
                else:
                    (regs_abi,) = u64(rec, off)
                off += 8
                if regs_abi and nregs:
                    if off + 8 * nregs > len(rec):
                        raise RecordError("registers run past the record")
                    mv = rec if rec.__class__ is memoryview else memoryview(rec)
                    regs = mv[off:off + 8 * nregs].cast("Q")  # type: ignore[union-attr]
                    off += 8 * nregs
                else:
                    stack_size = -1  # read where the registers would have been
            if su:
                if stack_size < 0:
                    (stack_size,) = u64(rec, off)
                off += 8
                if stack_size:
                    if off + stack_size + 8 > size:
                        raise RecordError("user stack runs past the record")
                    if cg and off + stack_size + 16 <= size:
                        dyn, cgroup = dyn_and_cgroup(rec, off + stack_size)
                        stack = rec[off:off + (dyn if dyn < stack_size else stack_size)]
                        return make(misc, h, chain, regs_abi, regs, stack, cgroup)
                    (dyn,) = u64(rec, off + stack_size)
                    stack = rec[off:off + (dyn if dyn < stack_size else stack_size)]
                    off += stack_size + 8
            if cg:
                (cgroup,) = u64(rec, off)
                off += 8
            if off > size:
                raise RecordError("sample fields run past the record")
            return make(misc, h, chain, regs_abi, regs, stack, cgroup)
        return body

    @property
    def sample_decoder(self) -> Callable[[bytes | memoryview, int, int, int], Record]:
        """``decode``'s decoder for samples, called with the header read:
        (record, type, misc, size), the size checked against the record's
        length and at least 8. Raises RecordError, struct.error or IndexError
        where ``decode`` raises RecordError."""
        return self._decoders[abi.RECORD_SAMPLE]

    @property
    def id_size(self) -> int:
        return 8 * len(self._id_fields) if self.sample_id_all else 0

    def read_size(self) -> int:
        rf = self.read_format
        if rf & abi.FORMAT_GROUP:
            raise RecordError("group read_format is not decoded")
        n = 1 + sum(bool(rf & b) for b in (abi.FORMAT_TOTAL_TIME_ENABLED,
                                           abi.FORMAT_TOTAL_TIME_RUNNING, abi.FORMAT_ID,
                                           abi.FORMAT_LOST))
        return 8 * n

    # ---------------------------------------------------------------- samples

    def sample_body(self, rec: bytes | memoryview, type_: int, misc: int, size: int) -> Sample:
        """A PERF_RECORD_SAMPLE's fields (the header is read): the decoder of
        samples of a layout ``_compile_sample`` cannot compile."""
        fixed = self._gather((misc, *self._prefix.unpack_from(rec, 8), *_DEFAULTS))
        if not self._steps:
            if 8 + self._prefix.size > size:
                raise RecordError("sample fields run past the record")
            return _new_sample(Sample, fixed)
        values = list(fixed)
        self._variable(rec, 8 + self._prefix.size, size, values)
        return _new_sample(Sample, values)

    def _variable(self, rec: bytes | memoryview, off: int, size: int, values: list) -> None:
        """The fields after the fixed prefix, in ABI order (only the steps
        this layout has, chosen once in __post_init__)."""
        for step in self._steps:
            off = step(self, rec, off, size, values)
        if off > size:
            raise RecordError("sample fields run past the record")

    def _read_values(self, rec: bytes | memoryview, off: int, size: int, values: list) -> int:
        return off + self.read_size()

    def _callchain(self, rec: bytes | memoryview, off: int, size: int, values: list) -> int:
        (nr,) = _U64.unpack_from(rec, off)
        if off + 8 + 8 * nr > size:
            raise RecordError("callchain runs past the record")
        values[_CALLCHAIN] = _u64s(nr).unpack_from(rec, off + 8)
        return off + 8 + 8 * nr

    def _raw(self, rec: bytes | memoryview, off: int, size: int, values: list) -> int:
        (raw_size,) = struct.unpack_from("<I", rec, off)
        values[_SLOT["raw"]] = bytes(rec[off + 4:off + 4 + raw_size])
        return off + 4 + raw_size

    def _regs_user(self, rec: bytes | memoryview, off: int, size: int, values: list) -> int:
        return _regs(rec, off, self.regs_user_mask, values, _SLOT["regs_abi"], _SLOT["regs"])

    def _stack_user(self, rec: bytes | memoryview, off: int, size: int, values: list) -> int:
        (stack_size,) = _U64.unpack_from(rec, off)
        off += 8
        if stack_size:
            if off + stack_size + 8 > size:
                raise RecordError("user stack runs past the record")
            (dyn,) = _U64.unpack_from(rec, off + stack_size)
            values[_SLOT["stack"]] = rec[off:off + min(dyn, stack_size)]
            off += stack_size + 8
        return off

    def _regs_intr(self, rec: bytes | memoryview, off: int, size: int, values: list) -> int:
        return _regs(rec, off, self.regs_intr_mask, None, 0, 0)

    @staticmethod
    def _u64_field(name: str) -> Callable[..., int]:
        slot = _SLOT[name]

        def step(layout: SampleLayout, rec: bytes | memoryview, off: int, size: int,
                 values: list) -> int:
            (values[slot],) = _U64.unpack_from(rec, off)
            return off + 8
        return step

    def _branches(self, rec: bytes | memoryview, off: int, size: int, values: list) -> int:
        (nr,) = _U64.unpack_from(rec, off)
        off += 8
        if self.branch_sample_type & abi.BRANCH_HW_INDEX:
            (values[_SLOT["branch_hw_index"]],) = _U64.unpack_from(rec, off)
            off += 8
        if off + 24 * nr > size:
            raise RecordError("branch stack runs past the record")
        flat = struct.unpack_from(f"<{3 * nr}Q", rec, off)
        values[_SLOT["branches"]] = tuple(Branch(flat[i], flat[i + 1], flat[i + 2])
                                          for i in range(0, 3 * nr, 3))
        return off + 24 * nr

    # ---------------------------------------------------------------- others

    def decode_id(self, rec: bytes | memoryview, size: int) -> SampleId:
        if not self.sample_id_all or not self._id_fields:
            return NO_ID
        off = size - 8 * len(self._id_fields)
        values: dict[str, int] = {}
        for name in self._id_fields:
            if name == "tid":
                values["pid"], values["tid"] = struct.unpack_from("<II", rec, off)
            elif name == "cpu":
                values["cpu"] = struct.unpack_from("<I", rec, off)[0]
            elif name == "identifier":
                values["id"] = _U64.unpack_from(rec, off)[0]
            elif name != "stream_id":
                values[name] = _U64.unpack_from(rec, off)[0]
            off += 8
        return SampleId(**values)

    def idle_sample(self, rec: bytes | memoryview,
                    others: Container[int] = ()) -> tuple[int, int, int] | None:
        """(ip, tid, weight) of a sample of the idle task (pid 0, kernel
        mode), told from the header and the fixed prefix alone; None for any
        other record, and for a sample whose SAMPLE_IDENTIFIER is among
        ``others`` (another event's: a tracepoint's samples of pid 0 are
        switches from idle, not idle time). The fields after the prefix
        (callchain, registers, user stack) are neither read nor checked."""
        return self.idle_probe.match(rec, others)

    def decode(self, rec: bytes | memoryview) -> Record:
        """Decode any record by the decoder ``routes.ROUTES`` names for its
        type; unknown types come back as ``Other``.

        Raises RecordError (only) for a record shorter than its header or
        its fields say."""
        try:
            if len(rec) < _HEADER.size:
                raise RecordError(f"record of {len(rec)} bytes has no complete header")
            type_, misc, size = _HEADER.unpack_from(rec, 0)
            if size > len(rec) or size < 8:
                raise RecordError(f"record of type {type_} has a bad size {size}")
            decoder = self._decoders.get(type_)
            if decoder is None:
                return Other(type_, misc, size)
            return decoder(rec, type_, misc, size)
        except (struct.error, IndexError) as e:
            raise RecordError(f"record too short for its fields: {e}") from None

    def trailer(self, rec: bytes | memoryview, type_: int, size: int) -> tuple[int, SampleId]:
        """(where the body of a non-sample record ends, its sample_id)."""
        body_end = size - self.id_size
        if body_end < 8:
            raise RecordError(f"record of type {type_} is too short")
        return body_end, self.decode_id(rec, size)


_CALLCHAIN = _SLOT["callchain"]
# the fields _compile_sample decodes: the prefix, then these
_FAST_SAMPLE_BITS = (abi.SAMPLE_IDENTIFIER | abi.SAMPLE_IP | abi.SAMPLE_TID | abi.SAMPLE_TIME
                     | abi.SAMPLE_ADDR | abi.SAMPLE_ID | abi.SAMPLE_STREAM_ID | abi.SAMPLE_CPU
                     | abi.SAMPLE_PERIOD | abi.SAMPLE_CALLCHAIN | abi.SAMPLE_REGS_USER
                     | abi.SAMPLE_STACK_USER | abi.SAMPLE_CGROUP)


def _regs(rec: bytes | memoryview, off: int, mask: int, values: list | None,
          abi_slot: int, regs_slot: int) -> int:
    (regs_abi,) = _U64.unpack_from(rec, off)
    off += 8
    n = mask.bit_count() if regs_abi else 0
    if values is not None:
        values[abi_slot] = regs_abi
        if n:
            values[regs_slot] = _u64s(n).unpack_from(rec, off)
    return off + 8 * n
