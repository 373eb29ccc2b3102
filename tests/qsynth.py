"""Synthetic `.q` directories for viewer tests, written through qformat.

Small programs are compiled at test time, so every address is real: a test
names functions and this module turns them into runtime addresses through
the binary's own symbol table (read with pyelftools directly, not with the
viewer's reader) and the load address chosen for the synthetic process.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.elffile import ELFFile

from qtools.qformat import (CallCounts, CallStacks, Histogram, Info, MapRange, ObjectRef, QDir,
                            TaskInfo, dump_info, edge_lines, hist_lines, read_info, stack_lines,
                            thread_lines)
from qtools.qformat.info import Threads

PAGE = 0x1000
MS = 1_000_000  # one cpu-clock sample of 1 ms, in nanoseconds


def have_compiler(name: str = "cc") -> bool:
    return shutil.which(name) is not None


def compile_c(src: Path, out: Path, *flags: str, cxx: bool = False) -> Path:
    compiler = "c++" if cxx else "cc"
    subprocess.run([compiler, "-O2", "-fno-inline", "-Wl,--build-id", *flags, "-o", str(out),
                    str(src), "-lm"], check=True, capture_output=True)
    return out


@dataclass
class Binary:
    """An ELF file's functions and executable segments, as a test sees them."""

    path: Path
    pie: bool
    functions: dict[str, tuple[int, int]]  # name -> (st_value, st_size)
    exec_segments: list[tuple[int, int, int]]  # (p_offset, p_vaddr, p_filesz)
    build_id: str | None

    @classmethod
    def read(cls, path: Path) -> Binary:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            funcs: dict[str, tuple[int, int]] = {}
            for secname in (".symtab", ".dynsym"):
                sec = elf.get_section_by_name(secname)
                if sec is None:
                    continue
                for sym in sec.iter_symbols():
                    if sym["st_info"]["type"] in ("STT_FUNC", "STT_LOOS") and sym["st_value"]:
                        funcs.setdefault(sym.name, (sym["st_value"], sym["st_size"]))
            segs = [(s["p_offset"], s["p_vaddr"], s["p_filesz"]) for s in elf.iter_segments()
                    if s["p_type"] == "PT_LOAD" and s["p_flags"] & 1]
            build_id = None
            for sec in elf.iter_sections():
                if sec["sh_type"] == "SHT_NOTE":
                    for note in sec.iter_notes():
                        if note["n_type"] == "NT_GNU_BUILD_ID":
                            build_id = note["n_desc"]
            return cls(path, elf.header["e_type"] == "ET_DYN", funcs, segs, build_id)

    def plt(self, name: str) -> int:
        """Link-time address of ``name@plt``, from objdump (an independent reader)."""
        text = subprocess.run(["objdump", "-d", "-j", ".plt", "-j", ".plt.sec", str(self.path)],
                              check=True, capture_output=True, text=True).stdout
        m = re.search(r"^([0-9a-f]+) <" + re.escape(name) + r"@plt>:", text, re.M)
        assert m, f"no {name}@plt in {self.path}"
        return int(m[1], 16)


@dataclass
class Loaded:
    """A binary placed in a synthetic address space."""

    binary: Binary
    bias: int  # runtime address - link-time address
    ref: ObjectRef

    def at(self, func: str, offset: int = 1) -> int:
        """A runtime address inside ``func`` (a sampled instruction)."""
        value, size = self.binary.functions[func]
        assert size == 0 or offset < size, (func, offset, size)
        return self.bias + value + offset

    def ret(self, func: str) -> int:
        """A return address inside ``func``: address-1 is still in it."""
        value, size = self.binary.functions[func]
        return self.bias + value + (2 if size == 0 or size > 2 else size)

    def link(self, vaddr: int) -> int:
        return self.bias + vaddr


