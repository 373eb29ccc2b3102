"""q-push and q-syscollect --push against a Pyroscope-like /ingest server that
the test runs on a loopback port: it decodes each body with the pprof schema
and can accept, fail (500), stall (no answer) and come back. No real
Pyroscope server runs here. Hostile servers (a trickled answer, a redirect
elsewhere, every kind of status, no answer at all) are raw sockets on
loopback ports too."""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import signal
import shutil
import socket
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterator
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


def test_messages_name_hostile_sets_escaped(ingest, tmp_path):
    """A set's name may hold C1 controls (U+009B is the terminal's CSI):
    q-push's lines about it show them escaped, one line each."""
    q = QBuilder(tmp_path / "q")
    unreadable, damaged = _slices(q, "ev\u009b2J\u0085x", 0, 2)
    (q.path / unreadable).write_text("(q:info ((q:comm . \"x\")")
    (q.path / damaged.replace(".info#", ".hist#")).unlink()
    r = q_push(ingest.url, str(q.path))
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 3 and all(line.startswith("q-push: ") for line in lines), lines
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]", r.stderr), r.stderr
    assert "ev\\x9b2J\\x85x" in lines[0] and "not pushed" in lines[0], lines


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
    # the host's network, but of its addresses only the server's: the unit
    # denies them all
    assert re.search(r"^PrivateNetwork=no$", drop_in, re.M)
    assert re.search(r"^IPAddressDeny=any$", UNIT.read_text(), re.M)
    assert re.search(r"^IPAddressAllow=\S+", drop_in, re.M)
    exec_start = re.findall(r"^ExecStart=(.*)$", drop_in, re.M)
    assert exec_start[0] == "" and "--push" in exec_start[1]
    # a drop-in's lines apply after the unit's: the same as appending them
    unit.write_text((UNIT.read_text() + "\n" + drop_in).replace("/usr/local/bin/q-syscollect",
                                                                 script))
    r = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr


# ---------------------------------------------------------------- hostile servers

HANG_GUARD = 60  # seconds: only a q-push that hangs takes this long
Answerer = Callable[[socket.socket, threading.Event], None]


