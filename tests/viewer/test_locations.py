"""Loading keeps locations: addresses with their mappings, interned per
set, no names until a report asks for them."""

from __future__ import annotations

import zlib

from qsynth import MS, Loaded, QBuilder
from scenarios import KALLSYMS, run
from qtools.viewer.model.profile import Profile, View
from qtools.viewer.profile import group
from qtools.viewer.inputs.load import sets_in
from qtools.viewer.profile.build import located as locate
from qtools.viewer.naming.symbols import Symbols
from qtools.viewer.naming.symcache import SymbolCache

KERNEL_PC = 0xFFFFFFFF81004040  # in vfs_read
UNKNOWN = 0x10000


def file_offset(o: Loaded, address: int) -> int:
    """Where ``address`` is in the object file, from its program headers."""
    vaddr = address - o.bias
    for p_offset, p_vaddr, filesz in o.binary.exec_segments:
        if p_vaddr <= vaddr < p_vaddr + filesz:
            return p_offset + vaddr - p_vaddr
    raise AssertionError(f"0x{address:x} is in no executable segment")


def test_stacks_are_locations_with_their_mappings(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie, copy=False)  # no copy: naming it would warn
    q.add_kallsyms(KALLSYMS)
    main = [o.ret("work"), o.ret("main")]
    q.task("calls", 7, 0, stacks=[(3 * MS, [KERNEL_PC, o.at("leaf1")] + main),
                                  (2 * MS, [o.at("leaf1")] + main),
                                  (1 * MS, [UNKNOWN, o.ret("main")])])
    warnings: list[str] = []
    symbols = Symbols(SymbolCache(None), [], warnings.append)
    [sl] = locate(sets_in(str(q.path)), symbols, warnings.append)
    assert not warnings  # nothing was named yet
    locs = [sl.location(lid) for lid in range(len(sl.locations))]
    by_key = {(loc.address, loc.is_return): lid for lid, loc in enumerate(locs)}
    assert len(by_key) == len(locs) == 5  # each distinct address located once
    kernel = locs[by_key[KERNEL_PC, False]]
    assert (kernel.kernel, kernel.copy, kernel.file_offset) == (True, q.kallsyms, None)
    assert kernel.crc == zlib.crc32(KALLSYMS.encode())
    # under a kernel frame, the interrupted user pc is exact: no address-1
    leaf = locs[by_key[o.at("leaf1"), False]]
    assert (leaf.set, leaf.kernel, leaf.object, leaf.copy, leaf.crc, leaf.build_id) == \
        (0, False, "calls", None, None, calls_pie.build_id)
    assert leaf.file_offset == file_offset(o, o.at("leaf1"))
    ret = locs[by_key[o.ret("work"), True]]
    assert ret.file_offset == file_offset(o, o.ret("work") - 1)  # the call instruction
    unknown = locs[by_key[UNKNOWN, False]]
    assert (unknown.kernel, unknown.object, unknown.file_offset) == (False, None, None)
    # stacks keep the data file's counts, as location ids innermost first
    assert sl.stacks == {
        tuple(by_key[k] for k in [(KERNEL_PC, False), (o.at("leaf1"), False),
                                  (o.ret("work"), True), (o.ret("main"), True)]): 3 * MS,
        tuple(by_key[k] for k in [(o.at("leaf1"), False), (o.ret("work"), True),
                                  (o.ret("main"), True)]): 2 * MS,
        (by_key[UNKNOWN, False], by_key[o.ret("main"), True]): 1 * MS}
    # names come when the report is built, through the one symbolizer
    samples = group.samples(Profile(lambda: [sl], View()), [sl], warnings.append, 1000, None)
    assert len(warnings) == 1 and "no copy of" in warnings[0]
    assert {f.name for f in samples.frames} >= {"vfs_read", "0x10000<[unknown]>"}


def test_a_location_names_the_copy_of_its_object(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    q.task("calls", 7, 0, stacks=[(1 * MS, [o.at("leaf1")])])
    symbols = Symbols(SymbolCache(None), [], print)
    [sl] = locate(sets_in(str(q.path)), symbols, print)
    [leaf] = [sl.location(lid) for lid in range(len(sl.locations))]
    assert (leaf.copy, leaf.crc) == (o.ref.file, zlib.crc32(calls_pie.path.read_bytes()))


def test_python_view_of_unnamed_addresses(tmp_path, calls_pie):
    """--python after a mixed view with unnamed addresses: their ids do not
    carry over into the Python frames."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 7, 0, stacks=[(2 * MS, [o.at("leaf1"), o.ret("main")]),
                                         (1 * MS, [UNKNOWN, o.ret("main")])])
    code, out, err = run(q.info_path(name), "--python", "--flat")
    assert (code, err) == (0, "")
    assert "(no Python frame)" in out
