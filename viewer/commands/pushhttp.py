"""q-push's HTTP: one POST under one deadline, abandoned at once on a stop.

urllib's timeout bounds each socket operation, not the request: a server
that sends its answer a byte a second holds a request as long as it likes,
and a signal cannot end a request in flight (the interrupted call is
resumed). Here the socket is non-blocking and every wait (the name lookup,
the connection, the TLS handshake, each send and each receive) is a poll
on it and on the caller's wake-up descriptor, for what is left of one
deadline; the caller may bring the deadline forward while the request is
open (a drain that began), and a stop ends it at once.

Redirects are not followed: the answer is the first final status the
server gives (interim 1xx answers are skipped). What is read of an answer
is bounded: its status line and headers, interim answers included, up to
``MAX_HEAD`` bytes; of its body at most ``MAX_BODY`` bytes, which decide
nothing (the status does). ``http_proxy``, ``https_proxy`` and
``no_proxy`` are honoured as urllib honours them (an http:// proxy only).
"""

from __future__ import annotations

import base64
import errno
import math
import os
import re
import select
import socket
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Protocol, TypeVar
from urllib.parse import quote, urlsplit

MAX_HEAD = 64 << 10  # bytes of status lines and headers, 1xx answers included
MAX_BODY = 64 << 10  # bytes of a body read at most (the rest is left unread)
MAX_INTERIM = 16  # 1xx answers skipped at most before a final one
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: ([^\r\n]*))?\r?")
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")
_PATH_SAFE = "/%:@!$&'()*+,;=~-._"
_T = TypeVar("_T")


class Watch(Protocol):
    """What a request answers to: its deadline and the caller's stop."""

    @property
    def fd(self) -> int:
        """Readable when the caller may have something to say (a signal came)."""

    def ends_at(self) -> float:
        """The monotonic time the request must be over by; it may move
        earlier while the request is open."""

    def stopped(self) -> bool:
        """True: abandon the request now."""

    def clear(self) -> None:
        """Empty ``fd`` (after it was readable)."""


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str  # printable, at most 80 characters
    location: str  # a redirect's Location header, printable, at most 200 ('' if none)


class Failed(Exception):
    """No answer: why, in a few words (a refused connection, a reset, a
    malformed answer)."""


class TimedOut(Failed):
    """The deadline passed before the answer was whole."""


class Stopped(Exception):
    """The caller stopped while the request was open."""


def printable(text: str, limit: int) -> str:
    """A server's text as it may go into one line of a log."""
    return _UNPRINTABLE.sub("?", text)[:limit]


