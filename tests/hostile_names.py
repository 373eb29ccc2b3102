"""Hostile names for the escaping tests: a program whose function names,
source file name and file name hold control characters and terminal
escapes (tests/workloads/hostile.c, renamed in its ELF after the build),
and the check that q-view's output holds none of them raw.

An ELF symbol name, a DWARF file name, a thread name (prctl) and a file
name can each be any bytes but NUL (and / in a file name): the names here
hold C0 controls (not tab), DEL, C1 controls (U+0080..U+009F, in UTF-8),
ESC sequences that clear the screen, set colours and set the terminal's
title, and newlines.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

WORKLOAD = Path(__file__).resolve().parent / "workloads" / "hostile.c"
PLACEHOLDER = 32  # bytes of each name hostile.c has to be renamed


def _fit(text: str) -> str:
    """``text`` padded to PLACEHOLDER bytes of UTF-8 (an ELF string is renamed in place)."""
    raw = text.encode()
    assert len(raw) <= PLACEHOLDER and b"\0" not in raw, text
    return text + "_" * (PLACEHOLDER - len(raw))


CLEAR = "\x1b[2J"
TITLE = "\x1b]0;pwned\x07"
RED = "\x1b[31mRED"
# The two functions and the source file, as the ELF and its DWARF name them
LEAF = _fit(f"leaf{CLEAR}{TITLE}\n\x7f\u009b31m\x01")
CALLER = _fit(f"caller\r\x08{RED}\u0085\x0b\x0c\x1bc")
SOURCE = _fit(f"src{CLEAR}\x1b]2;x\x07\n\u009b\x7f") + ".c"
# What a set and its program are called
COMM = f"ev{CLEAR}il\nprog"[:15]
EXE_NAME = f"ev{CLEAR}il\nprog"  # a file name: no / and no NUL, anything else
OBJECT = f"lib{TITLE}\u009d\x05.so"
EXE_PATH = f"/opt/{RED}\x1b[0m/\n{EXE_NAME}"
# Thread names: prctl keeps 15 bytes
THREADS = (f"{CLEAR}{RED}", TITLE, "\u009b2J\x7f\x01x\x1b[1m")
KERNEL_SYMBOL = f"ksym{CLEAR}{TITLE}\u0090"
KERNEL_MODULE = f"mod{RED}"
PYTHON = f"py::fn{CLEAR}\u009c:/app{TITLE}.py"
SOURCE_LINE = f" /* {CLEAR}{TITLE}\u009b2J\x1b[5m */"

_PLACEHOLDERS = {"q_hostile_leaf_00000000000000000": LEAF,
                 "q_hostile_caller_000000000000000": CALLER,
                 "q_hostile_src_000000000000000000.c": SOURCE}


def build(directory: Path, exe_name: str = "hostile") -> Path:
    """hostile.c built with DWARF in ``directory`` (from a source file named
    by its placeholder, so the line table holds it), its names replaced in
    the ELF; the source file is also written under its hostile name, each
    line with an escape sequence in a comment (what --annotate shows).
    Returns the program, named ``exe_name``."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed"
    directory.mkdir(parents=True, exist_ok=True)
    placeholder_source = "q_hostile_src_000000000000000000.c"
    shutil.copyfile(WORKLOAD, directory / placeholder_source)
    built = directory / "hostile.build"
    subprocess.run([cc, "-g", "-O2", "-fno-inline", "-fPIE", "-pie", "-Wl,--build-id",
                    "-o", built.name, placeholder_source, "-lpthread"],
                   cwd=directory, check=True, capture_output=True)
    data = built.read_bytes()
    for placeholder, name in _PLACEHOLDERS.items():
        assert placeholder.encode() in data, placeholder
        data = data.replace(placeholder.encode(), name.encode())
    exe = directory / exe_name
    exe.write_bytes(data)
    exe.chmod(0o755)
    built.unlink()
    lines = WORKLOAD.read_text().splitlines()
    (directory / SOURCE).write_text("".join(f"{line}{SOURCE_LINE}\n" for line in lines))
    return exe


def raw_controls(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on: C0 controls but
    tab and newline (the line separator), DEL, and C1 controls."""
    return sorted({c for c in text
                   if (ord(c) < 0x20 and c not in "\t\n") or 0x7f <= ord(c) <= 0x9f})


def raw_control_bytes(data: bytes) -> list[str]:
    """As ``raw_controls``, of output bytes (which must be UTF-8)."""
    return raw_controls(data.decode("utf-8"))
