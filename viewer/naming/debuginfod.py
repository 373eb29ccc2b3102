"""Debug files (and sources) fetched by build-id from debuginfod servers.

Only when servers are named: ``--debuginfod URL`` or ``DEBUGINFOD_URLS``
(space-separated, as elfutils reads it); never otherwise. Each file is
fetched once into the q-tools cache directory (``debuginfod/BUILD-ID/``),
with a timeout per request (``DEBUGINFOD_TIMEOUT`` seconds, default 30)
and a size limit (``DEBUGINFOD_MAXSIZE`` bytes, default 1 GiB); a server
that fails is warned about once and not asked again in the run. A debug
file whose build-id is not the one asked for is thrown away. What no
server has is remembered for a day (an empty ``.missing`` file), so a
stripped library without debug info costs one request a day, not one a
view.
"""

from __future__ import annotations

import os
import time
from typing import Callable

from qtools.common.cachedir import private_dir

DEFAULT_TIMEOUT = 30.0  # seconds per request
DEFAULT_MAXSIZE = 1 << 30  # bytes of one file
MISSING_FOR = 24 * 3600  # seconds a miss is remembered
HEX = frozenset("0123456789abcdef")


def servers_from(option: list[str], environ: dict[str, str] | None = None) -> list[str]:
    """The servers to ask: ``--debuginfod`` URLs, else ``DEBUGINFOD_URLS``."""
    env = os.environ if environ is None else environ
    urls = list(option) or env.get("DEBUGINFOD_URLS", "").split()
    if not urls:
        return []
    import urllib.parse  # with ipaddress: 3 ms of every view's start-up otherwise
    return [u.rstrip("/") for u in urls
            if urllib.parse.urlsplit(u).scheme in ("http", "https")]


def _number(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, ""))
        return value if value > 0 else default
    except ValueError:
        return default


class Debuginfod:
    """Fetches by build-id into ``directory`` (a temporary one when None)."""

    def __init__(self, servers: list[str], directory: str | None,
                 warn: Callable[[str], None]) -> None:
        self.servers = servers
        self.warn = warn
        self.timeout = _number("DEBUGINFOD_TIMEOUT", DEFAULT_TIMEOUT)
        self.maxsize = int(_number("DEBUGINFOD_MAXSIZE", DEFAULT_MAXSIZE))
        if directory is not None and not private_dir(directory):
            # Files are handed on by path: only a directory nobody else can
            # change, up to the root (not one in another user's home, say).
            warn(f"{directory}: not a directory of this user's alone; debuginfod "
                 "fetches go to a temporary directory")
            directory = None
        self._own = directory is None
        if directory is None:
            import tempfile  # (with random, shutil, bz2, lzma: for fetching views only)
            directory = tempfile.mkdtemp(prefix="q-view-debuginfod-")
        self.directory = directory
        self.failed: set[str] = set()
        self.asked: dict[str, str | None] = {}
        self._last_404 = False  # the last fetch was answered "not here"

    def close(self) -> None:
        if self._own:
            import shutil
            shutil.rmtree(self.directory, ignore_errors=True)

    def debuginfo(self, build_id: str, check: Callable[[str], bool]) -> str | None:
        """A local path of the debug file of ``build_id``, fetched if need
        be; ``check(path)`` must accept it (its build-id)."""
        return self._get(build_id, "debuginfo", "debuginfo", check)

    def source(self, build_id: str, path: str) -> str | None:
        """A local copy of the source file ``path`` (absolute, as DWARF names
        it) of the object ``build_id``."""
        if not os.path.isabs(path):
            return None
        import urllib.parse
        name = "source-" + urllib.parse.quote(path, safe="")[:200]
        return self._get(build_id, "source" + urllib.parse.quote(path), name, lambda p: True)

    def _get(self, build_id: str, what: str, name: str,
             check: Callable[[str], bool]) -> str | None:
        build_id = build_id.lower()
        if not self.servers or len(build_id) < 4 or not set(build_id) <= HEX:
            return None
        key = f"{build_id}/{what}"
        if key in self.asked:
            return self.asked[key]
        self.asked[key] = None
        folder = os.path.join(self.directory, build_id)
        target = os.path.join(folder, name)
        missing = target + ".missing"
        if os.path.isfile(target) and not os.path.islink(target):
            self.asked[key] = target
            return target
        try:
            if time.time() - os.stat(missing).st_mtime < MISSING_FOR:
                return None
        except OSError:
            pass
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        except OSError as e:
            self.warn(f"{folder}: cannot create: {e.strerror}; nothing fetched from debuginfod")
            return None
        answered = True  # every server said it has not got it (404)
        for server in self.servers:
            if server in self.failed:
                answered = False
                continue
            got = self._fetch(server, f"{server}/buildid/{build_id}/{what}", folder)
            if got is None:
                answered = answered and self._last_404
                continue
            if not check(got):
                os.unlink(got)
                self.warn(f"{server}: the debug file served for build-id {build_id} has "
                          "another build-id; not used")
                continue
            os.replace(got, target)
            self.asked[key] = target
            return target
        if answered:  # not a failure, which the next view retries
            try:
                with open(missing, "w"):
                    pass
            except OSError:
                pass
        return None

    def _fetch(self, server: str, url: str, folder: str) -> str | None:
        """The body of ``url`` in a temporary file of ``folder``; None when the
        server has not got it (404) or fails (one warning per server)."""
        import urllib.error  # with urllib.request (ssl, http, email): 20 ms of every
        import urllib.request  # view's start-up, for the few that fetch
        import tempfile
        self._last_404 = False
        fd, tmp = tempfile.mkstemp(prefix=".fetch-", dir=folder)
        try:
            with os.fdopen(fd, "wb") as out, \
                    urllib.request.urlopen(url, timeout=self.timeout) as response:
                length = response.headers.get("Content-Length")
                if length and length.isdigit() and int(length) > self.maxsize:
                    raise _TooLarge()
                size = 0
                while chunk := response.read(1 << 20):
                    size += len(chunk)
                    if size > self.maxsize:
                        raise _TooLarge()
                    out.write(chunk)
            return tmp
        except urllib.error.HTTPError as e:
            os.unlink(tmp)
            if e.code == 404:
                self._last_404 = True
            else:
                self._failed(server, f"HTTP {e.code}")
            return None
        except _TooLarge:
            os.unlink(tmp)
            self.warn(f"{url}: larger than {self.maxsize} bytes (DEBUGINFOD_MAXSIZE); "
                      "not fetched")
            return None
        except (OSError, ValueError) as e:  # URLError, timeouts, resets, bad URLs
            os.unlink(tmp)
            reason = getattr(e, "reason", None) or e
            self._failed(server, str(reason))
            return None

    def _failed(self, server: str, why: str) -> None:
        self.failed.add(server)
        self.warn(f"debuginfod server {server}: {why}; not asked again in this run")


class _TooLarge(Exception):
    pass
