"""Stopping a collector at once, but never between the data files of one set.

A collector whose supervisor is gone stops by an exception raised from a
signal handler, out of whatever runs. Only a few steps must not be cut: the
rewrite of one set's `.hist`, `.stack` and `.edge`, which a reader takes
together under the `.info` that names them. Those run ``uninterrupted()``:
the stop waits until they are done (a moment: files of one set).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


class ParentGone(BaseException):
    """The supervisor is gone: stop at once, whatever is running.

    A BaseException, so the ``except Exception`` of code that tolerates
    errors (a copy that fails, a task that vanished) lets it through."""


_held = 0
_pending = False


def stop_now() -> None:
    """Raise ParentGone here, or at the end of the uninterrupted() step under way."""
    global _pending
    _pending = True
    if not _held:
        raise ParentGone()


@contextmanager
def uninterrupted() -> Iterator[None]:
    global _held
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if _pending and not _held:
            raise ParentGone()
