"""The shortcuts of a first view (empty symbol cache) answer as the long ways do.

kallsyms copies in the kernel's layout are looked up in their sorted lines
rather than in a table built line by line; ``.debug_aranges`` is read alone;
DWARF sections are inflated only as far as read; ``--comm`` parses only
the `.info` files whose text may name the command. Each is checked against
the way it replaces (pyelftools for the DWARF: tests/dwarf_oracle.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qsynth import QBuilder
from tests.conftest import q_view
from qtools.viewer.inputs.select import Selection
from qtools.qformat import parse_set
from qtools.viewer.naming import aranges
from qtools.viewer.naming.kernelsymbols import read_plain
from qtools.viewer.naming.lazydwarf import plain_sections, section_stream
from qtools.viewer.naming.symbols import Symbols
from qtools.viewer.naming.symcache import SymbolCache

SRC = Path(__file__).resolve().parent.parent / "data" / "src"


def _slow(path: Path):
    """What the line-by-line reader makes of a kallsyms copy."""
    return Symbols(SymbolCache(None), [], [].append)._load_kallsyms(str(path), str(path))


def _answers(path: Path, addresses: list[int]) -> tuple[list, list]:
    slow = _slow(path)
    fast = read_plain(path.read_bytes())
    assert fast is not None and fast.restricted == slow.restricted
    want = []
    for a in addresses:
        hit = None if slow.restricted else slow.table.lookup(a)
        want.append((hit[0], hit[1], slow.modules.get(hit[1])) if hit else None)
    return want, [None if fast.restricted else fast.symbol(a) for a in addresses]


_names = st.sampled_from(["a", "b", "_a", "__a", "ab", "do_x", "zz", "_", "x.cold"])
_line = st.tuples(st.sampled_from([0, 0x1000, 0x1001, 0x2000, 0x2008, 0x3000, 0xFFFF0000]),
                  st.sampled_from("tTwWdDbr"), _names,
                  st.sampled_from([None, None, "ext4", "kvm"]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_line, max_size=25))
def test_sorted_kallsyms_answers_as_the_table(tmp_path, lines):
    path = tmp_path / "kallsyms"
    path.write_text("".join(f"{a:016x} {t} {n}" + (f"\t[{m}]" if m else "") + "\n"
                            for a, t, n, m in lines))
    addresses = sorted({a + d for a, *_ in lines for d in (-1, 0, 1, 7)} | {1, 0x10000000})
    want, got = _answers(path, [a for a in addresses if a > 0])
    assert got == want


@pytest.mark.skipif(not os.access("/proc/kallsyms", os.R_OK), reason="no /proc/kallsyms")
def test_this_machines_kallsyms_answers_as_the_table(tmp_path):
    path = tmp_path / "kallsyms"
    path.write_bytes(Path("/proc/kallsyms").read_bytes())
    if read_plain(path.read_bytes()) is None:
        pytest.skip("this kernel's kallsyms is not in the layout the shortcut takes")
    starts = [int(line.split()[0], 16) for line in path.read_text().splitlines()[::50]]
    addresses = sorted({s + d for s in starts for d in (-1, 0, 1, 64) if s + d > 0})
    want, got = _answers(path, addresses)
    assert got == want


@pytest.mark.parametrize("text", ["", "ffffffff81000000 T a\nbad line\n",
                                  "ffffffff81000000 T a\r\n", "ffffffff81000000 T a [m]\n",
                                  "FFFFFFFF81000000 T a\n", "81000000 T a\n"])
def test_other_layouts_are_left_to_the_line_reader(text):
    plain = read_plain(text.encode())
    assert plain is None or (plain.restricted and not text)


@pytest.mark.parametrize("length", [31_000, 40_000, 70_000])
def test_a_copy_with_long_names_is_read_by_one_reader_or_the_other(tmp_path, length):
    """Names up to 32,000 bytes pass the layout's check, which keeps every
    line under the line reader's limit; a copy with a longer one is left
    to the line reader."""
    path = tmp_path / "kallsyms"
    path.write_text(f"ffffffff81000000 T {'a' * length}\nffffffff81000100 t b\n")
    if length > 32_000:
        assert read_plain(path.read_bytes()) is None
        return
    want, got = _answers(path, [0xFFFF_FFFF_8100_0010, 0xFFFF_FFFF_8100_0100])
    assert got == want and got[0][0] == "a" * length


def _built(tmp_path: Path, name: str, *flags: str) -> Path:
    out = tmp_path / name
    try:
        subprocess.run(["cc", "-g", "-O2", *flags, "-o", str(out), str(SRC / "hotline.c")],
                       check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no C compiler")
    return out


def _debug_files() -> list[Path]:
    root = Path("/usr/lib/debug/.build-id")
    return sorted(root.glob("*/*.debug"))[:6] if root.is_dir() else []


@pytest.mark.parametrize("flags", [(), ("-gz",), ("-gdwarf-4", "-gz"), ("-gz=zlib-gnu",)])
def test_lazy_sections_hold_what_pyelftools_inflates_whole(tmp_path, flags):
    """Each DWARF section read in pieces, as dwarfread reads it, holds the
    bytes pyelftools inflates at once."""
    paths = [_built(tmp_path, "hotline", *flags)] + _debug_files()
    for path in paths:
        with open(path, "rb") as f1, open(path, "rb") as f2:
            dw = ELFFile(f1).get_dwarf_info(relocate_dwarf_sections=False)
            header, sections = plain_sections(f2)
            compared = 0
            for name, sec in sections.items():
                theirs = getattr(dw, name[1:] + "_sec", None) if name.startswith(".debug_") \
                    else None
                if theirs is None:
                    continue
                expected = theirs.stream.getvalue()
                stream = section_stream(f2, header, sec)
                pieces = []
                while chunk := stream.read(4093):  # (not a multiple of anything)
                    pieces.append(chunk)
                assert b"".join(pieces) == expected, (path, name)
                stream.seek(len(expected) // 3)
                assert stream.read(100) == expected[len(expected) // 3:][:100]
                compared += 1
            assert compared >= 4, path


@pytest.mark.parametrize("flags", [("-gdwarf-5",), ("-gdwarf-4", "-gz")])
def test_aranges_read_alone_match_pyelftools(tmp_path, flags):
    from dwarf_oracle import aranges as their_aranges, dwarf_of
    paths = [_built(tmp_path, "hotline", *flags)]
    paths += _debug_files()
    for path in paths:
        fast = aranges.read_index(str(path))
        with open(path, "rb") as f:
            slow = their_aranges(dwarf_of(f))
        assert slow and fast.ranges == slow and not fast.complete


def test_comm_text_test_keeps_every_set_that_may_match(tmp_path):
    sel = Selection(comm="p-fan")
    test = sel.text_test(parse_set("other-pid1-cpu0"))
    assert test is not None
    assert test(b'(q:info \'((q:comm . "p-fan")))')
    assert test(b"(q:info '((q:comm . p-fan)))")
    assert test(b'(q:info \'((q:comm . "p\\x2dfan")))')  # an escape: parsed to be sure
    assert not test(b'(q:info \'((q:comm . "sh") (q:cmdline . ("/x/p-fan 40"))))')
    assert sel.text_test(parse_set("p-fan-pid1-cpu0")) is None  # the name matches already
    assert Selection().text_test(parse_set("p-fan-pid1-cpu0")) is None


def test_comm_finds_a_set_whose_task_renamed_itself(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    renamed = q.task("calls", 1, 0, hist={o.at("leaf1"): 3})
    q.task("other", 2, 0, hist={o.at("leaf2"): 5})
    info = Path(q.info_path(renamed))
    info.write_text(info.read_text().replace('(q:comm . "calls")', '(q:comm . "worker")'))
    assert '"worker"' in info.read_text()
    result = q_view(str(q.path), "--comm", "worker", "--flat", "--no-cache")
    assert result.returncode == 0, result.stderr
    assert "leaf1" in result.stdout and "leaf2" not in result.stdout
