"""JIT symbol maps (``/tmp/perf-PID.map``, perf's format): one
``START SIZE NAME`` line per piece of generated code, hexadecimal."""

from __future__ import annotations

from typing import BinaryIO

from .symtab import RawSymbol, SymbolTable, bounded_lines


def read_perf_map(f: BinaryIO) -> tuple[SymbolTable, int]:
    """The symbols of a perf map, and how many of its lines were malformed."""
    raw: list[RawSymbol] = []
    bad = 0
    for line in bounded_lines(f):
        parts = line.rstrip(b"\r\n").split(None, 2)
        try:
            start, size = int(parts[0], 16), int(parts[1], 16)
            name = parts[2].decode("utf-8", "replace").replace("\0", "")
        except (ValueError, IndexError):
            bad += 1
            continue
        raw.append(RawSymbol(start, max(size, 1), 0, name))
    return SymbolTable.build(raw), bad
