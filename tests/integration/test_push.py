"""q-push and q-syscollect --push against a Pyroscope-like /ingest server that
the test runs on a loopback port: it decodes each body with the pprof schema
and can accept, fail (500), stall (no answer) and come back. No real
Pyroscope server runs here."""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psutil
import pytest

from qtools.qformat import read_info
from qtools.qformat.pushstate import STATE_NAME
from tests.conftest import OWN_SETS, command, q_syscollect
from tests.integration.test_service import UNIT, _systemd_analyze
from tests.qsynth import QBuilder

DROP_IN = UNIT.parent / "q-syscollect-push.conf"


class Ingest:
    """The server: ``mode`` is "accept", "fail" or "stall"; ``received`` the
    accepted requests (query, decoded profile), in order."""

    def __init__(self) -> None:
        self.mode = "accept"
        self.delay = 0.0  # seconds before an accepted request is answered
        self.received: list[tuple[dict[str, str], object]] = []
        self.attempts = 0
        self.release = threading.Event()
        self.lock = threading.Lock()
        ingest = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                from qtools.viewer.render.pprof import Profile
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with ingest.lock:
                    ingest.attempts += 1
                    mode = ingest.mode
                if mode == "stall":
                    ingest.release.wait(30)
                    return  # no answer at all
                if mode == "fail":
                    self.send_response(500)
                    self.end_headers()
                    return
                url = urlsplit(self.path)
                assert url.path == "/ingest"
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                profile = Profile()
                profile.ParseFromString(gzip.decompress(body))
                time.sleep(ingest.delay)
                query["sha256"] = hashlib.sha256(body).hexdigest()  # the slice sent
                with ingest.lock:
                    ingest.received.append((query, profile))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def names(self) -> list[str]:
        """The slice of each accepted request: its series, from time and body
        (a profile is encoded the same each time it is sent)."""
        with self.lock:
            return [f"{q['name']}@{q['from']}#{q['sha256'][:16]}" for q, _p in self.received]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def ingest():
    server = Ingest()
    yield server
    server.close()