def post(url: str, target: str, body: bytes, headers: dict[str, str], watch: Watch) -> Answer:
    """POST ``body`` to ``target`` (a path and query below ``url``'s path)
    on ``url``'s server; its final answer. Failed, TimedOut or Stopped
    when there is none."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if https else 80)
    authority = parts.netloc.rpartition("@")[2]
    path = quote(parts.path.rstrip("/"), safe=_PATH_SAFE) + target
    proxy = _proxy_for(parts.scheme, host)
    conn = _Conn(_connect(proxy.host if proxy else host, proxy.port if proxy else port, watch),
                 watch)
    try:
        extra = {}
        if proxy is not None and https:
            _tunnel(conn, proxy, f"{_bracketed(host)}:{port}")
        elif proxy is not None:
            path = f"http://{authority}{path}"  # a proxy takes the whole URL
            extra = proxy.headers
        if https:
            conn.start_tls(host)
        conn.send_all(_request_head("POST", path, authority,
                                    {**headers, **extra, "Content-Length": str(len(body)),
                                     "Connection": "close"})
                      + body)
        answer, fields, rest = _read_answer(conn)
        _skip_body(conn, answer.status, fields, rest)
        return answer
    finally:
        conn.close()


@dataclass(frozen=True)
class _Proxy:
    host: str
    port: int
    headers: dict[str, str]


def _proxy_for(scheme: str, host: str) -> _Proxy | None:
    """The proxy the environment names for ``scheme`` (None: go direct)."""
    import urllib.request  # its environment rules, exactly as urlopen applied them
    proxy = urllib.request.getproxies().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    try:
        port = parts.port or 80
    except ValueError:
        port = 0
    if parts.scheme != "http" or not parts.hostname or not port:
        raise Failed(f"the {scheme}_proxy variable is not an http:// proxy with a host")
    headers = {}
    if parts.username is not None:
        from urllib.parse import unquote
        token = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(token.encode()).decode()
    return _Proxy(parts.hostname, port, headers)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _request_head(method: str, target: str, authority: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {authority}",
             *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii", "replace")


def _tunnel(conn: _Conn, proxy: _Proxy, where: str) -> None:
    conn.send_all(_request_head("CONNECT", where, where, proxy.headers))
    answer, _fields, rest = _read_answer(conn)
    if not 200 <= answer.status < 300 or rest:
        raise Failed(f"the proxy {proxy.host}:{proxy.port} answered CONNECT with HTTP "
                     f"{answer.status} {answer.reason}".rstrip())


# ---------------------------------------------------------------- waiting


def _wait(fd: int, events: int, watch: Watch) -> None:
    """Until ``fd`` is ready for ``events``; TimedOut or Stopped first."""
    poller = select.poll()
    poller.register(fd, events)
    poller.register(watch.fd, select.POLLIN)
    while True:
        if watch.stopped():
            raise Stopped
        left = watch.ends_at() - time.monotonic()
        if left <= 0:
            raise TimedOut("timed out")
        ready = poller.poll(max(1, math.ceil(left * 1000)))
        if any(f == fd for f, _ev in ready):
            return
        if ready:
            watch.clear()


def _resolve(host: str, port: int, watch: Watch) -> list[tuple[Any, ...]]:
    """getaddrinfo under the deadline: it cannot be interrupted, so it runs
    in a thread of its own that is left behind if the deadline comes first
    (the resolver's own timeouts end it)."""
    try:  # an address needs no lookup
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                  flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError):
        pass
    done_r, done_w = os.pipe2(os.O_CLOEXEC)
    result: list[list[tuple[Any, ...]] | BaseException] = []

    def look_up() -> None:
        try:
            result.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError) as e:
            result.append(e)
        finally:
            os.close(done_w)

    threading.Thread(target=look_up, daemon=True).start()
    try:
        _wait(done_r, select.POLLIN, watch)
    finally:
        os.close(done_r)
    found = result[0]
    if isinstance(found, BaseException):
        why = found.strerror if isinstance(found, OSError) and found.strerror else found
        raise Failed(f"cannot find {host}: {why}")
    return found


def _connect(host: str, port: int, watch: Watch) -> socket.socket:
    """A connected non-blocking socket to the first address that takes one."""
    why = f"no address for {host}"
    for family, kind, proto, _name, address in _resolve(host, port, watch):
        try:
            sock = socket.socket(family, kind | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK,
                                 proto)
        except OSError as e:
            why = e.strerror or str(e)
            continue
        try:
            code = sock.connect_ex(address)
            if code == errno.EINPROGRESS:
                _wait(sock.fileno(), select.POLLOUT, watch)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        except BaseException:
            sock.close()
            raise
        if code == 0:
            return sock
        sock.close()
        why = os.strerror(code)
    raise Failed(why)


