"""Which closed slices of a `.q` directory were pushed: the ``.push-state`` file.

q-push writes it (after each delivery, atomically: a reader sees the old
list or the new, whole), and q-syscollect's retention reads it so that it
removes a slice nobody has received only when ``--max-size`` forces it.
One set version (``NAME.info#N``) a line, after a first line that names
the format; a version missing from the list is unsent. Delivery is at
least once: a push that crashes after the server took a slice and before
this file names it sends that one slice again.
"""

from __future__ import annotations

import os

from .errors import QFormatError
from .store import QDir

STATE_NAME = ".push-state"
HEADER = "q-push-state 1"
MAX_STATE_BYTES = 64 << 20  # about a million set versions
MAX_URL = 2048


def read_sent(qdir: QDir) -> set[str] | None:
    """The set versions named as sent (None: no state file: nothing sent).

    A file that is not ours (a link, not regular, too large, another
    header) is a QFormatError naming it."""
    path = qdir.join(STATE_NAME)
    try:
        fd = os.open(STATE_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=qdir.fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise QFormatError(f"cannot read: {e.strerror}", path) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not (st.st_mode & 0o170000 == 0o100000):
            raise QFormatError("not a regular file", path)
        data = f.read(MAX_STATE_BYTES + 1)
    if len(data) > MAX_STATE_BYTES:
        raise QFormatError(f"larger than {MAX_STATE_BYTES} bytes", path)
    lines = data.decode("utf-8", "replace").splitlines()
    if not lines or lines[0] != HEADER:
        raise QFormatError(f"not a push state file (first line is not {HEADER!r})", path)
    return {line for line in lines[1:] if ".info#" in line and "/" not in line}


def write_sent(qdir: QDir, sent: set[str]) -> None:
    """Replace the state file with ``sent`` (set versions no longer in the
    directory are left out: retention removed them)."""
    present = set(qdir.names())
    lines = [HEADER, *sorted(n for n in sent if n in present)]
    qdir.atomic_write(STATE_NAME, ("\n".join(lines) + "\n").encode(), mode=0o640)


def check_url(url: str) -> str:
    """``url`` if it can be pushed to (http or https, a host), else ValueError
    saying why, in one line."""
    if len(url) > MAX_URL or any(c.isspace() or ord(c) < 32 for c in url):
        raise ValueError(f"not a URL: {url[:80]!r}")
    if not url.isascii():  # a request line and Host header are ASCII
        raise ValueError(f"not an ASCII URL (percent-encode the rest, punycode a host name): "
                         f"{url[:80]!r}")
    from urllib.parse import urlsplit  # only with --push: not imported at every start
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"not an http:// or https:// URL: {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"bad port in URL: {url!r}") from None
    if not parts.hostname or port == 0 or parts.query or parts.fragment:
        raise ValueError(f"URL needs a host and no query or fragment: {url!r}")
    return url.rstrip("/")