def q_push(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([command("q-push"), *args], capture_output=True, text=True,
                          timeout=timeout)


def _slices(q: QBuilder, prog: str, first: int, count: int, pid: int = 100,
            state: str = "closed") -> list[str]:
    """``count`` closed hourly slices of ``prog`` (versions first..), host web1."""
    names = []
    for v in range(first, first + count):
        start = 1_700_000_000 + 3600 * v
        names.append(q.task(prog, pid, 0, version=v,
                            stacks=[(1_000_000 * (v + 1), [0x401000 + v, 0x402000]),
                                    (3_000_000, [0x403000])],
                            extra_info={"hostname": "web1", "start_time": float(start),
                                        "end_time": float(start + 3600), "state": state}))
    return names


def _sent(q: Path) -> set[str]:
    lines = (q / STATE_NAME).read_text().splitlines()
    return set(lines[1:])


def test_fail_stall_and_come_back_sends_each_slice_once(ingest, tmp_path):
    q = QBuilder(tmp_path / "q")
    first = _slices(q, "app", 0, 3)
    fast = ("--retries", "2", "--max-backoff", "0.2", "--timeout", "1")

    ingest.mode = "fail"
    r = q_push(*fast, ingest.url, str(q.path))
    assert r.returncode == 1
    assert "3 closed slices" in r.stderr and "HTTP 500" in r.stderr, r.stderr
    assert ingest.received == [] and ingest.attempts >= 2

    ingest.mode = "accept"
    r = q_push(ingest.url, str(q.path))
    assert r.returncode == 0, r.stderr
    assert _sent(q.path) == set(first)
    query, profile = ingest.received[0]
    assert query["name"] == "q-tools{host=web1,program=app}"  # no pid, cpu or thread
    assert query["format"] == "pprof" and query["spyName"] == "q-syscollect"
    assert (int(query["from"]), int(query["until"])) == (1_700_000_000, 1_700_003_600)
    strings = profile.string_table
    labels = {(strings[lb.key], strings[lb.str]) for s in profile.sample for lb in s.label}
    assert {("pid", "100"), ("cpu", "0"), ("host", "web1"), ("comm", "app")} <= labels
    assert sum(s.value[-1] for s in profile.sample) == 1_000_000 + 3_000_000

    second = _slices(q, "app", 3, 2)
    ingest.mode = "stall"
    r = q_push(*fast, ingest.url, str(q.path))
    assert r.returncode == 1 and "2 closed slices" in r.stderr, r.stderr

    ingest.mode = "accept"
    assert q_push(ingest.url, str(q.path)).returncode == 0
    names = ingest.names()
    assert len(names) == len(set(names)) == 5  # nothing twice, nothing lost
    assert _sent(q.path) == set(first + second)
    assert q_push(ingest.url, str(q.path)).returncode == 0
    assert len(ingest.names()) == 5  # all sent already


def test_a_restart_in_the_middle_sends_at_most_the_one_in_flight_twice(ingest, tmp_path):
    q = QBuilder(tmp_path / "q")
    slices = _slices(q, "app", 0, 10)
    pending = _slices(q, "db", 0, 1, pid=200, state="open")  # still being written
    ingest.delay = 0.3
    push = subprocess.Popen([command("q-push"), "--follow", "--interval", "0.2",
                             ingest.url, str(q.path)], stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: len(ingest.names()) >= 3, 60)
        push.send_signal(signal.SIGKILL)  # mid-request, as likely as not
        push.wait(10)
        push = subprocess.Popen([command("q-push"), "--follow", "--interval", "0.2",
                                 ingest.url, str(q.path)], stderr=subprocess.PIPE, text=True)
        _wait(lambda: len(set(ingest.names())) >= 10, 60)
        assert all("program=db" not in n for n in ingest.names())  # open: not yet
        # the set's writer closes it: a new version with q:state "closed"
        closed = _slices(q, "db", 1, 1, pid=200)
        _wait(lambda: any("program=db" in n for n in ingest.names()), 60)
        push.send_signal(signal.SIGTERM)
        assert push.wait(60) == 0, push.stderr.read() if push.stderr else ""
    finally:
        if push.poll() is None:
            push.kill()
            push.wait()
    names = ingest.names()
    assert len(set(names)) == 11
    assert len(names) - len(set(names)) <= 1, names  # only the one in flight, if any
    assert _sent(q.path) == set(slices + closed)
    assert not set(pending) & _sent(q.path)


def _wait(predicate, seconds: float) -> None:
    give_up = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < give_up, "timed out"
        time.sleep(0.1)


def test_bad_urls_get_one_clear_line(tmp_path):
    q = QBuilder(tmp_path / "q")
    for url in ("ftp://example.org", "not a url", "http://", "http://h:99999/"):
        r = q_push(url, str(q.path))
        assert r.returncode == 2, (url, r.stderr)
        assert len(r.stderr.splitlines()) == 1 and "URL" in r.stderr, r.stderr
    r = q_syscollect("--push", "ftp://example.org", "-d", str(tmp_path / "c"), "-t", "1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--push" in r.stderr, r.stderr
    # a host nobody answers on: a clear line, the slices stay queued
    _slices(q, "app", 0, 1)
    r = q_push("--retries", "1", "--timeout", "1", "http://127.0.0.1:9", str(q.path))
    assert r.returncode == 1
    assert re.search(r"cannot push to http://127.0.0.1:9: .*refused", r.stderr), r.stderr
    assert "1 closed slice of" in r.stderr


def test_q_syscollect_push_sends_every_closed_slice(perf, build, ingest, tmp_path):
    pfan = build("p-fan")
    q = tmp_path / "q"
    load = subprocess.Popen([str(pfan), "12"], preexec_fn=lambda: os.sched_setaffinity(0, {0}))
    try:
        ingest.mode = "fail"  # down at first: collection goes on regardless
        run = subprocess.Popen([command("q-syscollect"), "-d", str(q), "--rotate", "2",
                                "--checkpoint", "1", "-t", "10", "--cpus", "0", "--push",
                                ingest.url, *OWN_SETS], stderr=subprocess.PIPE, text=True)
        try:
            _wait(lambda: _children(run.pid, "q-push"), 30)
            for child in _children(run.pid, "q-push"):
                child.kill()  # a crash of q-push: restarted, collection goes on
            time.sleep(2)
            ingest.mode = "accept"
            _out, err = run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
    finally:
        load.kill()
        load.wait()
    assert run.returncode == 0, err
    assert re.search(r"q-push \(pid \d+\) ended \(signal 9\); restarting it", err), err
    assert not [p for p in psutil.process_iter(["cmdline"])
                if str(q) in " ".join(p.info["cmdline"] or ())]  # no q-push left running
    assert ingest.names(), err  # pushed while it ran (the oldest slices first)
    # what the run could not send in its drain time (a busy machine) stays queued
    # for the next q-push, which sends exactly the rest
    r = q_push(ingest.url, str(q))
    assert r.returncode == 0, r.stderr
    closed = {n for n in os.listdir(q) if ".info#" in n
              and read_info(str(q / n)).task.state == "closed"}
    assert closed and _sent(q) >= closed  # every closed slice, the last ones included
    names = ingest.names()
    assert len(names) == len(set(names)), names  # nothing twice
    assert any(f"program={pfan.name}" in n for n in names), names


def _children(pid: int, name: str) -> list[psutil.Process]:
    try:
        kids = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    return [k for k in kids if any(name in part for part in k.cmdline()[:3])]


def test_the_unit_with_the_push_drop_in_verifies(tmp_path):
    tool = _systemd_analyze()
    unit = tmp_path / "q-syscollect.service"
    script = command("q-syscollect")
    drop_in = DROP_IN.read_text()
    assert re.search(r"^RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6$", drop_in, re.M)
    exec_start = re.findall(r"^ExecStart=(.*)$", drop_in, re.M)
    assert exec_start[0] == "" and "--push" in exec_start[1]
    # a drop-in's lines apply after the unit's: the same as appending them
    unit.write_text((UNIT.read_text() + "\n" + drop_in).replace("/usr/local/bin/q-syscollect",
                                                                 script))
    r = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr


def test_bad_option_values_say_which_option(tmp_path):
    for option, value in (("--timeout", "0"), ("--drain", "nan"), ("--retries", "-1"),
                          ("--queue", "x")):
        r = q_push(option, value, "http://127.0.0.1:9", str(tmp_path))
        assert r.returncode == 2
        assert f"argument {option}: not a positive" in r.stderr, r.stderr