class _Conn:
    """A non-blocking socket (TLS or not) whose every wait is the watch's."""

    def __init__(self, sock: socket.socket, watch: Watch) -> None:
        self.sock: socket.socket = sock
        self.watch = watch
        self.want_read: tuple[type[OSError], ...] = ()  # TLS's "would block" errors
        self.want_write: tuple[type[OSError], ...] = ()

    def close(self) -> None:
        self.sock.close()

    def start_tls(self, host: str) -> None:
        import ssl  # only for https: 10 ms of a start otherwise
        self.want_read, self.want_write = (ssl.SSLWantReadError,), (ssl.SSLWantWriteError,)
        tls = ssl.create_default_context().wrap_socket(self.sock, server_hostname=host,
                                                       do_handshake_on_connect=False)
        self.sock = tls
        self._retry(tls.do_handshake, select.POLLIN)

    def send_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self._retry(partial(self.sock.send, view), select.POLLOUT):]

    def recv(self, size: int) -> bytes:
        return self._retry(lambda: self.sock.recv(size), select.POLLIN)

    def _retry(self, operation: Callable[[], _T], events: int) -> _T:
        """``operation`` once the socket lets it through (``events``: what
        it waits for when it would block)."""
        while True:
            try:
                return operation()
            except BlockingIOError:
                _wait(self.sock.fileno(), events, self.watch)
            except self.want_read:
                _wait(self.sock.fileno(), select.POLLIN, self.watch)
            except self.want_write:
                _wait(self.sock.fileno(), select.POLLOUT, self.watch)
            except OSError as e:
                raise Failed(e.strerror or str(e)) from None


# ---------------------------------------------------------------- reading


def _read_answer(conn: _Conn) -> tuple[Answer, dict[str, str], bytes]:
    """The final answer's status and header fields (lower-case names), and
    the bytes read past its head; 1xx answers before it are skipped."""
    data = bytearray()
    used = 0  # bytes of the heads taken from data so far
    for _ in range(MAX_INTERIM + 1):
        end = data.find(b"\r\n\r\n", used)
        while end < 0:
            if len(data) > MAX_HEAD:
                raise Failed(f"an answer whose head is over {MAX_HEAD >> 10} KiB")
            chunk = conn.recv(MAX_HEAD + 1 - len(data))
            if not chunk:
                raise Failed("the server closed the connection before answering"
                             if not data else "the server closed the connection mid-answer")
            data += chunk
            end = data.find(b"\r\n\r\n", max(used, len(data) - len(chunk) - 3))
        answer, fields = _parse_head(bytes(data[used:end]))
        used = end + 4
        if not (100 <= answer.status < 200) or answer.status == 101:
            return answer, fields, bytes(data[used:])
    raise Failed(f"more than {MAX_INTERIM} interim (1xx) answers")


def _parse_head(head: bytes) -> tuple[Answer, dict[str, str]]:
    status_line, _, rest = head.partition(b"\r\n")
    match = _STATUS_LINE.fullmatch(status_line)
    if match is None:
        raise Failed(f"not an HTTP answer: {printable(status_line.decode('latin-1'), 40)!r}")
    fields: dict[str, str] = {}
    for line in rest.split(b"\r\n"):
        name, colon, value = line.decode("latin-1").partition(":")
        if colon:
            fields[name.strip().lower()] = value.strip()
    status = int(match[1])
    reason = printable((match[2] or b"").decode("latin-1").strip(), 80)
    location = printable(fields.get("location", ""), 200) if 300 <= status < 400 else ""
    return Answer(status, reason, location), fields


def _skip_body(conn: _Conn, status: int, fields: dict[str, str], read: bytes) -> None:
    """Read what the server sends of the body, up to MAX_BODY bytes, so it
    ends its answer before the connection closes; nothing here changes
    the answer, and the deadline still holds (a stop or the deadline ends
    the read, and the answer stands)."""
    if status in (204, 304) or 100 <= status < 200:
        return
    try:
        length = int(fields.get("content-length", ""))
    except ValueError:
        length = MAX_BODY
    chunked = "chunked" in fields.get("transfer-encoding", "").lower()
    want = min(max(length, 0), MAX_BODY)
    try:
        while len(read) < want and not (chunked and read.endswith(b"0\r\n\r\n")):
            chunk = conn.recv(want - len(read))
            if not chunk:
                return
            read += chunk
    except (Failed, Stopped):
        return
