"""Symbol tables from ELF files built at test time, checked against pyelftools
objects and objdump, plus demangling and the on-disk symbol cache."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qtools.viewer.naming import symcache
from qtools.viewer.naming.demangle import demangle
from qtools.viewer.naming.elfsymbols import ElfProblem, read_elf
from qtools.viewer.naming.symbols import _merge
from qtools.viewer.naming.symtab import RawSymbol, SymbolTable


def _name_at(obj, vaddr):
    hit = obj.symbols.lookup(vaddr)
    return hit[0] if hit else None


@pytest.mark.parametrize("fixture", ["calls_pie", "calls_static_addr"])
def test_every_function_is_found_at_its_start_middle_and_end(fixture, request):
    binary = request.getfixturevalue(fixture)
    obj = read_elf(binary.path)
    assert obj.has_symtab and obj.build_id == binary.build_id
    for name in ("main", "leaf1", "leaf2", "work", "helper", "rec", "ping", "pong", "trig"):
        start, size = binary.functions[name]
        assert _name_at(obj, start) == name
        assert _name_at(obj, start + size - 1) == name
        assert obj.symbols.lookup(start)[1] == start


def test_plt_entries_are_named_at_plt(calls_pie):
    obj = read_elf(calls_pie.path)
    sin_plt = calls_pie.plt("sin")
    assert _name_at(obj, sin_plt) == "sin@plt"
    assert _name_at(obj, sin_plt + 15) == "sin@plt"


def test_segments_translate_file_offsets(calls_pie):
    obj = read_elf(calls_pie.path)
    offset, vaddr, _size = calls_pie.exec_segments[0]
    assert obj.vaddr_of(offset) == vaddr
    assert obj.vaddr_of(offset + 16) == vaddr + 16
    assert obj.vaddr_of(1 << 40) is None


def test_stripped_copy_keeps_dynsym_and_debuglink(stripped):
    _full, bare, debug = stripped
    obj = read_elf(bare.path)
    assert not obj.has_symtab
    assert obj.debuglink is not None and obj.debuglink[0] == debug.name
    assert obj.build_id == bare.build_id
    dbg = read_elf(debug)
    assert dbg.has_symtab and _name_at(dbg, _full.functions["leaf1"][0]) == "leaf1"


def test_cxx_symbols_demangle(shapes):
    obj = read_elf(shapes.path)
    names = {demangle(n) for n in obj.symbols.names}
    assert "total(geo::Shape const&, int)" in names
    assert "geo::Square::area(int) const" in names


@pytest.mark.parametrize("raw, text", [
    ("_ZN3foo3barEv", "foo::bar()"),
    ("_Z5totalRKN3geo5ShapeEi@plt", "total(geo::Shape const&, int)@plt"),
    ("_ZN4core3fmt5write17h0123456789abcdefE", "core::fmt::write"),
    ("_RNvCs1234_7mycrate3foo", "mycrate::foo"),
    ("_Zgarbage", "_Zgarbage"),
    ("_RNvgarbage", "_RNvgarbage"),
    ("main", "main"),
    ("printf@@GLIBC_2.2.5", "printf@@GLIBC_2.2.5"),
])
def test_demangle(raw, text):
    assert demangle(raw) == text


@pytest.mark.parametrize("content", [b"", b"\x7fELF", b"\x7fELF" + b"\xff" * 60,
                                     b"not an elf at all" * 10])
def test_corrupt_objects_raise_elf_problem(tmp_path, content):
    path = tmp_path / "bad.so"
    path.write_bytes(content)
    with pytest.raises(ElfProblem):
        read_elf(path)


def test_truncated_object_never_crashes(calls_pie, tmp_path):
    data = calls_pie.path.read_bytes()
    for cut in (64, 1000, len(data) // 2, len(data) - 100):
        path = tmp_path / f"cut{cut}"
        path.write_bytes(data[:cut])
        try:
            obj = read_elf(path)
        except ElfProblem:
            continue
        obj.symbols.lookup(0x1000)


def test_symbol_table_prefers_global_sized_names():
    table = SymbolTable.build([
        RawSymbol(0x100, 0, 2, "local_alias"), RawSymbol(0x100, 0x20, 0, "__clone"),
        RawSymbol(0x100, 0x20, 0, "clone"), RawSymbol(0x200, 0, 0, "asm_routine"),
        RawSymbol(0x300, 0x10, 0, "last"),
    ])
    assert table.lookup(0x110) == ("clone", 0x100)
    assert table.lookup(0x120) is None  # past clone's size, before asm_routine
    assert table.lookup(0x2ff) == ("asm_routine", 0x200)  # sizeless: to the next symbol
    assert table.lookup(0x30f) == ("last", 0x300)
    assert table.lookup(0x310) is None and table.lookup(0x50) is None


_NAMES = st.text(alphabet="_ab", max_size=5)
_SYMBOLS = st.builds(RawSymbol, st.just(0x100), st.sampled_from([0, 0x10, 0x20]),
                     st.integers(0, 5), _NAMES)


@given(st.lists(_SYMBOLS, min_size=1, max_size=6))
@settings(max_examples=300, derandomize=True)
def test_the_best_name_of_a_start_is_perfs_whatever_the_order(symbols):
    """Of the symbols at one start the table names one by perf's order
    (global, weak, local; sized; fewer leading underscores; shorter; then
    by text), the same whichever order they come in."""
    def rank(s: RawSymbol) -> tuple[int, int, int, int, str]:
        return (s.rank, 0 if s.size else 1, len(s.name) - len(s.name.lstrip("_")),
                len(s.name), s.name)
    named = [s for s in symbols if s.name]
    for order in (symbols, symbols[::-1]):
        table = SymbolTable.build(order)
        if named:
            assert table.names == [min(named, key=rank).name]
        else:
            assert len(table) == 0


_TABLE = st.lists(st.builds(RawSymbol, st.integers(0, 40), st.integers(0, 6), st.integers(0, 5),
                            _NAMES), max_size=12).map(SymbolTable.build)


@given(_TABLE, _TABLE)
@settings(max_examples=300, derandomize=True)
def test_a_stripped_copys_symbols_are_completed_by_its_debug_files(stripped, debug):
    """Every start of either table is named; where both have one, the
    debug file's symbol (global in it, or not) wins, with its own end."""
    merged = _merge(stripped, debug)
    as_raw = [RawSymbol(s, e - s, 1, n) for s, e, n in zip(stripped.starts, stripped.ends,
                                                          stripped.names)]
    as_raw += [RawSymbol(s, e - s, 0, n) for s, e, n in zip(debug.starts, debug.ends, debug.names)]
    expected = SymbolTable.build(as_raw)  # the debug file's rank first, perf's order
    assert (list(merged.starts), list(merged.ends), merged.names) == \
        (list(expected.starts), list(expected.ends), expected.names)


