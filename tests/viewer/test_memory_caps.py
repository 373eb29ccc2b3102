"""What a crafted `.q` can cost q-view's memory: compressed DWARF sections
that inflate a thousandfold in object copies, and millions of distinct
addresses. Each runs through the installed q-view with its address space
limited (RLIMIT_AS) to less than the first reading of these inputs took
(a 32-bit copy's 1 MB ``.zdebug_info``: 1.08 GB; a 64-bit copy's 2 MB
``.debug_info``: 6.3 GB; 1.25 million distinct addresses: 1.6 GB), and
must end with its report, or one line naming the cap, never with a
traceback or a MemoryError.
"""

from __future__ import annotations

import resource
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from qsynth import MS, Binary, QBuilder, compile_c
from tests.conftest import q_view

SRC = Path(__file__).resolve().parent.parent / "data" / "src"
MIB = 1 << 20
AS_LIMIT = 1 << 30  # bytes of address space q-view gets: a report of these takes < 100 MB


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def _view(*args: str) -> subprocess.CompletedProcess:
    return q_view("--no-cache", *args, preexec_fn=_limited)


def zlib_bomb(zero_mib: int, head: bytes = b"") -> bytes:
    """A zlib stream of ``head`` and then ``zero_mib`` MiB of zeros, about
    a thousandth of that in size: one compressed MiB of zeros, repeated
    (a full flush ends each on a byte and forgets what came before)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(bytes(MIB)) + c.flush(zlib.Z_FULL_FLUSH)
    last = c.flush()
    adler = zlib.adler32(head)
    a, b = adler & 0xFFFF, adler >> 16
    b = (b + zero_mib * MIB * a) % 65521  # zeros add nothing to a, a to b each
    return b"\x78\xda" + first + block * zero_mib + last + struct.pack(">I", b << 16 | a)


def test_the_bomb_is_what_it_says():
    data = zlib.decompress(zlib_bomb(3, b"head"))
    assert data == b"head" + bytes(3 * MIB)


def _with_section(binary: Path, section: str, content: bytes, tmp_path: Path) -> Path:
    """A copy of ``binary`` whose ``section`` holds ``content`` (objcopy)."""
    blob = tmp_path / "section.bin"
    blob.write_bytes(content)
    out = tmp_path / (binary.name + "-bomb")
    subprocess.run(["objcopy", f"--update-section={section}={blob}", str(binary), str(out)],
                   check=True, capture_output=True)
    return out


def _report_of(binary: Path, tmp_path: Path, *functions: str) -> str:
    """A `.q` of one set, its one stack in ``functions`` of ``binary``
    (the leaf first)."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(Binary.read(binary))
    frames = [o.at(functions[0])] + [o.ret(f) for f in functions[1:]]
    return q.info_path(q.task("bomb", 7, 0, stacks=[(5 * MS, frames)]))


