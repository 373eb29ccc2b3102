"""Unwinding real stacks of a real `cc -O2` program (no frame pointers).

tests/workloads/unwind_capture.c is built at test time and captures what a
perf sample would carry (registers in perf's order, 16 KiB of stack from SP)
together with glibc's backtrace() at the same point: libgcc's DWARF unwinder,
an independent oracle. The unwinder's frames must equal backtrace()'s frame
for frame, name the program's functions in the expected order, and reach a
root (_start, or clone3 for a thread).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workloads"))
import unwind_harness as H  # noqa: E402

from qtools.daemon.unwind import Unwinder  # noqa: E402

pytestmark = pytest.mark.skipif(not H.supported(), reason="needs x86_64 and a C compiler")

LIBC = "libc.so.6"


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("unwind-capture")


@pytest.fixture(scope="module")
def exe(build_dir) -> Path:
    return H.build(build_dir, "plain")


@pytest.fixture(scope="module")
def exe_fp(build_dir) -> Path:
    return H.build(build_dir, "fp")


@pytest.fixture(scope="module")
def objects() -> H.ObjectCache:
    return H.ObjectCache()


def unwind_all(outdir: Path, caps: list[H.Capture], objects: H.ObjectCache):
    """Unwind every capture with the fast and the generic walker; they must agree."""
    space = H.address_space(outdir, objects)
    fast, generic = Unwinder(), Unwinder(fast=False)
    results = []
    for c in caps:
        r = fast.unwind(space, c.regs, c.stack)
        assert generic.unwind(H.address_space(outdir, objects), c.regs, c.stack) == r
        results.append(r)
    return results


def names(sym: H.Symbolizer, frames, exact=None) -> list[str]:
    """'function' for the program's frames, 'libc.so.6' / 'libm.so.6' for library frames."""
    out = []
    for obj, name in sym.frames(frames, exact):
        out.append(name if obj.startswith("unwind_capture") else obj)
    return out


def collapse(seq: list[str]) -> list[str]:
    """Runs of the same library collapse to one entry (their inner frames are libc internals)."""
    out: list[str] = []
    for s in seq:
        if not (out and out[-1] == s and s.endswith(".so.6")):
            out.append(s)
    return out


def unwind_one(exe, build_dir, objects, mode: str):
    """One capture of ``mode``, unwound to the root, and its directory. The
    workload calls backtrace() right after the capture, in the same function:
    glibc's frames from the caller on are ours."""
    out = build_dir / mode
    caps = H.run(exe, mode, out)
    assert len(caps) == 1
    (r,) = unwind_all(out, caps, objects)
    assert r.complete and r.reason == "root"
    assert r.frames[2:] == caps[0].backtrace[1:]
    return r, out


def test_direct_call_chain_through_qsort(exe, build_dir, objects):
    r, out = unwind_one(exe, build_dir, objects, "direct")
    sym = H.Symbolizer(out)
    got = names(sym, r.frames)
    assert collapse(got) == ["capture_regs", "leaf3", "cmp", LIBC, "level2", "level1", "main", LIBC,
                             "_start"]
    assert "qsort_r" in [n for _, n in sym.frames(r.frames)]   # through libc's exported qsort_r


def test_signal_handler_stack_crosses_restore_rt(exe, build_dir, objects):
    r, out = unwind_one(exe, build_dir, objects, "signal")
    sym = H.Symbolizer(out)
    # frame 3 is __restore_rt (libc); the frame after it is the interrupted pc, named exactly
    interrupted = 4
    got = names(sym, r.frames, exact={interrupted})
    assert got[:4] == ["capture_regs", "hlevel", "on_alarm", LIBC]
    tail = got[interrupted:]
    if tail[0] == "libm.so.6":        # interrupted inside sin()
        tail = tail[1:]
    assert tail == ["spin", "spin_outer", "main", LIBC, LIBC, "_start"]


def test_thread_stack_ends_at_clone3(exe, build_dir, objects):
    r, out = unwind_one(exe, build_dir, objects, "thread")
    got = collapse(names(H.Symbolizer(out), r.frames))
    assert got == ["capture_regs", "leaf3", "cmp", LIBC, "level2", "level1", "worker", LIBC]
    # start_thread then clone3: two libc frames, the last one a root by CFI
    assert names(H.Symbolizer(out), r.frames)[-2:] == [LIBC, LIBC]


