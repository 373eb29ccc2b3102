"""Debug files fetched by build-id from a real debuginfod server (elfutils'),
started here on a loopback port and serving a debug file made at test time."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from qsynth import Binary
from tests.conftest import q_view
from test_lines import hot_q, source_line

READY_WITHIN = 120  # seconds for the server to index the debug file


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def stripped_hotline(tmp_path, hotline) -> tuple[Binary, Path, Binary]:
    """hotline stripped, its debug file alone in a directory to serve, and
    the unstripped build (where the line table puts the test's lines)."""
    served = tmp_path / "served"
    served.mkdir()
    debug = served / "hotline.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(hotline.path), str(debug)], check=True)
    bare_path = tmp_path / "hotline-stripped"
    subprocess.run(["objcopy", "--strip-all", str(hotline.path), str(bare_path)], check=True)
    bare = Binary.read(bare_path)
    bare.functions.update(hotline.functions)
    return bare, served, hotline


@pytest.fixture
def server(tmp_path, stripped_hotline):
    """A debuginfod serving the debug file, once it answers for its build-id."""
    if shutil.which("debuginfod") is None:
        pytest.skip("debuginfod is not installed")
    bare, served, _ = stripped_hotline
    port = _free_port()
    log = open(tmp_path / "debuginfod.log", "wb")
    proc = subprocess.Popen(["debuginfod", "-F", "-p", str(port), "-d",
                             str(tmp_path / "debuginfod.sqlite"), "-t", "0", "-g", "0",
                             "-c", "1", str(served)], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_WITHIN
        while True:
            try:
                with urllib.request.urlopen(f"{url}/buildid/{bare.build_id}/debuginfo",
                                            timeout=5) as r:
                    r.read()
                break
            except (urllib.error.URLError, OSError):
                assert proc.poll() is None, (tmp_path / "debuginfod.log").read_text()
                assert time.monotonic() < deadline, "debuginfod did not serve the file"
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_debug_file_is_fetched_by_build_id_and_cached(tmp_path, stripped_hotline, server):
    bare, _, full = stripped_hotline
    q, name = hot_q(tmp_path, bare, full)
    hot = f"hotline.c:{source_line('/* HOT */')} (spin)"
    cache = tmp_path / "cache"
    env = {**os.environ, "Q_CACHE_DIR": str(cache)}
    env.pop("DEBUGINFOD_URLS", None)
    # unset: nothing is asked, nothing is fetched
    r = q_view("--flat", "--by", "line", q.info_path(name), env=env)
    assert r.returncode == 0 and hot not in r.stdout, r.stdout
    assert not (cache / "debuginfod").exists()
    # a file over DEBUGINFOD_MAXSIZE is not kept (and asked again later)
    r = q_view("--flat", "--by", "line", q.info_path(name),
               env={**env, "DEBUGINFOD_URLS": server, "DEBUGINFOD_MAXSIZE": "1000"})
    assert r.returncode == 0 and hot not in r.stdout, r.stdout
    assert "larger than 1000 bytes" in r.stderr, r.stderr
    # DEBUGINFOD_URLS: fetched, and the symbols and lines come from it
    r = q_view("--flat", "--by", "line", q.info_path(name),
               env={**env, "DEBUGINFOD_URLS": server})
    assert r.returncode == 0, r.stderr
    assert hot in r.stdout and not r.stderr, r.stdout + r.stderr
    fetched = cache / "debuginfod" / bare.build_id / "debuginfo"
    assert fetched.is_file()
    # --debuginfod URL; a dead server first: one warning, the next one serves
    dead = f"http://127.0.0.1:{_free_port()}"
    shutil.rmtree(cache)
    r = q_view("--flat", "--by", "line", "--debuginfod", dead, "--debuginfod", server,
               q.info_path(name), env=env)
    assert r.returncode == 0, r.stderr
    assert hot in r.stdout
    assert r.stderr.count("debuginfod server") == 1 and dead in r.stderr, r.stderr


def test_cached_debug_file_serves_without_the_server(tmp_path, stripped_hotline, server):
    bare, _, full = stripped_hotline
    q, name = hot_q(tmp_path, bare, full)
    env = {**os.environ, "Q_CACHE_DIR": str(tmp_path / "cache"), "DEBUGINFOD_URLS": server}
    r = q_view("--annotate", "spin", q.info_path(name), env=env)
    assert r.returncode == 0, r.stderr
    assert f"hotline.c:{source_line('/* HOT */')}" in r.stdout
    env["DEBUGINFOD_URLS"] = f"http://127.0.0.1:{_free_port()}"  # nobody there now
    r = q_view("--annotate", "spin", "--source-root", str(Path(__file__).parent.parent),
               q.info_path(name), env=env)
    assert r.returncode == 0 and "debuginfod server" not in r.stderr, r.stderr
    assert "/* HOT */" in r.stdout

