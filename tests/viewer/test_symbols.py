"""Symbolization of runtime addresses from the copies in a `.q` directory."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from qsynth import QBuilder
from qtools.qformat import read_info
from qtools.viewer.naming.addrspace import AddressSpace
from qtools.viewer.naming.symbols import KERNEL_OBJECT, KERNEL_UNKNOWN, Symbols
from qtools.viewer.naming.symcache import SymbolCache

KALLSYMS = """\
ffffffff81000000 T _stext
ffffffff81001000 T do_syscall_64
ffffffff81002000 t entry_SYSCALL_64_after_hwframe
ffffffff81003000 D some_data
ffffffff81004000 T vfs_read
ffffffffc0001000 t ext4_file_read_iter\t[ext4]
ffffffffc0002000 T ext4_end\t[ext4]
"""


def _space(q: QBuilder, name: str, warnings: list[str], roots: list[str] | None = None,
           cache: str | None = None):
    symbols = Symbols(SymbolCache(cache), roots or [], warnings.append)
    return AddressSpace(symbols, str(q.path), read_info(q.info_path(name)))


def test_pie_addresses_resolve_through_maps_and_segments(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie, base=0x7F1234560000)
    name = q.task("calls", 1, 0, hist={o.at("leaf1"): 1})
    warnings: list[str] = []
    space = _space(q, name, warnings)
    for func in ("main", "leaf1", "work", "ping"):
        loc = space.lookup(o.at(func))
        assert (loc.name, loc.object, loc.kernel) == (func, "calls", False)
        assert loc.start == calls_pie.functions[func][0]
    assert not warnings


def test_return_addresses_are_looked_up_at_address_minus_one(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, hist={})
    space = _space(q, name, [])
    # The first byte of leaf2 as a return address belongs to the function before it.
    at_leaf2 = o.at("leaf2", 0)
    assert space.lookup(at_leaf2).name == "leaf2"
    before = space.lookup(at_leaf2 - 1)
    assert before.name != "leaf2"  # leaf1 or the padding after it
    returned = space.lookup(at_leaf2, is_return=True)
    assert returned.name != "leaf2" and returned.start == before.start
    assert space.lookup(o.ret("work"), is_return=True).name == "work"


def test_unknown_addresses_name_their_object_and_offset(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, hist={})
    space = _space(q, name, [])
    start, size = calls_pie.functions["main"]
    # Padding after a sized function: in the mapping, in no symbol.
    gaps = [v for v in range(start + size, start + size + 16)
            if all(not (s <= v < s + z) for s, z in calls_pie.functions.values())]
    if gaps:
        loc = space.lookup(o.link(gaps[0]))
        assert loc.name == f"0x{gaps[0]:x}<calls>" and loc.object == "calls"
    outside = 0x10000
    loc = space.lookup(outside)
    assert loc.name == "0x10000<[unknown]>" and loc.start is None


def test_stripped_copy_is_symbolized_through_build_id_debug_file(tmp_path, stripped):
    full, bare, debug = stripped
    root = tmp_path / "debugroot"
    target = root / ".build-id" / bare.build_id[:2] / (bare.build_id[2:] + ".debug")
    target.parent.mkdir(parents=True)
    shutil.copy(debug, target)
    q = QBuilder(tmp_path / ".q")
    o = q.load(bare, path="/nonexistent/calls-stripped")
    name = q.task("calls", 1, 0, hist={})
    warnings: list[str] = []
    leaf1 = o.link(full.functions["leaf1"][0] + 1)
    assert _space(q, name, warnings).lookup(leaf1).name.startswith("0x")  # no debug info
    assert _space(q, name, warnings, [str(root)]).lookup(leaf1).name == "leaf1"
    assert not warnings


def test_stripped_copy_finds_debuglink_file_in_the_q_directory(tmp_path, stripped):
    full, bare, debug = stripped
    q = QBuilder(tmp_path / ".q")
    o = q.load(bare, path="/nonexistent/calls-stripped")
    shutil.copy(debug, q.path / debug.name)
    name = q.task("calls", 1, 0, hist={})
    loc = _space(q, name, []).lookup(o.link(full.functions["pong"][0] + 1))
    assert loc.name == "pong"


def test_debuglink_to_another_file_is_not_used(tmp_path, stripped, calls_static_addr):
    full, bare, debug = stripped
    q = QBuilder(tmp_path / ".q")
    o = q.load(bare, path="/nonexistent/calls-stripped")
    # Another program's debug info under the expected name: crc and build-id differ.
    subprocess.run(["objcopy", "--only-keep-debug", str(calls_static_addr.path),
                    str(q.path / debug.name)], check=True)
    name = q.task("calls", 1, 0, hist={})
    loc = _space(q, name, []).lookup(o.link(full.functions["pong"][0] + 1))
    assert loc.name.startswith("0x")


def test_cache_entry_for_stripped_copy_is_refreshed_when_debug_info_appears(tmp_path, stripped):
    full, bare, debug = stripped
    q = QBuilder(tmp_path / ".q")
    o = q.load(bare, path="/nonexistent/calls-stripped")
    name = q.task("calls", 1, 0, hist={})
    cache = str(tmp_path / "cache")
    leaf1 = o.link(full.functions["leaf1"][0] + 1)
    assert _space(q, name, [], cache=cache).lookup(leaf1).name.startswith("0x")
    shutil.copy(debug, q.path / debug.name)
    assert _space(q, name, [], cache=cache).lookup(leaf1).name == "leaf1"


def test_missing_and_changed_copies_warn_once_and_stay_unknown(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, hist={})
    copy = q.path / o.ref.file
    os.unlink(copy)
    copy.write_bytes(calls_pie.path.read_bytes() + b"tampered")
    warnings: list[str] = []
    space = _space(q, name, warnings)
    assert space.lookup(o.at("main")).name.startswith("0x")
    assert space.lookup(o.at("work")).name.startswith("0x")
    assert len(warnings) == 1 and "content changed" in warnings[0]
    os.unlink(copy)
    warnings.clear()
    space = _space(q, name, warnings)
    space.lookup(o.at("main"))
    space.lookup(o.at("leaf1"))
    assert len(warnings) == 1 and "missing" in warnings[0]


def test_corrupt_copy_warns_and_stays_unknown(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    bogus = tmp_path / "bogus.so"
    bogus.write_bytes(b"\x7fELF" + b"\x02\x01\x01" + b"\xff" * 200)
    o = q.load(calls_pie)
    o.ref.file = q.copy(bogus)
    name = q.task("calls", 1, 0, hist={})
    warnings: list[str] = []
    loc = _space(q, name, warnings).lookup(o.at("main"))
    assert loc.name.startswith("0x") and loc.object == "calls"
    assert len(warnings) == 1 and "ELF" in warnings[0]


def test_kernel_addresses_resolve_through_kallsyms(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    q.load(calls_pie)
    q.add_kallsyms(KALLSYMS)
    name = q.task("calls", 1, 0, hist={})
    space = _space(q, name, [])
    loc = space.lookup(0xFFFFFFFF81001234)
    assert (loc.name, loc.object, loc.kernel) == ("do_syscall_64", KERNEL_OBJECT, True)
    assert space.lookup(0xFFFFFFFF81004001, is_return=True).name == "vfs_read"
    # data symbols do not end a function: some_data is not text
    assert space.lookup(0xFFFFFFFF81003010).name == "entry_SYSCALL_64_after_hwframe"
    loc = space.lookup(0xFFFFFFFFC0001010)
    assert (loc.name, loc.object) == ("ext4_file_read_iter", "[ext4]")
    assert space.lookup(0xFFFF888000000000).name.startswith("0xffff888000000000<")


def test_restricted_kallsyms_leaves_kernel_frames_unknown(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    q.load(calls_pie)
    q.add_kallsyms(re.sub(r"^[0-9a-f]{16}", "0" * 16, KALLSYMS, flags=re.M))
    name = q.task("calls", 1, 0, hist={})
    loc = _space(q, name, []).lookup(0xFFFFFFFF81001234)
    assert (loc.name, loc.object, loc.kernel) == (KERNEL_UNKNOWN, KERNEL_OBJECT, True)


def test_jit_perf_map_names_addresses_in_no_object(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    q.load(calls_pie)
    perf_map = tmp_path / "perf-77.map"
    perf_map.write_text("7f0000001000 40 jitted_loop\n7f0000002000 10 _ZN3foo3barEv\n"
                        "garbage line\n")
    copy = q.copy(perf_map, "perf-77.map")
    name = q.task("calls", 77, 0, hist={}, perf_maps=[copy])
    warnings: list[str] = []
    space = _space(q, name, warnings)
    assert space.lookup(0x7F0000001020).name == "jitted_loop"
    assert space.lookup(0x7F0000002001).name == "foo::bar()"
    assert space.lookup(0x7F0000001040).name.startswith("0x")
    assert len(warnings) == 1 and "malformed" in warnings[0]


def test_vdso_object_uses_the_vdso_copy(tmp_path, calls_pie):
    # Any ELF serves as a vdso here: what matters is that [vdso] finds q:vdso.
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie, name="[vdso]", copy=False)
    vdso = q.copy(calls_pie.path, "vdso")
    name = q.task("calls", 1, 0, hist={}, extra_info=None)
    info_path = Path(q.info_path(name))
    text = info_path.read_text().replace("(q:object", f'(q:vdso "{vdso}")\n(q:object', 1)
    info_path.write_text(text)
    loc = _space(q, name, []).lookup(o.at("leaf2"))
    assert (loc.name, loc.object) == ("leaf2", "[vdso]")


@pytest.mark.parametrize("debuglink", ["../../etc/passwd", "/etc/passwd"])
def test_debuglink_with_a_path_is_refused(tmp_path, calls_pie, debuglink):
    from qtools.qformat import ObjectRef
    symbols = Symbols(SymbolCache(None), [str(tmp_path)], [].append)
    ref = ObjectRef("x", None, "/usr/lib/x")
    # (even where the copy were the very file at its path)
    assert symbols._debug_candidates(str(tmp_path), ref, None, (debuglink, 0),
                                     lambda: True) == []


def test_a_debuglink_beside_the_objects_path_is_read_only_where_the_copy_is_that_file(
        tmp_path, stripped):
    """The archive names the object's path: a debug file beside it is used
    only where the file there is the copy itself (owned by the user or root,
    nobody else may write it), not beside any path an archive names."""
    full, bare, debug = stripped
    pong = full.functions["pong"][0] + 1
    names = {}
    for where, content in (("same", bare.path), ("other", full.path)):
        folder = tmp_path / where
        folder.mkdir()
        shutil.copy(content, folder / "calls-stripped")
        shutil.copy(debug, folder / debug.name)
        q = QBuilder(tmp_path / where / ".q")
        o = q.load(bare, path=str(folder / "calls-stripped"))
        name = q.task("calls", 1, 0, hist={})
        names[where] = _space(q, name, []).lookup(o.link(pong)).name
    assert names["same"] == "pong" and names["other"].startswith("0x"), names


def test_debuglink_candidates_stay_inside_their_directories(tmp_path, stripped):
    from qtools.qformat import ObjectRef
    _full, _bare, debug = stripped
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(debug, outside / debug.name)
    root, qdir = tmp_path / "debugroot", tmp_path / ".q"
    (root / "usr" / "lib").mkdir(parents=True)
    qdir.mkdir()
    symbols = Symbols(SymbolCache(None), [str(root)], [].append)
    link = (debug.name, 0)
    # a recorded path with .. does not lead out of the debug root
    escape = ObjectRef("x", None, "/" + "/".join([".."] * 8) + f"{outside}/x")
    assert symbols._debug_candidates(str(qdir), escape, None, link, lambda: False) == []
    # nor does a symlink in the debug root or in the .q directory
    (root / "usr" / "lib" / debug.name).symlink_to(outside / debug.name)
    (qdir / debug.name).symlink_to(outside / debug.name)
    ref = ObjectRef("x", None, "/usr/lib/x")
    assert symbols._debug_candidates(str(qdir), ref, None, link, lambda: False) == []
    # a file of the debug root is found
    (root / "usr" / "lib" / debug.name).unlink()
    shutil.copy(debug, root / "usr" / "lib" / debug.name)
    found = symbols._debug_candidates(str(qdir), ref, None, link, lambda: False)
    assert [(c.path, c.local) for c in found] == [(str(root / "usr" / "lib" / debug.name), True)]


def test_object_without_a_copy_warns_once(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie, copy=False)
    name = q.task("calls", 1, 0, hist={})
    warnings: list[str] = []
    space = _space(q, name, warnings)
    assert space.lookup(o.at("main")).name.startswith("0x")
    space.lookup(o.at("leaf1"))
    assert len(warnings) == 1 and "no copy" in warnings[0]


def test_unknown_return_addresses_show_the_address_in_the_stack(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    q.load(calls_pie)
    name = q.task("calls", 1, 0, hist={})
    space = _space(q, name, [])
    assert space.lookup(0x20000, is_return=True).name == "0x20000<[unknown]>"
    assert space.lookup(0x1FFFF).name == "0x1ffff<[unknown]>"
    assert space.lookup(0x20000).name == "0x20000<[unknown]>"


def test_recorded_mappings_win_over_the_kernel_range(tmp_path, calls_pie):
    from qtools.qformat import MapRange, ObjectRef
    q = QBuilder(tmp_path / ".q")
    q.load(calls_pie)
    vsyscall = ObjectRef("[vsyscall]", None, None, None,
                         [MapRange(0xFFFFFFFFFF600000, 0x1000, 0)])
    q.objects.append(type(q.objects[0])(q.objects[0].binary, 0, vsyscall))
    name = q.task("calls", 1, 0, hist={})
    loc = _space(q, name, []).lookup(0xFFFFFFFFFF600010)
    assert (loc.object, loc.kernel) == ("[vsyscall]", False)


def test_overlong_perf_map_lines_are_malformed_not_fatal(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    q.load(calls_pie)
    perf_map = tmp_path / "perf-5.map"
    perf_map.write_bytes(b"7f0000001000 40 " + b"x" * 200_000 + b"\n7f0000002000 10 ok\n")
    name = q.task("calls", 5, 0, hist={}, perf_maps=[q.copy(perf_map, "perf-5.map")])
    warnings: list[str] = []
    space = _space(q, name, warnings)
    assert space.lookup(0x7F0000002004).name == "ok"
    assert len(warnings) == 1 and "malformed" in warnings[0]


# Kernels whose addresses no single constant covers: x86-64 with 5-level
# paging, arm64 before 5.4 (image at 0xffff0000...), arm64 with 52-bit VA.
KALLSYMS_ELSEWHERE = """\
ff11000000400000 T five_level_text
ff11000000401000 T five_level_end
ffff000008080000 T arm64_old_text
ffff000008090000 T arm64_old_end
fff0000000400000 T arm64_52_text
fff0000000401000 T arm64_52_end
"""


def _space_of(q: QBuilder, name: str, arch: str, kernel_from: int | None):
    info = read_info(q.info_path(name))
    info.task.arch, info.task.kernel_from = arch, kernel_from
    return AddressSpace(Symbols(SymbolCache(None), [], [].append), str(q.path), info)


@pytest.mark.parametrize("arch,address,name", [
    ("x86_64", 0xFF11_0000_0040_0010, "five_level_text"),
    ("aarch64", 0xFFFF_0000_0808_0010, "arm64_old_text"),
    ("aarch64", 0xFFF0_0000_0040_0010, "arm64_52_text"),
])
def test_kernel_from_says_where_the_kernel_begins(tmp_path, calls_pie, arch, address, name):
    q = QBuilder(tmp_path / ".q")
    q.load(calls_pie)
    q.add_kallsyms(KALLSYMS_ELSEWHERE)
    set_name = q.task("calls", 1, 0, hist={address: 1})
    # written by the collector: exact
    space = _space_of(q, set_name, arch, address)
    loc = space.lookup(address)
    assert (loc.name, loc.object, loc.kernel) == (name, KERNEL_OBJECT, True)
    assert space.is_kernel(address) and not space.is_kernel(address - 1)
    # an older file, without q:kernel-from: the architecture's fallback,
    # low enough for every kernel layout and above every user address
    loc = _space_of(q, set_name, arch, None).lookup(address)
    assert (loc.name, loc.object, loc.kernel) == (name, KERNEL_OBJECT, True)
    assert not _space_of(q, set_name, arch, None).is_kernel((1 << 52) - 1)


def test_below_kernel_from_is_user_space(tmp_path, calls_pie):
    # The collector's decision wins over the architecture's fallback.
    q = QBuilder(tmp_path / ".q")
    q.load(calls_pie)
    q.add_kallsyms(KALLSYMS)
    name = q.task("calls", 1, 0, hist={})
    space = _space_of(q, name, "x86_64", 0xFFFF_FFFF_8100_0000)
    assert space.lookup(0xFFFF_FFFF_8100_1234).name == "do_syscall_64"
    loc = space.lookup(0xFFFF_8880_0000_0000)
    assert (loc.object, loc.kernel) == ("[unknown]", False)


def test_the_lowest_kernel_address_as_a_return_address_is_the_kernels(tmp_path, calls_pie):
    """q:kernel-from is the lowest kernel address the set holds: when that is
    a return address (an interrupt entry's, in the middle of a kernel stack)
    it is looked up at address-1, below q:kernel-from, yet it is kernel code:
    kernel or user is decided on the address recorded."""
    q = QBuilder(tmp_path / ".q")
    q.load(calls_pie)
    q.add_kallsyms(KALLSYMS)
    name = q.task("calls", 1, 0, hist={})
    lowest = 0xFFFF_FFFF_8100_1000  # do_syscall_64's first byte, as a return address
    space = _space_of(q, name, "x86_64", lowest)
    for loc in (space.lookup(lowest, is_return=True), space.lookup(lowest + 8, True)):
        assert (loc.object, loc.kernel) == (KERNEL_OBJECT, True), loc
    assert space.lookup(lowest, is_return=True).name == "_stext"  # the call at its end
    assert space.locate(lowest, is_return=True).kernel
    assert not space.locate(lowest - 1).kernel  # below it, a leaf: user space


def test_the_lines_of_an_objects_other_functions_are_named_for_it(tmp_path, calls_pie):
    """q:other-functions (the collector's own sets, docs/q-format.md 5.2):
    each of those addresses stands for its object's rare functions, and is
    named so, in its object, whatever symbol lies there; other addresses
    are named as ever. The `.info` holds them in hex and reads them back."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie, base=0x7F1234560000)
    q.add_kallsyms(KALLSYMS)
    first = o.ref.maps[0].addr
    kernel = 0xFFFFFFFF81000000
    lines = [first, kernel]
    name = q.task("q-syscollect", 7, 0, hist={o.at("leaf1"): 1, first: 5, kernel: 3},
                  extra_info={"extra": {"q:other-functions": lines}})
    text = (tmp_path / ".q" / name).read_text()
    assert f"(q:other-functions . (#x{first:x} #x{kernel:x}))" in text
    assert read_info(q.info_path(name)).task.extra["q:other-functions"] == lines
    space = _space(q, name, [])
    got = space.lookup(first)
    assert (got.name, got.object, got.kernel, got.start) == ("(other functions)", "calls", False,
                                                          None)
    assert (space.lookup(kernel).name, space.lookup(kernel).object) == ("(other functions)",
                                                                        KERNEL_OBJECT)
    assert space.lookup(o.at("leaf1")).name == "leaf1"
    assert space.lookup(kernel + 0x1234).name == "do_syscall_64"
    for bad in ("0x1", [str(first)], [1.5]):  # not a list of addresses: named as usual
        name = q.task("q-syscollect", 8, 0, hist={first: 5},
                      extra_info={"extra": {"q:other-functions": bad}})
        assert _space(q, name, []).lookup(kernel).name == "_stext"
