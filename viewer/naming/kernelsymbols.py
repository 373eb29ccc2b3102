"""Kernel symbols from a kallsyms copy: as the kernel writes it, without a
table (``read_plain``), or any copy line by line (``read_lines``).

A kallsyms copy is 5-20 MB of text, 100,000+ lines; parsing each line in
Python and building a ``SymbolTable`` costs a third of a second, while a
view names a few hundred kernel addresses. A copy in the kernel's own
layout (``%016x T name`` with an optional tab and ``[module]``, plain
ASCII) is checked by one regular expression; its lines, sorted as bytes,
are then in address order (the addresses have a fixed width), so each
lookup is a bisection over them. The answers are those of the table
``read_lines`` builds from any other copy, line by line: the text
symbols (t, T, w, W) at nonzero addresses, the best name of each start
(``symtab._better``), each reaching to the next start, the last to its own
address only; a symbol's module is that of the last text line of its name
that has one.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from typing import BinaryIO, NamedTuple

from .symtab import MAX_LINE, RawSymbol, SymbolTable, _better, bounded_lines

MAX_TEXT = 256 << 20  # bytes: a larger copy is read line by line, as any other
# A name and a module of at most 32,000 bytes each keep every line under
# MAX_LINE - 1, as the line reader wants them (a copy with longer ones is
# read line by line): the bounds cost the expression nothing, where
# measuring every line afterwards cost a fifth of it.
_LAYOUT = re.compile(rb"(?:[0-9a-f]{16} [A-Za-z] [!-~]{1,32000}+"
                     rb"(?:\t\[[!-Z\\^-~]{1,32000}+\])?+\n)*+"
                     rb"(?:[0-9a-f]{16} [A-Za-z] [!-~]{1,32000}+"
                     rb"(?:\t\[[!-Z\\^-~]{1,32000}+\])?+)?+")
_NONZERO = re.compile(rb"^0*[1-9a-f]", re.M)
_TEXT = frozenset(b"tTwW")
_GLOBAL = frozenset(b"TW")


class KallsymsText:
    """The lines of a kallsyms copy in the kernel's layout, sorted."""

    def __init__(self, lines: list[bytes], modules: dict[bytes, bytes],
                 restricted: bool = False) -> None:
        self.restricted = restricted  # every address zero (kptr_restrict): no lookups
        self.lines = lines  # sorted: by address, as the addresses have one width
        self.modules = modules  # name -> module, of text lines with one
        last = len(lines) - 1
        while last >= 0 and lines[last][17] not in _TEXT:
            last -= 1
        self.last = lines[last][:16] if last >= 0 else b""  # the highest text start

    def symbol(self, address: int) -> tuple[str, int, str | None] | None:
        """(name, start, module or None) of the text symbol holding ``address``."""
        if not 0 < address < 1 << 64:
            return None
        lines = self.lines
        i = bisect_right(lines, b"%016x\xff" % address) - 1
        while i >= 0 and lines[i][17] not in _TEXT:
            i -= 1
        if i < 0:
            return None
        start = lines[i][:16]
        try:
            begin = int(start, 16)
        except ValueError:  # a cache entry vouched for a layout that is not there
            return None
        if begin == 0 or (start == self.last and address != begin):
            return None  # address 0 is no symbol; the last one ends after its start
        best: RawSymbol | None = None
        while i >= 0 and lines[i].startswith(start):
            line = lines[i]
            if line[17] in _TEXT:
                tab = line.find(b"\t")
                name = line[19:tab if tab >= 0 else len(line)].decode("ascii")
                sym = RawSymbol(begin, 0, 0 if line[17] in _GLOBAL else 1, name)
                if best is None or _better(sym, best):
                    best = sym
            i -= 1
        assert best is not None
        module = self.modules.get(best.name.encode("ascii"))
        return best.name, begin, module.decode("ascii") if module is not None else None


def read_plain(data: bytes, checked: bool = False) -> KallsymsText | None:
    """The copy ``data`` for lookups, or None where it is not in the kernel's
    layout (every line, ASCII): that is read line by line. ``checked``: the
    symbol cache says this content's layout was checked (it is keyed by the
    content's SHA-256), so only its ASCII and line lengths are."""
    if len(data) > MAX_TEXT or not data.isascii() \
            or not (checked or _LAYOUT.fullmatch(data)):
        return None
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    # (the layout's expression admits no line under 20 bytes nor over
    # MAX_LINE - 2: only a layout the cache vouched for needs them measured)
    if lines and checked and (max(map(len, lines)) >= MAX_LINE - 1
                              or min(map(len, lines)) < 20):
        return None
    if not _NONZERO.search(data):
        return KallsymsText([], {}, restricted=True)
    modules: dict[bytes, bytes] = {}
    tab = data.find(b"\t")
    while tab >= 0:  # in file order: the last line of a name wins
        begin = data.rfind(b"\n", 0, tab) + 1
        end = data.find(b"\n", tab)
        end = len(data) if end < 0 else end
        if data[begin + 17] in _TEXT:
            modules[data[begin + 19:tab]] = data[tab + 2:end - 1]
        tab = data.find(b"\t", end)
    lines.sort()
    return KallsymsText(lines, modules)


class KallsymsLines(NamedTuple):
    """A kallsyms copy as ``read_lines`` reads it."""

    table: SymbolTable  # the text symbols
    modules: dict[int, str]  # start -> module, of symbols that have one
    restricted: bool  # every address zero (kptr_restrict): no lookups
    malformed: int  # lines left out


def read_lines(f: BinaryIO) -> KallsymsLines:
    """Any kallsyms copy, line by line: the text symbols (t, T, w, W) at
    nonzero addresses, each reaching to the next start; a symbol's module
    that of the last text line of its name that has one. The answers of
    ``KallsymsText`` are checked against these."""
    raw: list[RawSymbol] = []
    modules: dict[str, str] = {}
    restricted, bad = True, 0
    for line in bounded_lines(f):
        fields = line.split()
        if len(fields) < 3 or len(fields[1]) != 1:
            bad += 1
            continue
        try:
            address = int(fields[0], 16)
        except ValueError:
            bad += 1
            continue
        if address:
            restricted = False
        if fields[1] not in (b"t", b"T", b"w", b"W"):
            continue
        name = fields[2].decode("utf-8", "replace")
        raw.append(RawSymbol(address, 0, 0 if fields[1] in b"TW" else 1, name))
        if len(fields) > 3:
            modules[name] = fields[3].decode("utf-8", "replace").strip("[]")
    if restricted:
        return KallsymsLines(SymbolTable.empty(), {}, True, bad)
    table = SymbolTable.build(raw)
    by_start = {s: modules[n] for s, n in zip(table.starts, table.names) if n in modules}
    return KallsymsLines(table, by_start, False, bad)
