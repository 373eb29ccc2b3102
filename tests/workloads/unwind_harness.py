"""Test-side helpers around unwind_capture.c: build it, run it, read its captures,
rebuild the captured process's address space and name frames.

Shared by tests/integration/test_unwind_real.py and bench/unwind_throughput.py;
not part of the package (the collector builds its own address spaces from
perf records). Symbolization uses pyelftools and is deliberately simple.
"""

from __future__ import annotations

import bisect
import os
import platform
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from qtools.daemon.unwind import Mappings, ObjectCFI

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "unwind_capture.c"
MAGIC = 0x31504143574E5551  # "QUNWCAP1"

#: build variants: name -> extra compiler flags (both -O2, neither asks for frame pointers)
VARIANTS = {
    "plain": [],
    # no CFI for the program's own functions: they keep frame pointers instead
    "fp": ["-fno-omit-frame-pointer", "-fno-asynchronous-unwind-tables"],
}


@dataclass(frozen=True)
class Capture:
    """One captured sample: what REGS_USER + STACK_USER would carry, plus backtrace()."""

    kind: int                 # 0: capture_regs in the program, 1: from a SIGPROF ucontext
    regs: tuple[int, ...]     # perf order, mask 0xff0fff
    backtrace: tuple[int, ...]
    stack: bytes

    @property
    def ip(self) -> int:
        return self.regs[8]

    @property
    def sp(self) -> int:
        return self.regs[7]


def compiler() -> str | None:
    """The C compiler to use, or None (tests skip)."""
    return shutil.which(os.environ.get("CC", "cc"))


def supported() -> bool:
    return platform.machine() == "x86_64" and compiler() is not None


def build(outdir: Path, variant: str = "plain") -> Path:
    """Compile unwind_capture.c with `cc -O2` plus the variant's flags."""
    cc = compiler()
    assert cc is not None
    exe = outdir / f"unwind_capture-{variant}"
    subprocess.run([cc, "-O2", *VARIANTS[variant], "-o", str(exe), str(SOURCE), "-lm", "-lpthread"],
                   check=True, capture_output=True, text=True)
    return exe


def run(exe: Path, mode: str, outdir: Path, *args: str | int) -> list[Capture]:
    """Run one mode into outdir and load its captures."""
    outdir.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(exe), mode, str(outdir), *map(str, args)], check=True,
                   capture_output=True, text=True, timeout=120)
    return load_captures(outdir)


def load_captures(outdir: Path) -> list[Capture]:
    caps = []
    for path in sorted(outdir.glob("cap-*.bin")):
        data = path.read_bytes()
        magic, kind, nregs, nbt, stack_len = struct.unpack_from("<5Q", data, 0)
        assert magic == MAGIC, path
        pos = 40
        regs = struct.unpack_from(f"<{nregs}Q", data, pos)
        pos += 8 * nregs
        bt = struct.unpack_from(f"<{nbt}Q", data, pos)
        pos += 8 * nbt
        caps.append(Capture(kind, regs, bt, data[pos:pos + stack_len]))
    return caps


@dataclass(frozen=True)
class MapLine:
    start: int
    end: int
    perms: str
    offset: int
    path: str


def read_maps(outdir: Path) -> list[MapLine]:
    lines = []
    for line in (outdir / "maps").read_text().splitlines():
        parts = line.split(None, 5)
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        lines.append(MapLine(lo, hi, parts[1], int(parts[2], 16), parts[5] if len(parts) > 5 else ""))
    return lines


class ObjectCache:
    """ObjectCFI per object content (here: per path), shared by every address space."""

    def __init__(self) -> None:
        self.by_path: dict[str, ObjectCFI] = {}

    def get(self, path: str, outdir: Path) -> ObjectCFI | None:
        if path == "[vdso]":
            key = str(outdir / "vdso.bin")
            if key not in self.by_path and (outdir / "vdso.bin").exists():
                self.by_path[key] = ObjectCFI.from_bytes((outdir / "vdso.bin").read_bytes())
            return self.by_path.get(key)
        if not path.startswith("/"):
            return None
        if path not in self.by_path:
            self.by_path[path] = ObjectCFI.from_path(path)
        return self.by_path[path]


def address_space(outdir: Path, objects: ObjectCache | None = None) -> Mappings:
    """A Mappings of the captured process's executable mappings."""
    objects = objects or ObjectCache()
    space = Mappings()
    for m in read_maps(outdir):
        if "x" in m.perms:
            space.add(m.start, m.end, m.offset, objects.get(m.path, outdir))
    return space


class Symbolizer:
    """Address -> (object basename, function name or None), from .symtab or .dynsym."""

    def __init__(self, outdir: Path) -> None:
        self.maps = [m for m in read_maps(outdir) if "x" in m.perms]
        self.starts = [m.start for m in self.maps]
        self.tables: dict[str, tuple[list[int], list[tuple[int, int, str]]]] = {}
        self.loads: dict[str, list[tuple[int, int, int]]] = {}

    def _table(self, path: str) -> tuple[list[int], list[tuple[int, int, str]]]:
        if path not in self.tables:
            syms: dict[int, tuple[int, int, str]] = {}
            loads = []
            try:
                with open(path, "rb") as f:
                    elf = ELFFile(f)
                    loads = [(s["p_offset"], s["p_vaddr"], s["p_filesz"]) for s in elf.iter_segments()
                             if s["p_type"] == "PT_LOAD"]
                    for name in (".dynsym", ".symtab"):  # .symtab names win
                        sec = elf.get_section_by_name(name)
                        if isinstance(sec, SymbolTableSection):
                            for s in sec.iter_symbols():
                                if s["st_info"]["type"] == "STT_FUNC" and s["st_value"]:
                                    syms[s["st_value"]] = (s["st_value"], s["st_size"], s.name.split("@")[0])
            except OSError:
                pass
            entries = sorted(syms.values())
            self.tables[path] = ([e[0] for e in entries], entries)
            self.loads[path] = loads
        return self.tables[path]

    def __call__(self, addr: int, is_return: bool = False) -> tuple[str, str | None]:
        look = addr - 1 if is_return else addr
        i = bisect.bisect_right(self.starts, look) - 1
        if i < 0 or look >= self.maps[i].end:
            return "?", None
        m = self.maps[i]
        obj = os.path.basename(m.path) or m.path
        if not m.path.startswith("/"):
            return obj, None
        starts, entries = self._table(m.path)
        off = look - m.start + m.offset
        vaddr = next((off - o + v for o, v, n in self.loads[m.path] if o <= off < o + n), None)
        if vaddr is None:
            return obj, None
        j = bisect.bisect_right(starts, vaddr) - 1
        if j >= 0:
            start, size, name = entries[j]
            if vaddr < start + max(size, 1):
                return obj, name
        return obj, None

    def frames(self, frames: tuple[int, ...], exact: set[int] | None = None) -> list[tuple[str, str | None]]:
        """Name every frame: the leaf and `exact` indices at their pc, the rest at ra - 1."""
        exact = {0} | (exact or set())
        return [self(a, i not in exact) for i, a in enumerate(frames)]