@dataclass
class QBuilder:
    """Writes objects and task sets into one `.q` directory."""

    path: Path
    objects: list[Loaded] = field(default_factory=list)
    kallsyms: str | None = None

    def __post_init__(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def copy(self, src: Path, basename: str | None = None) -> str:
        with QDir.open(self.path) as q, open(src, "rb") as f:
            return q.store_object(f.fileno(), basename or src.name)

    def load(self, binary: Binary, base: int | None = None, name: str | None = None,
             path: str | None = None, copy: bool = True) -> Loaded:
        """Map ``binary`` like the dynamic loader would, at ``base`` for a PIE."""
        bias = (base if base is not None else 0x555555554000) if binary.pie else 0
        maps = []
        for offset, vaddr, filesz in binary.exec_segments:
            start = (bias + vaddr) & ~(PAGE - 1)
            end = (bias + vaddr + filesz + PAGE - 1) & ~(PAGE - 1)
            maps.append(MapRange(start, end - start, offset & ~(PAGE - 1)))
        ref = ObjectRef(name or binary.path.name, self.copy(binary.path) if copy else None,
                        path or str(binary.path), binary.build_id, maps)
        loaded = Loaded(binary, bias, ref)
        self.objects.append(loaded)
        return loaded

    def add_kallsyms(self, text: str) -> str:
        tmp = self.path.parent / "kallsyms.txt"
        tmp.write_text(text)
        self.kallsyms = self.copy(tmp, "kallsyms")
        return self.kallsyms

    def task(self, prog: str, pid: int | None, cpu: int, *, version: int = 0,
             hist: dict[int, int] | None = None,
             stacks: list[tuple[int, list[int]]] | None = None,
             edges: dict[tuple[int, int], int] | None = None,
             event: str = "cpu-clock", unit: str = "seconds", factor: float = 1e-9,
             granularity: float | None = 1e-3, comm: str | None = None,
             cmdline: list[str] | None = None, exe: str | None = None,
             objects: list[Loaded] | None = None, compress: bool = False,
             extra_info: dict | None = None, write_hist: bool = True,
             call_factor: float | None = None, perf_maps: list[str] | None = None,
             pids: list[int] | None = None) -> str:
        """Write one task set; with ``stacks`` and no ``hist``, the hist is their leaves."""
        base = f"{prog}-pid{pid}-cpu{cpu}" if pid is not None else f"{prog}-cpu{cpu}"
        if hist is None and stacks is not None:
            hist = {}
            for w, frames in stacks:
                hist[frames[0]] = hist.get(frames[0], 0) + w
        info = Info(task=TaskInfo(comm=comm or prog, pid=pid, pids=pids, cpu=cpu,
                                  cmdline=cmdline, exe=exe, arch="x86_64",
                                  **(extra_info or {})))
        with QDir.open(self.path) as q:
            hname = f"{base}.hist#{version}"
            info.histogram = Histogram(hname, event, "address", unit, factor, granularity)
            if write_hist:
                q.atomic_write(hname, hist_lines(hist or {}), compress=compress)
            if stacks is not None:
                sname = f"{base}.stack#{version}"
                agg: dict[tuple[int, ...], int] = {}
                for w, frames in stacks:
                    agg[tuple(frames)] = agg.get(tuple(frames), 0) + w
                q.atomic_write(sname, stack_lines(agg), compress=compress)
                info.call_stacks = CallStacks(sname, "fp")
            if edges is not None:
                ename = f"{base}.edge#{version}"
                q.atomic_write(ename, edge_lines(edges), compress=compress)
                info.call_counts = CallCounts(ename, call_factor)
            info.kallsyms = self.kallsyms
            info.perf_maps = list(perf_maps or [])
            info.objects = [o.ref for o in (objects if objects is not None else self.objects)]
            name = f"{base}.info#{version}"
            q.atomic_write(name, dump_info(info).encode())
        return name

    def threads(self, name: str, names: dict[int, str],
                weights: dict[tuple[str, int, tuple[int, ...]], int]) -> str:
        """Give the set ``name`` (an `.info`) a `.threads` file (q:threads):
        ``weights`` by (kind, tid, frames), as qformat.thread_lines takes them."""
        path = self.path / name
        info = read_info(path)
        tname = name.replace(".info#", ".threads#")
        with QDir.open(self.path) as q:
            q.atomic_write(tname, thread_lines(names, weights))
            info.threads = Threads(tname, off_cpu=1, time_unit_label="seconds",
                                   time_conversion_factor=1e-9, min_stack_ns=0, switches=3,
                                   off_cpu_seconds=0.9, cpu_wait_seconds=0.05)
            q.atomic_write(name, dump_info(info).encode())
        return tname

    def info_path(self, name: str) -> str:
        return os.path.join(self.path, name)