class RawServer:
    """A server on a loopback port that reads each request whole and then
    runs ``answer(conn, stop)`` (None: answers nothing and holds the
    connection). ``requests``: the head of each request read;
    ``connections``: how many it accepted."""

    def __init__(self, answer: Answerer | None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.answer = answer
        self.tls = tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.url = f"http{'s' if tls else ''}://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests: list[bytes] = []
        self.connections = 0
        self.got_request = threading.Event()
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            try:
                if self.tls is not None:
                    conn = self.tls.wrap_socket(conn, server_side=True)
                head = _read_request(conn)
            except OSError:
                return
            self.requests.append(head)
            self.got_request.set()
            try:
                if self.answer is None:
                    self.stop.wait(HANG_GUARD * 2)
                else:
                    self.answer(conn, self.stop)
            except OSError:
                pass  # q-push closed its end: what the test is about

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


def _read_request(conn: socket.socket) -> bytes:
    """A request's head, its body read too (a close with unread bytes would
    reset the connection before the answer is read)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("closed mid-request")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length: *(\d+)", head)
    assert length is not None, head
    body_size = int(length[1])
    while len(body) < body_size:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("closed mid-body")
        body += chunk
    return head


def _sends(data: bytes) -> Answerer:
    return lambda conn, stop: conn.sendall(data)


def _trickle(conn: socket.socket, stop: threading.Event) -> None:
    """An answer's head a byte a second: 10,000 seconds of it."""
    for byte in b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 10_000 + b"\r\n\r\n":
        if stop.wait(1):
            return
        conn.sendall(bytes([byte]))


def _endless_head(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    while not stop.is_set():
        conn.sendall(b"X-Pad: " + b"a" * 8192 + b"\r\n")


def _endless_body(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n")
    while not stop.is_set():
        conn.sendall(b"\0" * 65536)


MakeServer = Callable[..., RawServer]


@pytest.fixture
def raw_servers() -> Iterator[MakeServer]:
    made: list[RawServer] = []

    def make(answer: Answerer | None,
             tls: ssl.SSLContext | None = None) -> RawServer:
        made.append(RawServer(answer, tls))
        return made[-1]

    yield make
    for server in made:
        server.close()


def _delivered(q: Path) -> set[str]:
    """The slices .push-state names (none without the file)."""
    return _sent(q) if (q / STATE_NAME).exists() else set()


def _status(code: int, reason: str, *more: str) -> bytes:
    lines = [f"HTTP/1.1 {code} {reason}", *more, "Content-Length: 0", "", ""]
    return "\r\n".join(lines).encode()


# (answer, delivered, what stderr says): only a final 2xx delivers
ANSWERS = {
    "200": (_status(200, "OK"), True, "pushed 2 slices"),
    "204": (_status(204, "No Content"), True, "pushed 2 slices"),
    "100 then 200": (b"HTTP/1.1 100 Continue\r\n\r\n" + _status(200, "OK"), True,
                     "pushed 2 slices"),
    "102 then nothing": (b"HTTP/1.1 102 Processing\r\n\r\n", False, "closed the connection"),
    "101": (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", False,
            "HTTP 101 Switching Protocols; will retry"),
    "301": (_status(301, "Moved Permanently", "Location: /elsewhere"), False,
            "HTTP 301 Moved Permanently to /elsewhere: redirects are not followed; will retry"),
    "307": (_status(307, "Temporary Redirect", "Location: http://127.0.0.1:9/ingest"), False,
            "redirects are not followed; will retry"),
    "308": (_status(308, "Permanent Redirect"), False,
            "HTTP 308 Permanent Redirect: redirects are not followed; will retry"),
    "400": (_status(400, "Bad Request"), False, "refused it: HTTP 400 Bad Request"),
    "404": (_status(404, "Not Found"), False, "refused it: HTTP 404 Not Found"),
    "429": (_status(429, "Too Many Requests"), False, "HTTP 429 Too Many Requests; will retry"),
    "500": (_status(500, "Internal Server Error"), False, "HTTP 500 Internal Server Error; "
            "will retry"),
    "503": (_status(503, "Service Unavailable"), False, "HTTP 503"),
    "a reason with escapes": (_status(503, "Busy\x1b]0;owned\x07"), False,
                              "HTTP 503 Busy?]0;owned?; will retry"),
    "not HTTP": (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", False, "not an HTTP answer"),
}


@pytest.mark.parametrize("kind", ANSWERS)
def test_only_a_2xx_answer_delivers_a_slice(raw_servers: MakeServer, tmp_path: Path,
                                            kind: str) -> None:
    answer, delivered, said = ANSWERS[kind]
    server = raw_servers(_sends(answer))
    q = QBuilder(tmp_path / "q")
    slices = _slices(q, "app", 0, 2)
    r = q_push("--timeout", "5", "--retries", "2", "--max-backoff", "0.1", server.url,
               str(q.path), timeout=HANG_GUARD)
    assert said in r.stderr, r.stderr
    assert "\x1b" not in r.stderr  # a server's text is shown printable
    if delivered:
        assert r.returncode == 0 and _delivered(q.path) == set(slices), r.stderr
        return
    assert r.returncode == 1, r.stderr
    assert "2 closed slices" in r.stderr and "the next q-push tries again" in r.stderr
    assert _delivered(q.path) == set()
    assert r.stderr.count("will retry") <= 1  # a failure is said once, not per attempt
    if "refused" in said:  # each slice tried once, and again by the next q-push
        assert len(server.requests) == 2
        q_push("--timeout", "5", server.url, str(q.path), timeout=HANG_GUARD)
        assert len(server.requests) == 4
    else:  # the first slice retried, the next one waiting its turn
        assert len(server.requests) == 2


def test_a_redirect_elsewhere_is_not_followed(raw_servers: MakeServer, tmp_path: Path) -> None:
    elsewhere = raw_servers(_sends(_status(200, "OK")))
    server = raw_servers(_sends(_status(302, "Found", f"Location: {elsewhere.url}/ingest")))
    q = QBuilder(tmp_path / "q")
    _slices(q, "app", 0, 2)
    r = q_push("--timeout", "5", "--retries", "3", "--max-backoff", "0.1", server.url,
               str(q.path), timeout=HANG_GUARD)
    assert r.returncode == 1
    lines = [line for line in r.stderr.splitlines() if "cannot push" in line]
    assert lines == [f"q-push: cannot push to {server.url}: HTTP 302 Found to "
                     f"{elsewhere.url}/ingest: redirects are not followed; will retry"], r.stderr
    assert len(server.requests) == 3  # each retry asked the server again, once
    assert elsewhere.connections == 0  # not a byte went where it pointed
    assert _delivered(q.path) == set()


@pytest.mark.parametrize("answer, said", [
    (_trickle, "no whole answer within 2 s (--timeout)"),  # a byte a second
    (None, "no whole answer within 2 s (--timeout)"),  # nothing at all
    (_endless_head, "an answer whose head is over 64 KiB"),  # the read is bounded in size too
])
def test_one_deadline_and_one_bound_for_a_whole_answer(raw_servers: MakeServer, tmp_path: Path,
                                                      answer: Answerer | None,
                                                      said: str) -> None:
    server = raw_servers(answer)
    q = QBuilder(tmp_path / "q")
    _slices(q, "app", 0, 1)
    r = q_push("--timeout", "2", "--retries", "1", server.url, str(q.path), timeout=HANG_GUARD)
    assert r.returncode == 1
    assert f"cannot push to {server.url}: {said}; will retry" in r.stderr, r.stderr
    assert "1 closed slice of" in r.stderr
    assert len(server.requests) == 1 and _delivered(q.path) == set()


def test_a_2xx_with_an_endless_body_delivers_without_reading_it_all(raw_servers: MakeServer,
                                                                   tmp_path: Path) -> None:
    server = raw_servers(_endless_body)
    q = QBuilder(tmp_path / "q")
    slices = _slices(q, "app", 0, 2)
    r = q_push("--timeout", "600", server.url, str(q.path), timeout=HANG_GUARD)
    assert r.returncode == 0, r.stderr
    assert _delivered(q.path) == set(slices)


@pytest.mark.parametrize("follow", [False, True])
def test_sigterm_ends_an_open_request_at_once(raw_servers: MakeServer, tmp_path: Path,
                                              follow: bool) -> None:
    server = raw_servers(_trickle)
    q = QBuilder(tmp_path / "q")
    _slices(q, "app", 0, 1)
    args = ["--follow", "--interval", "0.2"] if follow else []
    push = subprocess.Popen([command("q-push"), *args, "--timeout", "600", server.url,
                             str(q.path)], stderr=subprocess.PIPE, text=True)
    try:
        assert server.got_request.wait(HANG_GUARD)  # the request is open
        push.send_signal(signal.SIGTERM)
        _out, err = push.communicate(timeout=HANG_GUARD)
        assert push.returncode == 1  # not the 600 s deadline's end
    finally:
        if push.poll() is None:
            push.kill()
            push.wait()
    assert "1 closed slice of" in err and "not pushed" in err, err
    assert _delivered(q.path) == set()


def test_a_drain_ends_an_open_request_when_the_drain_time_runs_out(raw_servers: MakeServer,
                                                                   tmp_path: Path) -> None:
    """What q-syscollect asks (SIGUSR1) at the end of its run."""
    server = raw_servers(None)
    q = QBuilder(tmp_path / "q")
    _slices(q, "app", 0, 1)
    push = subprocess.Popen([command("q-push"), "--follow", "--interval", "0.2", "--drain", "1",
                             "--timeout", "600", server.url, str(q.path)],
                            stderr=subprocess.PIPE, text=True)
    try:
        assert server.got_request.wait(HANG_GUARD)
        push.send_signal(signal.SIGUSR1)
        _out, err = push.communicate(timeout=HANG_GUARD)
        assert push.returncode == 1
    finally:
        if push.poll() is None:
            push.kill()
            push.wait()
    assert "the drain time (--drain) ran out" in err, err
    assert _delivered(q.path) == set()


def test_q_syscollect_ends_its_q_push_by_the_drain_when_a_server_trickles(
        perf: None, raw_servers: MakeServer, tmp_path: Path) -> None:
    """At the end of a run q-syscollect asks its q-push to drain: a request
    held open by a server that trickles its answer ends by its deadline
    within the drain time, and q-push ends by itself, not killed."""
    server = raw_servers(_trickle)
    q = tmp_path / "q"
    run = subprocess.run([command("q-syscollect"), "-d", str(q), "-t", "2", "--cpus", "0",
                          "--push", server.url, *OWN_SETS], capture_output=True, text=True,
                         timeout=HANG_GUARD * 4)
    assert run.returncode == 0, run.stderr
    assert server.requests, run.stderr  # a request was open when the drain began
    assert re.search(r"q-push: \d+ closed slices? of .* not pushed to", run.stderr), run.stderr
    assert "killing it" not in run.stderr
    assert not [p for p in psutil.process_iter(["cmdline"])
                if str(q) in " ".join(p.info["cmdline"] or ())]
    assert _delivered(q) == set()


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, ssl.SSLContext]:
    """A self-signed certificate for 127.0.0.1 (openssl's command) and its key."""
    tool = shutil.which("openssl")
    if tool is None:
        pytest.skip("no openssl command to make a certificate with")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([tool, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return cert, context


@pytest.mark.parametrize("answer, said, delivered", [
    (_sends(_status(200, "OK")), "pushed 1 slice", True),
    (_trickle, "no whole answer within 2 s (--timeout)", False),
    (_sends(_status(302, "Found", "Location: http://127.0.0.1:9/")), "redirects are not "
     "followed", False),
])
def test_https_the_same(raw_servers: MakeServer, certificate: tuple[Path, ssl.SSLContext],
                        tmp_path: Path, answer: Answerer, said: str, delivered: bool) -> None:
    cert, context = certificate
    server = raw_servers(answer, context)
    q = QBuilder(tmp_path / "q")
    slices = _slices(q, "app", 0, 1)
    r = subprocess.run([command("q-push"), "--timeout", "2", "--retries", "1", server.url,
                        str(q.path)], capture_output=True, text=True, timeout=HANG_GUARD,
                       env={**os.environ, "SSL_CERT_FILE": str(cert)})
    assert said in r.stderr, r.stderr
    assert (r.returncode, _delivered(q.path)) == ((0, set(slices)) if delivered else (1, set()))


def test_https_a_handshake_a_byte_a_second(tmp_path: Path) -> None:
    """The TLS handshake is under the request's deadline too: a server hello
    record 16 KiB long, sent a byte a second."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle_hello() -> None:
        conn, _ = listener.accept()
        with conn:
            for byte in b"\x16\x03\x03\x40\x00" + b"\x02" * 16384:
                if stop.wait(1):
                    return
                conn.sendall(bytes([byte]))

    threading.Thread(target=trickle_hello, daemon=True).start()
    q = QBuilder(tmp_path / "q")
    _slices(q, "app", 0, 1)
    try:
        r = q_push("--timeout", "2", "--retries", "1",
                   f"https://127.0.0.1:{listener.getsockname()[1]}", str(q.path),
                   timeout=HANG_GUARD)
    finally:
        stop.set()
        listener.close()
    assert r.returncode == 1 and "no whole answer within 2 s" in r.stderr, r.stderr
    assert _delivered(q.path) == set()


def test_the_proxy_the_environment_names_is_used(raw_servers: MakeServer, tmp_path: Path) -> None:
    proxy = raw_servers(_sends(_status(200, "OK")))
    q = QBuilder(tmp_path / "q")
    slices = _slices(q, "app", 0, 1)
    env = {**os.environ, "http_proxy": proxy.url, "no_proxy": ""}
    r = subprocess.run([command("q-push"), "http://pyroscope.invalid:4040/base", str(q.path)],
                       capture_output=True, text=True, timeout=HANG_GUARD, env=env)
    assert r.returncode == 0, r.stderr
    assert proxy.requests[0].startswith(b"POST http://pyroscope.invalid:4040/base/ingest?name=")
    assert _delivered(q.path) == set(slices)


def test_bad_option_values_say_which_option(tmp_path: Path) -> None:
    for option, value in (("--timeout", "0"), ("--drain", "nan"), ("--retries", "-1"),
                          ("--queue", "x")):
        r = q_push(option, value, "http://127.0.0.1:9", str(tmp_path))
        assert r.returncode == 2
        assert f"argument {option}: not a positive" in r.stderr, r.stderr
