"""A unit's line program read from its bytes (DWARF 6.2, versions 2 to 5).

The rows q-view keeps (address, file, line, end of sequence) and how the
program names its files, as dwarfread.py reads the unit they belong to,
files defined in the program (``DW_LNE_define_file``) and VLIW programs
(several operations per instruction: the address advances by whole
instructions) included. Damage raises ``Unsupported``.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator, NamedTuple

from qtools.qformat.objects.ehframe import sleb, uleb

from .dwarfread import FORMS, SUPPLEMENTARY, Unit, Unsupported, initial_length, int_at

MAX_FILES = 100_000  # directories and files of one line program

DW_LNCT_PATH, DW_LNCT_DIRECTORY_INDEX = 1, 2
Row = tuple[int, int, int, bool]  # a line program's row: address, file, line, end of sequence


def line_program(unit: Unit) -> tuple[Callable[[int], str], Iterator[Row]] | None:
    """How the unit's line program names its files, and its rows; None
    where the unit has none."""
    got = unit.top.attrs.get("DW_AT_stmt_list")
    if got is None:
        return None
    if not isinstance(got[1], int):
        raise Unsupported(f"DW_AT_stmt_list of form {got[0]}")
    return _LineProgram(unit, got[1]).read()


class _LineProgram:
    def __init__(self, unit: Unit, offset: int) -> None:
        self.unit, self.df, self.order = unit, unit.df, unit.df.order
        head = self.df.read(".debug_line", offset, min(12, self.df.size(".debug_line") - offset))
        length, pos = initial_length(head, self.order)
        self.data = self.df.read(".debug_line", offset, pos + length)
        self.offset_size = 8 if pos == 12 else 4
        self.pos = pos

    def read(self) -> tuple[Callable[[int], str], Iterator[Row]]:
        data, order = self.data, self.order
        pos = self.pos
        version = int_at(data, pos, 2, order)
        pos += 2
        if not 2 <= version <= 5:
            raise Unsupported(f"line program version {version}")
        addr_size = self.unit.addr_size
        if version >= 5:
            addr_size = data[pos]
            pos += 2  # address size, segment selector size
        header_length = int_at(data, pos, self.offset_size, order)
        pos += self.offset_size
        program = pos + header_length
        min_inst = data[pos]
        max_ops = data[pos + 1] if version >= 4 else 1
        pos += 2 if version >= 4 else 1
        default_is_stmt, line_base, line_range, opcode_base = data[pos:pos + 4]
        line_base -= 256 if line_base >= 128 else 0
        pos += 4
        if max_ops == 0 or line_range == 0 or opcode_base == 0:
            raise Unsupported("a damaged line program header")
        lengths = data[pos:pos + opcode_base - 1]
        pos += opcode_base - 1
        if version >= 5:
            dirs, pos = self._entries(pos)
            files, pos = self._entries(pos)
            directories = [d[0] for d in dirs]
        else:
            directories, files = [], []
            while data[pos]:
                end = data.index(b"\0", pos)
                directories.append(data[pos:end].decode("utf-8", "replace"))
                pos = end + 1
            pos += 1
            while data[pos]:
                entry, pos = _file_entry(data, pos, len(data))
                files.append(entry)
            if len(files) > MAX_FILES:
                raise Unsupported("too many files")
        comp = self.unit.top.attrs.get("DW_AT_comp_dir")
        # (a directory in dwz's supplementary file is not known: paths stay relative)
        comp_dir = self.unit.text(comp) if comp is not None and comp[0] not in SUPPLEMENTARY \
            else ""
        names = file_namer(version, comp_dir, directories, files)
        rows = _rows(data, program, len(data), order, addr_size,
                     _Advance(min_inst, max_ops, line_base, line_range, opcode_base), lengths,
                     files)
        return names, rows

    def _entries(self, pos: int) -> tuple[list[tuple[str, int]], int]:
        """A DWARF 5 directory or file table: (path, directory index) each."""
        data = self.data
        count = data[pos]
        pos += 1
        formats: list[tuple[int, str]] = []
        for _ in range(count):
            kind, pos = uleb(data, pos, len(data))
            number, pos = uleb(data, pos, len(data))
            formats.append((kind, FORMS.get(number, "")))
        n, pos = uleb(data, pos, len(data))
        if n > MAX_FILES:
            raise Unsupported("too many files")
        out: list[tuple[str, int]] = []
        for _ in range(n):
            path, directory = "", 0
            for kind, form in formats:
                value, pos = self.unit.value(data, form, pos, 0, self.offset_size)
                if pos > len(data):
                    raise Unsupported("a truncated line program header")
                if kind == DW_LNCT_PATH:
                    path = self.unit.text((form, value))
                elif kind == DW_LNCT_DIRECTORY_INDEX:
                    directory = value
            out.append((path, directory))
        return out, pos


def file_namer(version: int, comp_dir: str, directories: list[str],
               files: list[tuple[str, int]]) -> Callable[[int], str]:
    """How a line program of ``version`` names its files by index, as
    paths: ``files`` are (name, directory index), index 0 the unit's own
    directory in DWARF 5, the first of ``directories`` in earlier ones."""
    names: dict[int, str] = {}

    def file_name(index: int) -> str:
        name = names.get(index)
        if name is None:
            i = index if version >= 5 else index - 1
            if not 0 <= i < len(files):
                name = "?"
            else:
                base, d = files[i]
                if version >= 5:
                    directory = directories[d] if 0 <= d < len(directories) else ""
                else:
                    directory = directories[d - 1] if 1 <= d <= len(directories) else comp_dir
                if directory and not os.path.isabs(directory) and comp_dir:
                    directory = os.path.join(comp_dir, directory)
                name = os.path.normpath(os.path.join(directory, base))
            names[index] = name
        return name

    return file_name


class _Advance(NamedTuple):
    """How a line program's opcodes advance the address and the line."""

    min_inst: int
    max_ops: int  # operations per instruction: 1 but on VLIW machines
    line_base: int
    line_range: int
    opcode_base: int


