"""q-push: send the closed slices of a `.q` directory to a Pyroscope-compatible
``/ingest`` endpoint, each as a pprof profile.

A reader of `.q` like q-view, and a program of its own: q-syscollect
--push starts one (``--follow``) beside its collectors, and a crash or a
slow server here never touches collection. Each closed set version is one
request, ``POST URL/ingest?name=APP{host=..,program=..,service=..}&from=..
&until=..&format=pprof``, its body the pprof profile q-view --format pprof
writes for that set alone. Series labels are host, program and service
only: pid, thread and cpu stay inside the profile as pprof labels (as
series labels they would make one series per thread).

Delivery is at least once. What was delivered is named in ``.push-state``
in the directory (qformat.pushstate), rewritten after each delivery; a
slice not named there is sent (again) by the next q-push, so a crash
sends at most the slice in flight twice. Only a 2xx answer delivers a
slice: a redirect is not followed but retried, like a 5xx; a 4xx leaves
the slice unsent for the next q-push. Failures are retried with
exponential backoff (capped, with jitter). Each request has one deadline
from its connection to the last byte of its answer (viewer.pushhttp).
SIGTERM and SIGINT end q-push at once, a request in flight abandoned;
SIGUSR1 asks for a drain (q-syscollect's, at the end of its run).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import select
import signal
import sys
import time
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlencode

from qtools.qformat import QDir, QFormatError
from qtools.common.helptext import HelpFormatter, positive_float, positive_int
from qtools.qformat.limits import DEFAULT_LIMITS, LimitExceeded
from qtools.qformat.pushstate import STATE_NAME, check_url, read_sent, write_sent

from . import pushhttp
from ..model.viewerrors import ViewError
from ..model.escape import printable
from ..inputs.load import StoredSet, parse_set_name, read_set
from ..naming.symbols import Symbols
from ..naming.symcache import SymbolCache
from ..model.options import Options as ReportOptions
from ..profile import export
from ..profile.pipeline import tables_named_by
from ..render import pprof

PROG = "q-push"
SPY_NAME = "q-syscollect"
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_.:/@+-]")
RETRY_STATUSES = (408, 425, 429)  # and every 5xx: the server may take it later
HEADERS = {"Content-Type": "application/octet-stream", "User-Agent": PROG}


@dataclass(frozen=True)
class Options:
    url: str
    directory: str
    app: str
    service: str | None
    timeout: float  # seconds per request
    backoff_cap: float  # seconds between attempts at most
    settled: float  # an open set not rewritten this long counts as closed (writer gone)
    queue: int  # set versions read per pass at most (the rest wait on disk)
    retries: int  # without --follow: consecutive failures before giving up
    drain: float  # after SIGUSR1: seconds to send what is left
    interval: float  # --follow: seconds between looks at the directory
    parent: int | None
    quiet: bool


@dataclass(frozen=True)
class Candidate:
    name: str
    key: tuple[int, int, int]  # inode, size, mtime_ns of its .info
    end: float
    closed: bool


class Outcome:
    SENT, RETRY, REJECTED, STOPPED = "sent", "retry", "rejected", "stopped"


def _label(value: str) -> str:
    return _LABEL_UNSAFE.sub("_", value)[:200]


def series_name(app: str, ts: StoredSet, service: str | None) -> str:
    """``APP{host=..,program=..,service=..}``: only labels that are known;
    the service is ``--service`` if given, else the systemd unit the set's
    samples ran in (q:unit)."""
    pairs = [("host", ts.host), ("program", ts.comm), ("service", service or ts.service)]
    labels = ",".join(f"{k}={_label(v)}" for k, v in pairs if v)
    return f"{_label(app)}{{{labels}}}"


def ingest_query(app: str, ts: StoredSet, tables: export.Tables, service: str | None) -> str:
    task = ts.info.task
    start = task.start_time if task.start_time is not None else task.end_time or time.time()
    end = task.end_time if task.end_time is not None else start
    since = math.floor(start)
    params: list[tuple[str, str]] = [("name", series_name(app, ts, service)),
                                     ("from", str(since)),
                                     ("until", str(max(math.ceil(end), since + 1))),
                                     ("format", "pprof"), ("spyName", SPY_NAME)]
    if tables.unit == export.NANOSECONDS and tables.period:
        params.append(("sampleRate", str(max(1, round(1e9 / tables.period)))))
    return urlencode(params)


class Pusher:
    def __init__(self, opts: Options, qdir: QDir, say: Callable[[str], None],
                 waker: Waker) -> None:
        self.opts = opts
        self.qdir = qdir
        self.say = say
        self.waker = waker
        self.sent: set[str] = read_sent(qdir) or set()
        self.refused: dict[str, str] = {}  # by the server (a 4xx): not again in this run
        self.known: dict[str, Candidate] = {}
        self.said: set[str] = set()  # warnings shown once each
        self.last_error: str | None = None
        self.symbols: Symbols | None = None  # one a pass: each object is read once a pass

    def warn(self, text: str) -> None:
        if text not in self.said and len(self.said) < 1000:
            self.said.add(text)
            self.say(text)

    def end_pass(self) -> None:
        if self.symbols is not None:
            self.symbols.close()
            self.symbols = None

    # ------------------------------------------------------------ finding

    def pending(self) -> list[str]:
        """Closed set versions not sent yet (nor refused in this run),
        oldest first; at most ``queue`` new `.info` files are read a pass."""
        names = set(self.qdir.names())
        self.sent &= names  # retention removed the rest
        self.refused = {n: why for n, why in self.refused.items() if n in names}
        self.known = {n: c for n, c in self.known.items() if n in names}
        reads = 0
        now = time.time()
        ready = []
        for name in sorted(names):
            if ".info#" not in name or name.startswith(".") or name in self.sent \
                    or name in self.refused:
                continue
            try:
                st = self.qdir.lstat(name)
            except OSError:
                continue
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            c = self.known.get(name)
            if c is None or c.key != key:
                if reads >= self.opts.queue:
                    continue
                reads += 1
                c = self._candidate(name, key)
                if c is None:
                    continue
                self.known[name] = c
            if c.closed or now - key[2] / 1e9 > self.opts.settled:
                ready.append(c)
        ready.sort(key=lambda c: (c.end, c.name))
        return [c.name for c in ready]

    def _candidate(self, name: str, key: tuple[int, int, int]) -> Candidate | None:
        ts = self._read(name, objects=False)
        if ts is None:
            return None
        task = ts.info.task
        end = task.end_time or task.start_time or key[2] / 1e9
        return Candidate(name, key, end, task.state == "closed")

    def _read(self, name: str, objects: bool = True) -> StoredSet | None:
        set_name = parse_set_name(name)
        try:
            return read_set(self.opts.directory, name, set_name, DEFAULT_LIMITS, objects)
        except (ViewError, QFormatError, LimitExceeded) as e:
            if self.qdir.exists(name):
                self._skip(name, f"cannot read it: {e}")
            return None

    def _skip(self, name: str, why: str) -> None:
        """A slice that will never go (its files cannot make a profile):
        named as done, so it blocks nothing."""
        self.say(f"{os.path.join(self.opts.directory, name)}: not pushed: {why}")
        self._delivered(name)

    def _delivered(self, name: str) -> None:
        self.sent.add(name)
        write_sent(self.qdir, self.sent)

    # ------------------------------------------------------------ sending

    def push(self, name: str) -> str:
        """Send one set version; its outcome (a retry leaves it unsent)."""
        if self.waker.stop:
            return Outcome.STOPPED
        ts = self._read(name)
        if ts is None:
            return Outcome.REJECTED
        if self.symbols is None:
            self.symbols = Symbols(SymbolCache(None), [], self.warn, DEFAULT_LIMITS.copy_size, {})
        try:
            tables = tables_named_by(self.symbols, [ts], ReportOptions(), self.warn)
            body = pprof.encode(tables)
        except (ViewError, QFormatError, LimitExceeded, ValueError) as e:
            self._skip(name, str(e))
            return Outcome.REJECTED
        if not tables.samples:
            self._delivered(name)  # nothing to send: an empty slice
            return Outcome.SENT
        outcome, error = self._post(ingest_query(self.opts.app, ts, tables, self.opts.service),
                                    body)
        if outcome == Outcome.STOPPED:
            return outcome
        if outcome == Outcome.RETRY:
            if error != self.last_error:
                self.say(f"cannot push to {self.opts.url}: {error}; will retry")
            self.last_error = error
            return outcome
        if self.last_error is not None:
            self.say(f"pushing to {self.opts.url} again")
            self.last_error = None
        if outcome == Outcome.REJECTED:
            self.refused[name] = error
            self.say(f"{os.path.join(self.opts.directory, name)}: not pushed: {self.opts.url} "
                     f"refused it: {error}; the next q-push tries it again")
        else:
            self._delivered(name)
        return outcome

    def _post(self, query: str, body: bytes) -> tuple[str, str]:
        watch = self.waker.watch(self.opts.timeout)
        try:
            answer = pushhttp.post(self.opts.url, f"/ingest?{query}", body, HEADERS, watch)
        except pushhttp.Stopped:
            return Outcome.STOPPED, ""
        except pushhttp.TimedOut:
            if watch.ends_at() < watch.deadline:
                return Outcome.RETRY, "the drain time (--drain) ran out"
            return Outcome.RETRY, f"no whole answer within {self.opts.timeout:g} s (--timeout)"
        except pushhttp.Failed as e:
            return Outcome.RETRY, str(e)
        return judge(answer)

    def unsent(self) -> int:
        """Closed slices left unsent: pending, or refused in this run."""
        return len(self.pending()) + len(self.refused)

    def why_unsent(self) -> str | None:
        return self.last_error or next(reversed(self.refused.values()), None)



def judge(answer: pushhttp.Answer) -> tuple[str, str]:
    """A final answer's outcome, and what to say of it: only a 2xx
    delivers. A redirect is retried, not followed: the body would go
    where the server says (another host or port), and as a GET, without
    it, whose 200 would count a slice as delivered that nobody took."""
    why = f"HTTP {answer.status} {answer.reason}".rstrip()
    if 200 <= answer.status < 300:
        return Outcome.SENT, ""
    if 300 <= answer.status < 400:
        to = f" to {answer.location}" if answer.location else ""
        return Outcome.RETRY, f"{why}{to}: redirects are not followed"
    if 400 <= answer.status < 500 and answer.status not in RETRY_STATUSES:
        return Outcome.REJECTED, why
    return Outcome.RETRY, why  # a 5xx, 408, 425, 429, a final 1xx or no status HTTP has


@dataclass(frozen=True)
class RequestWatch:
    """What one request answers to (pushhttp.Watch): its own deadline, or
    the end of a drain if that comes first; a stop."""
    waker: Waker
    deadline: float
    fd: int

    def ends_at(self) -> float:
        drain_until = self.waker.drain_until
        return self.deadline if drain_until is None else min(self.deadline, drain_until)

    def stopped(self) -> bool:
        return self.waker.stop

    def clear(self) -> None:
        self.waker.clear()


class Waker:
    """The signals q-push answers. SIGTERM and SIGINT stop it at once: a
    request in flight is abandoned (its slice stays unsent). SIGUSR1 asks
    for a drain: what is closed is pushed for up to ``drain`` seconds
    more, requests in flight included, and then q-push ends (q-syscollect
    asks so once its collectors wrote their final checkpoint). Each signal
    also ends a wait at once."""

    def __init__(self, drain: float) -> None:
        self.stop = False
        self.drain = drain
        self.drain_until: float | None = None
        self.fd, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(w)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_stop)
        signal.signal(signal.SIGUSR1, self._on_drain)
        # they are how q-push is ended: blocked by whoever started it, they would not be
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT,
                                                    signal.SIGUSR1})

    def _on_stop(self, signum: int, frame: object) -> None:
        self.stop = True

    def _on_drain(self, signum: int, frame: object) -> None:
        self.begin_drain()

    def begin_drain(self) -> None:
        if self.drain_until is None:
            self.drain_until = time.monotonic() + self.drain

    def draining(self) -> bool:
        return self.drain_until is not None

    def drained(self) -> bool:
        return self.drain_until is not None and time.monotonic() >= self.drain_until

    def watch(self, seconds: float) -> RequestWatch:
        """For a request that may last ``seconds``, from now."""
        return RequestWatch(self, time.monotonic() + seconds, self.fd)

    def clear(self) -> None:
        try:
            while os.read(self.fd, 256):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def wait(self, seconds: float) -> None:
        if self.stop or seconds <= 0:
            return
        try:
            select.select([self.fd], [], [], seconds)
        except InterruptedError:
            pass
        self.clear()


def backoff(failures: int, cap: float) -> float:
    """Seconds before the next attempt: doubling from 1, capped, with jitter
    (many hosts that lost the same server do not all come back at once)."""
    return min(cap, 2.0 ** min(failures - 1, 30)) * random.uniform(0.5, 1.0)


def run(opts: Options, pusher: Pusher, waker: Waker) -> int:
    failures = 0
    sent = 0
    while not waker.stop:
        if opts.parent is not None and os.getppid() != opts.parent:
            waker.begin_drain()  # q-syscollect is gone
        progress = False
        for name in pusher.pending():
            if waker.stop or waker.drained():
                break
            outcome = pusher.push(name)
            if outcome == Outcome.STOPPED:
                break
            if outcome == Outcome.RETRY:
                failures += 1
                break
            failures, progress = 0, True
            sent += outcome == Outcome.SENT
        pusher.end_pass()
        if waker.stop:
            break
        if waker.draining() or not opts.interval:
            to_try = len(pusher.pending())
            if not to_try or (waker.draining() and (waker.drained() or failures)) \
                    or (not opts.interval and failures >= opts.retries):
                break
        if failures:
            waker.wait(backoff(failures, opts.backoff_cap))
        elif not progress:
            waker.wait(opts.interval)
    return _end(opts, pusher, sent)


def _end(opts: Options, pusher: Pusher, sent: int) -> int:
    left = pusher.unsent()
    if left:
        why = pusher.why_unsent()
        pusher.say(f"{left} closed slice{'s' if left != 1 else ''} of {opts.directory} not "
                   f"pushed to {opts.url}{f': {why}' if why else ''}; the next q-push tries "
                   f"again ({STATE_NAME} names what went)")
        return 1
    if not opts.quiet and not opts.interval:
        pusher.say(f"pushed {sent} slice{'s' if sent != 1 else ''} of {opts.directory} "
                   f"to {opts.url}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, formatter_class=HelpFormatter, description="Send the closed slices of a .q "
        "directory to a Pyroscope-compatible /ingest endpoint as pprof profiles, each once (at "
        "least). Only a 2xx answer delivers a slice: a redirect (3xx) is not followed but "
        "retried, like a 5xx or no whole answer by the --timeout deadline; a 4xx leaves the "
        "slice unsent for the next q-push. SIGTERM "
        "or SIGINT ends q-push at once (a request in flight is abandoned: its slice stays "
        "unsent).",
        epilog="exit status: 0 every closed slice pushed (for --follow: when it ended), 1 "
        "slices left unsent (the last line says how many and why) or a directory problem, 2 a "
        "usage error")
    p.add_argument("url", metavar="URL", help="the server, e.g. http://pyroscope:4040")
    p.add_argument("directory", metavar="DIR", help="a .q directory")
    p.add_argument("--follow", action="store_true",
                   help="keep watching DIR and push each slice once it is closed, until "
                        "SIGTERM")
    p.add_argument("--app", default="q-tools", help="application name (default q-tools)")
    p.add_argument("--service", help="a service label for every series")
    p.add_argument("--timeout", type=positive_float, default=10.0, metavar="SECS",
                   help="one deadline for each request, from connecting to the last byte of "
                        "the answer (default 10)")
    p.add_argument("--max-backoff", type=positive_float, default=300.0, metavar="SECS",
                   help="longest wait between retries (default 300)")
    p.add_argument("--retries", type=positive_int, default=5, metavar="N",
                   help="without --follow: give up after N failures in a row (default 5)")
    p.add_argument("--settled", type=positive_float, default=86400.0, metavar="SECS",
                   help="push an open set not rewritten for SECS: its writer is gone (a "
                        "killed run; default 86400: a live collector leaves an idle set "
                        "alone until its slice ends)")
    p.add_argument("--interval", type=positive_float, default=5.0, metavar="SECS",
                   help="--follow: look for closed slices every SECS (default 5)")
    p.add_argument("--drain", type=positive_float, default=20.0, metavar="SECS",
                   help="on SIGUSR1 (q-syscollect sends it at the end of its run): push what "
                        "is closed for up to SECS more, requests in flight included, then end "
                        "(default 20)")
    p.add_argument("--queue", type=positive_int, default=1000, metavar="N",
                   help="set versions read per pass at most (default 1000)")
    p.add_argument("-q", dest="quiet", action="store_true", help="no summary line")
    p.add_argument("--parent", type=int, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        url = check_url(args.url)
    except ValueError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    opts = Options(url, args.directory, args.app, args.service, args.timeout,
                   args.max_backoff, args.settled, args.queue, args.retries, args.drain,
                   args.interval if args.follow else 0.0, args.parent, args.quiet)

    def say(text: str) -> None:  # one line, whatever names of the .q it quotes
        print(f"{PROG}: {printable(text)}", file=sys.stderr, flush=True)

    if args.parent is not None:
        os.nice(10)  # beside q-syscollect: its collectors come first
    waker = Waker(opts.drain)
    try:
        with QDir.open(args.directory) as qdir:
            if not os.access(".", os.W_OK | os.X_OK, dir_fd=qdir.fd):  # the state file goes there
                say(f"{args.directory}: cannot write {STATE_NAME} there (permission denied)")
                return 1
            return run(opts, Pusher(opts, qdir, say, waker), waker)
    except (QFormatError, ViewError) as e:
        say(str(e))
        return 1
    except OSError as e:
        say(f"{args.directory}: {e.strerror or e}")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
