"""q-view on a real process: p-fan's own /proc/PID/maps and objects.

Until q-syscollect exists, this writes the `.q` exactly as the collector
will: the executable mappings of the running process become q:object maps,
the mapped files (and the vdso, and kallsyms) are copied with
QDir.store_object, and sampled addresses are real runtime addresses of
known functions, computed here from each object's symbol table and the
address the process really loaded it at. q-view must then name them.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from qtools.qformat import (CallStacks, Histogram, Info, MapRange, ObjectRef, QDir, TaskInfo,
                            dump_info, hist_lines, stack_lines)
from qtools.viewer.commands.view import main

WORKLOAD = Path(__file__).resolve().parent.parent / "workloads" / "p-fan.c"
MS = 1_000_000


@dataclass
class Mapped:
    name: str
    path: str
    maps: list[MapRange]
    file: Path  # where its bytes are (the vdso is dumped from memory)

    def runtime(self, symbol: str, offset: int = 1) -> int:
        """Runtime address of ``symbol`` + ``offset``: vaddr -> file offset
        (PT_LOAD) -> the mapping that holds that offset."""
        with open(self.file, "rb") as f:
            elf = ELFFile(f)
            value = None
            for secname in (".symtab", ".dynsym"):
                sec = elf.get_section_by_name(secname)
                if sec is None:
                    continue
                for sym in sec.iter_symbols():
                    if sym.name == symbol and sym["st_value"]:
                        value = sym["st_value"]
                        break
                if value is not None:
                    break
            assert value is not None, f"{symbol} not in {self.path}"
            file_offset = None
            for seg in elf.iter_segments():
                if seg["p_type"] == "PT_LOAD" and \
                        seg["p_vaddr"] <= value < seg["p_vaddr"] + seg["p_filesz"]:
                    file_offset = value - seg["p_vaddr"] + seg["p_offset"]
        assert file_offset is not None
        for m in self.maps:
            if m.offset <= file_offset < m.offset + m.size:
                return m.addr + file_offset - m.offset + offset
        raise AssertionError(f"{symbol} is not in an executable mapping of {self.path}")


def _executable_mappings(pid: int, scratch: Path) -> dict[str, Mapped]:
    found: dict[str, Mapped] = {}
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or "x" not in fields[1]:
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            path = fields[5].strip()
            if path == "[vdso]":
                dump = scratch / "vdso.so"
                try:
                    with open(f"/proc/{pid}/mem", "rb") as mem:
                        mem.seek(start)
                        dump.write_bytes(mem.read(end - start))
                except OSError:
                    continue
                found[path] = Mapped(path, path, [MapRange(start, end - start, 0)], dump)
            elif path.startswith("/"):
                entry = found.setdefault(path, Mapped(os.path.basename(path), path, [],
                                                      Path(path)))
                entry.maps.append(MapRange(start, end - start, int(fields[2], 16)))
    return found


def _copy(q: QDir, path: Path, basename: str) -> str:
    with open(path, "rb") as f:
        return q.store_object(f.fileno(), basename)


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out, err), out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def pfan_q(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    work = tmp_path_factory.mktemp("pfan")
    exe = work / "p-fan"
    subprocess.run(["cc", "-O2", "-fno-inline", "-o", str(exe), str(WORKLOAD), "-lm"],
                   check=True)
    proc = subprocess.Popen([str(exe), "5"])
    try:
        deadline = time.monotonic() + 5
        mapped: dict[str, Mapped] = {}
        while time.monotonic() < deadline:  # until the dynamic loader has mapped libm
            mapped = _executable_mappings(proc.pid, work)
            if any(m.name.startswith("libm") for m in mapped.values()):
                break
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait()
    qdir = work / ".q"
    with QDir.open(qdir, create=True) as q:
        objects = []
        for m in mapped.values():
            copy = _copy(q, m.file, "vdso" if m.name == "[vdso]" else m.name)
            objects.append(ObjectRef(m.name, copy, None if m.name == "[vdso]" else m.path,
                                     None, m.maps))
        kallsyms = _copy(q, Path("/proc/kallsyms"), "kallsyms")
        yield q, qdir, proc.pid, mapped, objects, kallsyms


def _by_name(mapped: dict[str, Mapped], prefix: str) -> Mapped:
    return next(m for m in mapped.values() if m.name.startswith(prefix))


def _first_kernel_text_symbol() -> tuple[int, str] | None:
    with open("/proc/kallsyms") as f:
        for line in f:
            addr, kind, name = line.split()[:3]
            if kind in "tT" and int(addr, 16) and not name.startswith("_"):
                return int(addr, 16), name
    return None


def test_q_view_names_p_fan_libm_vdso_and_kernel_functions(pfan_q):
    q, qdir, pid, mapped, objects, kallsyms = pfan_q
    pfan, libm = mapped[str(next(p for p in mapped if p.endswith("/p-fan")))], \
        _by_name(mapped, "libm")
    libc = _by_name(mapped, "libc")
    root = [pfan.runtime("main", 40), libc.runtime("__libc_start_main", 100),
            pfan.runtime("_start", 30)]
    # What each function costs, in ms; f05..f09 call into libm.
    own = {f"f0{i}": 1 + i for i in range(10)}
    stacks: dict[tuple[int, ...], int] = {}
    for func, ms in own.items():
        stacks[(pfan.runtime(func), *root)] = ms * MS
    for func, callee, ms in (("f06", "sin", 20), ("f07", "cos", 30), ("f08", "cos", 5),
                             ("f08", "sin", 5), ("f09", "tan", 12)):
        key = (libm.runtime(callee), pfan.runtime(func, 4), *root)
        stacks[key] = stacks.get(key, 0) + ms * MS
    stacks[(pfan.runtime("main"), *root[1:])] = 7 * MS
    if "[vdso]" in mapped:
        vdso = mapped["[vdso]"]
        stacks[(vdso.runtime("__vdso_clock_gettime"), pfan.runtime("main", 80),
                *root[1:])] = 3 * MS
    kernel = _first_kernel_text_symbol()
    if kernel:
        stacks[(kernel[0] + 1, pfan.runtime("main", 90), *root[1:])] = 2 * MS
    hist: dict[int, int] = {}
    for frames, w in stacks.items():
        hist[frames[0]] = hist.get(frames[0], 0) + w
    name = f"p-fan-pid{pid}-cpu0"
    info = Info(task=TaskInfo(comm="p-fan", exe=str(pfan.path), pid=pid, cpu=0,
                              cmdline=[str(pfan.path), "5"], arch=os.uname().machine),
                histogram=Histogram(f"{name}.hist#0", "cpu-clock", "address", "seconds", 1e-9,
                                    0.001),
                call_stacks=CallStacks(f"{name}.stack#0", "fp"),
                kallsyms=kallsyms,
                vdso=next((o.file for o in objects if o.name == "[vdso]"), None),
                objects=objects)
    q.atomic_write(f"{name}.hist#0", hist_lines(hist))
    q.atomic_write(f"{name}.stack#0", stack_lines(stacks))
    q.atomic_write(f"{name}.info#0", dump_info(info).encode())

    code, out, err = _run(str(qdir / f"{name}.info"), "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    got = {(f["name"], f["object"]): round(f["self"] * 1000, 6) for f in doc["functions"]
           if f["self"]}
    for func, ms in own.items():
        assert got[(func, "p-fan")] == ms
    assert got[("main", "p-fan")] == 7
    assert got[("sin", libm.name)] == 25
    assert got[("cos", libm.name)] == 35
    assert got[("tan", libm.name)] == 12
    incl = {f["name"]: round(f["inclusive"] * 1000, 6) for f in doc["functions"]}
    assert incl["f08"] == own["f08"] + 10 and incl["f07"] == own["f07"] + 30
    assert incl["_start"] == incl["main"] == round(doc["total"] * 1000, 6)
    if "[vdso]" in mapped:
        assert got[("__vdso_clock_gettime", "[vdso]")] == 3
    if kernel:  # kallsyms readable (not all zero): the kernel frame has its name
        kernel_rows = [(f["name"], f["self"]) for f in doc["functions"] if f["kernel"]]
        assert kernel_rows == [(kernel[1], pytest.approx(0.002))]
    assert doc["stack_quality"]["share"] == 1.0

    code, text, err = _run(str(qdir / f"{name}.info"))
    assert code == 0 and f"Command: {pfan.path} 5" in text
    assert "Stack quality: 100.0% of user stacks reach a root frame" in text