def _rows(data: bytes, pos: int, end: int, order: Any, addr_size: int, adv: _Advance,
          lengths: bytes, files: list[tuple[str, int]]) -> Iterator[Row]:
    """The rows of a line program (DWARF 6.2.5): each row's address, file,
    line and whether it ends a sequence. A file the program defines is
    appended to ``files``."""
    address, op_index, file, line = 0, 0, 1, 1
    min_inst, max_ops, line_base, line_range, opcode_base = adv

    def advanced(operations: int) -> tuple[int, int]:
        """(address, op_index) after ``operations`` operations (6.2.5.1)."""
        if max_ops == 1:
            return address + operations * min_inst, 0
        total = op_index + operations
        return address + min_inst * (total // max_ops), total % max_ops
    const_ops = (255 - opcode_base) // line_range
    # what each special opcode (most of a program) advances, looked up
    ops_of = [0] * opcode_base + [(op - opcode_base) // line_range
                                  for op in range(opcode_base, 256)]
    lines_of = [0] * opcode_base + [line_base + (op - opcode_base) % line_range
                                    for op in range(opcode_base, 256)]
    bytes_of = [n * min_inst for n in ops_of]
    while pos < end:
        op = data[pos]
        pos += 1
        if op >= opcode_base:
            if max_ops == 1:
                address += bytes_of[op]
            else:
                address, op_index = advanced(ops_of[op])
            line += lines_of[op]
            yield address, file, line, False
        elif op == 0:  # extended
            length, pos = uleb(data, pos, end)
            if length == 0 or pos + length > end:
                raise Unsupported("a damaged line program")
            sub, operand = data[pos], pos + 1
            pos += length
            if sub == 1:  # end_sequence
                yield address, file, line, True
                address, op_index, file, line = 0, 0, 1, 1
            elif sub == 2:  # set_address
                if length - 1 != addr_size:
                    raise Unsupported("an address of another size")
                address, op_index = int_at(data, operand, addr_size, order), 0
            elif sub == 3:  # define_file: a file entry as the header's (DWARF 2 to 4)
                files.append(_file_entry(data, operand, pos)[0])
                if len(files) > MAX_FILES:
                    raise Unsupported("too many files")
        elif op == 1:  # copy
            yield address, file, line, False
        elif op == 2:  # advance_pc
            value, pos = uleb(data, pos, end)
            address, op_index = advanced(value)
        elif op == 3:  # advance_line
            value, pos = sleb(data, pos, end)
            line += value
        elif op == 4:  # set_file
            file, pos = uleb(data, pos, end)
        elif op == 8:  # const_add_pc
            address, op_index = advanced(const_ops)
        elif op == 9:  # fixed_advance_pc
            if pos + 2 > end:
                raise Unsupported("a damaged line program")
            address, op_index = address + int_at(data, pos, 2, order), 0
            pos += 2
        else:  # set_column, negate_stmt, basic_block, prologue, epilogue, isa, newer ones
            for _ in range(lengths[op - 1] if op - 1 < len(lengths) else 0):
                pos = uleb(data, pos, end)[1]


def _file_entry(data: bytes, pos: int, end: int) -> tuple[tuple[str, int], int]:
    """A DWARF 2 to 4 file entry (its name and directory index; its time
    and size are not kept), and where the next begins."""
    nul = data.find(b"\0", pos, end)
    if nul < 0:
        raise Unsupported("a damaged file entry")
    name = data[pos:nul].decode("utf-8", "replace")
    directory, pos = uleb(data, nul + 1, end)
    pos = uleb(data, uleb(data, pos, end)[1], end)[1]  # time, size
    return (name, directory), pos
