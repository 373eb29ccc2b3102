"""Fixtures of the viewer tests: programs compiled once per session."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from qsynth import Binary, compile_c

SRC = Path(__file__).resolve().parent.parent / "data" / "src"


def _need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Every test gets its own symbol cache and no inherited debug root."""
    monkeypatch.setenv("Q_CACHE_DIR", str(tmp_path / "symcache"))
    monkeypatch.delenv("Q_DEBUG_ROOT", raising=False)
    monkeypatch.delenv("Q_DIR", raising=False)
    monkeypatch.delenv("DEBUGINFOD_URLS", raising=False)


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("build")


@pytest.fixture(scope="session")
def calls_pie(build_dir) -> Binary:
    _need("cc")
    return Binary.read(compile_c(SRC / "calls.c", build_dir / "calls", "-fPIE", "-pie"))


@pytest.fixture(scope="session")
def calls_static_addr(build_dir) -> Binary:
    _need("cc")
    return Binary.read(compile_c(SRC / "calls.c", build_dir / "calls-nopie", "-fno-pie",
                                 "-no-pie"))


@pytest.fixture(scope="session")
def shapes(build_dir) -> Binary:
    _need("c++")
    return Binary.read(compile_c(SRC / "shapes.cpp", build_dir / "shapes", "-fPIE", "-pie",
                                 cxx=True))


@pytest.fixture(scope="session")
def stripped(build_dir) -> tuple[Binary, Binary, Path]:
    """calls, stripped, with its debug info split off; returns (full, stripped, debug)."""
    _need("cc")
    _need("objcopy")
    full = compile_c(SRC / "calls.c", build_dir / "calls-full", "-fPIE", "-pie")
    debug = build_dir / "calls-full.debug"
    out = build_dir / "calls-stripped"
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
    subprocess.run(["objcopy", "--strip-all", f"--add-gnu-debuglink={debug}", str(full),
                    str(out)], check=True)
    return Binary.read(full), Binary.read(out), debug


@pytest.fixture(scope="session")
def stripped_plain(build_dir) -> tuple[Binary, Binary]:
    """calls, and a copy run through ``strip`` (no symbols, no debug link):
    returns (full, stripped)."""
    _need("cc")
    _need("strip")
    full = compile_c(SRC / "calls.c", build_dir / "calls-fde", "-fPIE", "-pie")
    out = build_dir / "calls-fde-stripped"
    subprocess.run(["strip", "-o", str(out), str(full)], check=True)
    return Binary.read(full), Binary.read(out)


@pytest.fixture(scope="session")
def hotline(build_dir) -> Binary:
    """hotline.c built with -g -O2: one hot line in spin(), square() inlined."""
    _need("cc")
    return Binary.read(compile_c(SRC / "hotline.c", build_dir / "hotline", "-g", "-fPIE", "-pie"))


@pytest.fixture(scope="session")
def debug_files() -> list[Path]:
    """This machine's separate debug files, the largest first (skipped if none)."""
    root = Path("/usr/lib/debug/.build-id")
    files = sorted(root.glob("*/*.debug"), key=lambda p: -p.stat().st_size) \
        if root.is_dir() else []
    if not files:
        pytest.skip("no separate debug files here")
    return files
