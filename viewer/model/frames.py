"""What a profile is made of before any analysis: frames (the nodes of a
call graph: a function, object, address or line in an object), the
located addresses they are named from, and the task sets they come from."""

from __future__ import annotations

from typing import NamedTuple

from qtools.qformat.limits import exceeded


class Frame(NamedTuple):
    """A node of the call graph: a function (or object, or address) in an object."""

    name: str
    object: str
    kernel: bool = False
    # --by line: the function the line is in (the name is FILE:LINE)
    function: str = ""
    inlined: bool = False  # a function DWARF says was inlined here ("NAME (inlined)")


class FrameTable:
    """Frames interned: one id per distinct frame, ids in order of first use;
    at most ``limit`` of them (``LimitExceeded``, without a file: the caller
    knows which it was reading)."""

    def __init__(self, limit: int | None = None) -> None:
        self.frames: list[Frame] = []
        self.ids: dict[Frame, int] = {}
        self.limit = limit

    @classmethod
    def of(cls, frames: list[Frame], limit: int | None = None) -> FrameTable:
        """The table of ``frames`` (distinct, in id order), to add more to."""
        table = cls(limit)
        table.frames = list(frames)
        table.ids = {frame: fid for fid, frame in enumerate(frames)}
        return table

    def id(self, frame: Frame) -> int:
        fid = self.ids.get(frame)
        if fid is None:
            if self.limit is not None and len(self.frames) >= self.limit:
                raise exceeded(f"more than {self.limit} distinct frames in the profile", None,
                               "addresses", self.limit)
            fid = self.ids[frame] = len(self.frames)
            self.frames.append(frame)
        return fid


class Location(NamedTuple):
    """An address of one set's samples with what the set's maps say about
    it, before any name: what pprof's locations and mappings, annotation
    (object and offset) and a diff need. Names come later, from the
    symbolizer (``space.AddressSpace.lookup``)."""

    set: int  # which of the loaded sets (its address space) it comes from
    address: int  # as the stack holds it
    is_return: bool  # a return address: its call instruction is at address-1
    kernel: bool
    object: str | None  # the mapped object (None: not in a mapping: kernel, JIT, unknown)
    copy: str | None  # the object's copy in the `.q` (kallsyms for the kernel)
    crc: int | None  # the copy's crc32 (from its name)
    build_id: str | None
    file_offset: int | None  # of the instruction (address-1 for a return address)


class SetSummary(NamedTuple):
    """One task set that went into a profile."""

    file: str  # the `.info` name
    directory: str
    comm: str | None
    pid: int | None
    pids: tuple[int, ...] | None
    cpu: int | None
    command: str  # what the `Command:` line shows
    hist_file: str | None
    host: str | None = None  # the machine that collected it (q:hostname)
    unit: str | None = None  # the systemd unit its samples ran in (q:unit)
    container: str | None = None  # the container id (q:container)


class Symbolized(NamedTuple):
    """What an address is: function name, object, and the address in the object."""

    name: str
    object: str
    kernel: bool
    offset: int  # link-time address in the object (absolute where there is no object)
    start: int | None  # the symbol's start in the same space; None when unknown
    # No symbol: ``start`` is the start of the unwind entry (FDE) that holds
    # the address, and the name is ``0xSTART<object>``.
    by_fde: bool = False
