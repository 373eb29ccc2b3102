"""How one set's locations read as frames, as a profile's view says.

A location is named once, when first needed (so symbols load, and warn, in
the order the data meets them), through its set's address space, and
becomes a frame as ``--by`` says: its function (default), its object, its
address (``NAME+0xOFF``) or its source line (``FILE:LINE`` with its
function). By function, the functions DWARF says were inlined at a
location are frames of their own (``NAME (inlined)``), innermost first,
except at the leaf, whose self time stays on the containing symbol (as
perf keeps it) unless the view says ``inline``.
"""

from __future__ import annotations

import os
from typing import Callable

from ..model.escape import printable
from ..model.frames import Frame, FrameTable, Symbolized
from ..model.profile import SetSamples, View
from ..naming.demangle import demangle
from .pyview import is_python
from .threadlocs import thread_frame

Escape = Callable[[str], str]
SourceLine = tuple[str, int] | None  # (path, line) of a location, --by line


def same(value: str) -> str:
    return value


def escaping(view: View) -> Escape:
    """The escaping a view's names go through (JSON and exports keep them)."""
    return printable if view.escape else same


def line_frame(loc: Symbolized, line: SourceLine, escape: Escape = printable) -> Frame:
    """``--by line``: FILE:LINE (the file's base name, as perf's srcline
    shows it) with the function beside it; no line known, the function's
    name alone, as ``--by function`` shows it."""
    if line is None:
        return Frame(escape(loc.name), escape(loc.object), loc.kernel)
    return Frame(escape(f"{os.path.basename(line[0])}:{line[1]}"), escape(loc.object),
                 loc.kernel, escape(loc.name))


def frame_maker(by: str, escape: Escape = printable) -> Callable[[Symbolized], Frame]:
    """How a named address becomes a call-graph node for ``--by``; ``escape``
    makes names safe for the report (JSON escapes by itself)."""
    if by in ("function", "line"):  # a line without its source line is its function
        return lambda loc: Frame(escape(loc.name), escape(loc.object), loc.kernel)
    if by == "object":
        return lambda loc: Frame(escape(loc.object), escape(loc.object), loc.kernel)
    if by == "address":
        def at_address(loc: Symbolized) -> Frame:
            if loc.by_fde:  # unnamed code: the address itself, not START+offset
                return Frame(f"0x{loc.offset:x}<{escape(loc.object)}>",
                             escape(loc.object), loc.kernel)
            name = escape(loc.name)
            if loc.start is not None:
                name += f"+0x{loc.offset - loc.start:x}"
            return Frame(name, escape(loc.object), loc.kernel)
        return at_address
    raise ValueError(f"unknown grouping {by!r}")


class SetFrames:
    """The frames of one set's locations in a frame table shared by every
    set of a report: each location's frame id, kernel or not, object,
    Python or not, and the frames of what was inlined there."""

    def __init__(self, table: FrameTable, view: View, s: SetSamples,
                 unnamed: set[int]) -> None:
        self.table = table
        self.s = s
        self.escape = escaping(view)
        self.make_frame = frame_maker(view.by, self.escape)
        self.by = view.by
        self.by_line = view.by == "line"
        # Functions DWARF says were inlined are frames of their own in the
        # stacks; the leaf's only with ``inline``.
        self.inline_frames = view.by == "function"
        self.leaf_inline = view.inline
        self.unnamed = unnamed  # frames of single addresses (no symbol, no FDE)
        n = len(s.locations)
        self.fids: list[int] = [-1] * n  # -1: not named yet
        self.kernel = bytearray(n)  # 1: a kernel frame (thread roots too: no user frame)
        self.objects: list[str] = [""] * n
        self.python = bytearray(n)  # 1: a Python function's frame
        # the frames of the functions inlined at each location, innermost
        # first (None: not looked up yet); looked up only where a stack
        # needs them: callers, and leaves with ``inline``
        self.chains: list[tuple[int, ...] | None] = [None] * n

    def name_all(self, count: int) -> None:
        """Name the first ``count`` locations."""
        for lid in range(count):
            self.frame(lid)

    def frame(self, lid: int) -> int:
        fid = self.fids[lid]
        if fid >= 0:
            return fid
        s = self.s
        root = s.thread_roots.get(lid) if s.thread_roots else None
        if root is not None:  # --by thread (threadlocs.py)
            tid, name = root
            fid = self.fids[lid] = self.table.id(
                thread_frame(tid, None if name is None else self.escape(name)))
            self.kernel[lid] = True  # no user frame: left out of the stack quality
            return fid
        locations = s.locations
        address, is_return = locations.addresses[lid], bool(locations.returns[lid])
        sym = s.names.lookup(address, is_return)
        if self.by_line and not sym.kernel:
            line = s.names.line(address, is_return)
            fid = self.fids[lid] = self.table.id(line_frame(sym, line, self.escape))
        else:
            fid = self.fids[lid] = self._id(sym)
        self.kernel[lid] = sym.kernel
        self.objects[lid] = self.escape(sym.object)  # the stack quality's rows
        self.python[lid] = is_python(sym.name)
        return fid

    def _id(self, sym: Symbolized) -> int:
        table = self.table
        before = len(table.frames)
        fid = table.id(self.make_frame(sym))
        if fid == before and self.by == "function" and sym.start is None \
                and sym.name.startswith("0x"):
            self.unnamed.add(fid)
        return fid

    def with_inline(self) -> bool:
        """Whether stacks get inlined frames: by function, where an object of
        the set has DWARF to say what was inlined."""
        return self.inline_frames and self.s.names.has_lines()

    def chain(self, lid: int) -> tuple[int, ...]:
        """The frames of the functions inlined at a location, innermost first."""
        c = self.chains[lid]
        if c is None:
            self.frame(lid)
            locations = self.s.locations
            c = () if self.kernel[lid] else self._inlined(
                locations.addresses[lid], bool(locations.returns[lid]), self.objects[lid])
            self.chains[lid] = c
        return c

    def _inlined(self, address: int, is_return: bool, obj: str) -> tuple[int, ...]:
        """The frames of what is inlined at ``address`` of the object ``obj``."""
        chain = self.s.names.inlined(address, is_return)
        escape, table = self.escape, self.table
        return tuple(table.id(Frame(escape(f"{demangle(name)} (inlined)"), obj, False,
                                    inlined=True))
                     for name, _, _ in chain if name)

    def leaf(self, lid: int) -> tuple[int, ...]:
        """The frames of a location that ends a stack."""
        fid = self.frame(lid)
        if not (self.leaf_inline and self.inline_frames):
            return (fid,)
        return (*self.chain(lid), fid)

    def at(self, lid: int, leaf: bool) -> tuple[int, ...]:
        """The frames of a location, innermost first, at the leaf or not."""
        if leaf:
            return self.leaf(lid)
        fid = self.frame(lid)
        return (*self.chain(lid), fid) if self.inline_frames and self.with_inline() else (fid,)

    def innermost(self, lid: int) -> int:
        """The innermost frame of a location: a call from inlined code is a
        call of the inlined function."""
        fid = self.frame(lid)
        c = self.chain(lid) if self.inline_frames else ()
        return c[0] if c else fid