def test_perf_like_samples_at_any_pc(exe, build_dir, objects):
    """SIGPROF samples of a p-fan-like loop 3 calls deep: leaves anywhere, libm included."""
    out = build_dir / "samples"
    caps = H.run(exe, "samples", out, 300, 3)
    assert len(caps) == 300
    results = unwind_all(out, caps, objects)
    sym = H.Symbolizer(out)
    in_libm = 0
    for c, r in zip(caps, results):
        assert r.complete and r.reason == "root", r
        # backtrace() ran in the handler: after __restore_rt it lists the interrupted frames
        k = c.backtrace.index(c.ip)
        assert r.frames == c.backtrace[k:]
        got = names(sym, r.frames)
        in_libm += got[0] == "libm.so.6"
        # descend(0) tail-calls pfan: three descend frames
        p = got.index("pfan")
        assert got[p:] == ["pfan", "descend", "descend", "descend", "main", LIBC, LIBC, "_start"]
        # above pfan: nothing, one fNN, or fNN's callees in libm (or a PLT stub, unnamed)
        head = got[:p]
        assert all(h in ("libm.so.6", None) or (h or "").startswith("f0") for h in head), got
        assert len(head) == 0 or head[-1].startswith("f0") or head == [None], got
    # some samples landed in libm, and unwound through it: libm has about 80% of
    # this loop's time, so none of 300 does with probability 0.2^300
    assert in_libm > 0


def test_frame_pointer_fallback_for_code_without_cfi(exe_fp, build_dir, objects):
    """Program built with frame pointers but no unwind tables: its frames use the fallback."""
    out = build_dir / "direct-fp"
    caps = H.run(exe_fp, "direct", out)
    prog = objects.get(str(exe_fp), out)
    assert prog is not None and prog.has_cfi           # crt files still bring _start's CFI
    (r,) = unwind_all(out, caps, objects)
    assert r.complete and r.reason == "root"
    got = collapse(names(H.Symbolizer(out), r.frames))
    assert got == ["capture_regs", "leaf3", "cmp", LIBC, "level2", "level1", "main", LIBC, "_start"]


def test_signal_handler_samples_at_any_interrupted_pc(exe, build_dir, objects):
    """A SIGPROF handler captures its own stack: every capture crosses __restore_rt into a
    frame interrupted at an arbitrary pc (looked up exactly, not at pc - 1)."""
    out = build_dir / "handler"
    caps = H.run(exe, "handler", out, 200, 2)
    assert len(caps) == 200
    results = unwind_all(out, caps, objects)
    sym = H.Symbolizer(out)
    for c, r in zip(caps, results):
        assert r.complete and r.reason == "root", r
        assert r.frames[2:] == c.backtrace[1:]
        got = names(sym, r.frames)
        assert got[:4] == ["capture_regs", "hlevel", "on_prof_handler", LIBC]
        assert got[-6:] == ["descend", "descend", "main", LIBC, LIBC, "_start"]


def test_vdso_image_has_usable_cfi(exe, build_dir):
    """The collector unwinds [vdso] frames from its own copy of the vdso (no file to open)."""
    out = build_dir / "direct"
    if not (out / "vdso.bin").exists():
        H.run(exe, "direct", out)
    from qtools.daemon.unwind import ObjectCFI

    cfi = ObjectCFI.from_bytes((out / "vdso.bin").read_bytes())
    assert cfi.source == "eh_frame_hdr" and cfi.fde_count > 0
    vdso = next(m for m in H.read_maps(out) if m.path == "[vdso]")
    assert vdso.offset == 0
    for start in sorted({cfi._base + loc for loc in cfi._locs}):  # noqa: SLF001
        row = cfi.row_at(start)
        assert row is not None and row.cfa_reg == 7 and row.cfa_offset == 8   # entry: CFA = rsp + 8
        # what the unwinder computes for a pc at map start + start (map offset 0)
        assert cfi.vaddr_of_offset(start) == start