def _warned_once(result: subprocess.CompletedProcess, *words: str) -> str:
    """The report was shown whole, with one warning that has ``words``."""
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("q-view: warning: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert "Flat profile" in result.stdout and "work [" in result.stdout
    return lines[0]


@pytest.fixture(scope="module")
def nolibc32(tmp_path_factory) -> Path:
    """nolibc.c as a 32-bit x86 program, its DWARF compressed the GNU way
    (``.zdebug_*``), as the 32-bit copies pyelftools once read whole."""
    if shutil.which("cc") is None or shutil.which("objcopy") is None:
        pytest.skip("no C compiler or objcopy")
    out = tmp_path_factory.mktemp("m32") / "nolibc32"
    built = subprocess.run(["cc", "-m32", "-nostdlib", "-static", "-g", "-O1", "-fno-inline",
                            "-Wl,--build-id", "-o", str(out), str(SRC / "nolibc.c")],
                           capture_output=True, check=False)
    if built.returncode:
        pytest.skip("the compiler does not build 32-bit x86 programs")
    subprocess.run(["objcopy", "--compress-debug-sections=zlib-gnu", str(out)], check=True)
    return out


@pytest.mark.parametrize("says", [64 << 30, 64 << 10])
def test_a_zdebug_bomb_in_a_32_bit_copy_is_not_inflated(nolibc32, tmp_path, says):
    """1 GiB of zeros in a 1 MB ``.zdebug_info``. Saying 64 GiB, it is not
    read at all (the warning names the cap); saying 64 KiB, no more than
    64 KiB is inflated. The unwind table (``.eh_frame``) is still read:
    the stack reaches ``_start``, a root."""
    bomb = b"ZLIB" + struct.pack(">Q", says) + zlib_bomb(1024)
    copy = _with_section(nolibc32, ".zdebug_info", bomb, tmp_path)
    result = _view(_report_of(copy, tmp_path, "work", "leaf", "_start"))
    line = _warned_once(result, copy.name, "source lines are unknown")
    if says > 1 << 30:
        assert "over the limit of 1 GiB (debug-size)" in line
        assert "--limits debug-size=N" in line
    assert "100.0% of user stacks reach a root frame" in result.stdout


@pytest.fixture(scope="module")
def calls_gz(tmp_path_factory) -> Path:
    """calls.c, 64-bit, its DWARF compressed the ELF way (SHF_COMPRESSED)."""
    if shutil.which("cc") is None or shutil.which("objcopy") is None:
        pytest.skip("no C compiler or objcopy")
    return compile_c(SRC / "calls.c", tmp_path_factory.mktemp("gz") / "calls-gz", "-g",
                     "-gz=zlib")


def test_a_compressed_debug_info_bomb_in_a_64_bit_copy_is_not_read(calls_gz, tmp_path):
    """A 2 MB ``.debug_info`` whose Elf64_Chdr says 2 GiB, and whose one
    unit says it is 2 GiB long (reading it took 6.3 GB): over the cap, it
    is not read; the lines of that object are unknown, the rest is shown."""
    unit = struct.pack("<IHIB", 0x7FFF_FFF0, 4, 0, 8)  # DWARF 4: length, version, abbrevs, 8
    chdr = struct.pack("<IIQQ", 1, 0, 2 << 30, 1)  # ELFCOMPRESS_ZLIB, 2 GiB, aligned 1
    copy = _with_section(calls_gz, ".debug_info", chdr + zlib_bomb(2048, unit), tmp_path)
    result = _view(_report_of(copy, tmp_path, "leaf1", "work", "main"))
    _warned_once(result, copy.name, ".debug_info says it inflates to 2147483648 bytes",
                 "over the limit of 1 GiB (debug-size)", "--limits debug-size=N")


def test_the_debug_size_cap_is_the_users(calls_gz, tmp_path):
    """--limits debug-size lowers the cap (here under calls' own
    ``.debug_info``); by default the same copy's lines are read."""
    info = _report_of(calls_gz, tmp_path, "leaf1", "work", "main")
    shown = _view("--by", "line", "--flat", info)
    assert (shown.returncode, shown.stderr) == (0, "") and "calls.c:" in shown.stdout
    lowered = _view("--by", "line", "--flat", "--limits", "debug-size=64", info)
    assert lowered.returncode == 0 and "calls.c:" not in lowered.stdout
    assert "over the limit of 64 bytes (debug-size)" in lowered.stderr


def _distinct_unknown(q: QBuilder, pid: int, stacks: int, depth: int, base: int) -> str:
    """A set of ``stacks`` stacks of ``depth`` distinct addresses in no object."""
    return q.task("crafted", pid, 0, compress=True, stacks=[
        (MS, [base + i * depth + j for j in range(depth)]) for i in range(stacks)])


def test_a_million_distinct_addresses_stop_at_the_cap(tmp_path):
    """25,000 stacks of 50 distinct addresses (1.25 million, 2.6 MB
    gzipped): refused once the 1,000,001st is met, before any is named,
    with one line naming the file and the cap."""
    q = QBuilder(tmp_path / ".q")
    name = _distinct_unknown(q, 1, 25_000, 50, 0x10000)
    result = _view(q.info_path(name))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"q-view: {q.info_path(name).replace('.info#', '.stack#')}: more than 1000000 "
        "distinct addresses, over the limit of 1000000 (addresses); raise it with "
        "--limits addresses=N"]


def test_the_distinct_frames_of_a_merge_are_capped_too(tmp_path):
    """Two sets under the cap each, over it together: the merged profile
    holds a frame per distinct unknown address."""
    q = QBuilder(tmp_path / ".q")
    for pid in (1, 2):
        _distinct_unknown(q, pid, 60, 10, 0x10000 * pid)
    result = _view(str(q.path), "--comm", "crafted", "--limits", "addresses=1000")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert "more than 1000 distinct frames in the profile" in line
    assert "--limits addresses=N" in line
    result = _view(str(q.path), "--comm", "crafted", "--limits", "addresses=1200")
    assert (result.returncode, result.stderr) == (0, "")