def test_cache_round_trip_and_corruption(tmp_path, calls_pie):
    table = read_elf(calls_pie.path).symbols
    cache = symcache.SymbolCache(str(tmp_path / "c"))
    cache.store("k", table, {"segments": [[0, 0, 1]]})
    got, meta = cache.load("k")
    assert list(got.starts) == list(table.starts) and got.names == table.names
    assert meta["segments"] == [[0, 0, 1]]
    assert cache.load("other") is None
    path = tmp_path / "c" / "k.sym"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert cache.load("k") is None  # a flipped bit is noticed, the entry ignored
    path.write_bytes(b"junk")
    assert cache.load("k") is None


def test_unwritable_cache_is_silently_off(tmp_path, calls_pie):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = symcache.SymbolCache(str(blocker / "sub"))
    cache.store("k", SymbolTable.empty(), {})
    assert cache.load("k") is None and not cache.enabled


def test_cache_is_never_reached_through_another_users_symlink(tmp_path, calls_pie):
    table = read_elf(calls_pie.path).symbols
    if os.geteuid() == 0:  # root: a link of another user is not followed
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (tmp_path / "link").symlink_to(elsewhere)
        os.lchown(tmp_path / "link", 65534, 65534)
        cache = symcache.SymbolCache(str(tmp_path / "link" / "symbols"))
        cache.store("k", table, {})
        assert cache.load("k") is None and list(elsewhere.iterdir()) == []
        cache.close()
    # an entry that is a link to another file is not read
    real = symcache.SymbolCache(str(tmp_path / "c"))
    real.store("k", table, {})
    (tmp_path / "c" / "k.sym").rename(tmp_path / "c" / "real.sym")
    (tmp_path / "c" / "k.sym").symlink_to(tmp_path / "c" / "real.sym")
    fresh = symcache.SymbolCache(str(tmp_path / "c"))
    assert fresh.load("k") is None and fresh.load("real") is None  # its key says "k"
    real.close(), fresh.close()


def test_cache_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("Q_CACHE_DIR", str(tmp_path))
    assert symcache.cache_dir() == str(tmp_path)
    monkeypatch.setenv("Q_CACHE_DIR", "")
    assert symcache.cache_dir() is None
    monkeypatch.delenv("Q_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert symcache.cache_dir() == os.path.join(str(tmp_path), "q-tools", "symbols")


def test_ibt_plt_sec_entries_are_named(build_dir):
    import subprocess
    from pathlib import Path

    from qsynth import Binary, compile_c
    src = Path(__file__).resolve().parent.parent / "data" / "src"
    try:
        path = compile_c(src / "calls.c", build_dir / "calls-ibt", "-fcf-protection=full",
                         "-Wl,-z,ibtplt")
    except subprocess.CalledProcessError:
        pytest.skip("this toolchain cannot build IBT PLTs")
    binary = Binary.read(path)
    obj = read_elf(path)
    assert _name_at(obj, binary.plt("sin")) == "sin@plt"


def test_rust_symbols_demangle(build_dir):
    import shutil
    import subprocess
    from pathlib import Path
    rustc = shutil.which("rustc") or str(Path.home() / ".cargo" / "bin" / "rustc")
    if not Path(rustc).exists():
        pytest.skip("rustc is not installed")
    src = Path(__file__).resolve().parent.parent / "data" / "src" / "rusty.rs"
    out = build_dir / "rusty"
    subprocess.run([rustc, "-O", "-o", str(out), str(src)], check=True, capture_output=True)
    raw = read_elf(out).symbols.names
    assert any(n.startswith(("_ZN5rusty6crunch", "_RNv")) for n in raw)  # mangled in the file
    names = {demangle(n) for n in raw}
    assert "rusty::crunch" in names
    assert "rusty::inner::Widget::spin" in names
