"""``q-view --watch``: redraw like top whenever a checkpoint lands.

Driven by file events (the watchdog library: inotify on Linux), not by
polling, and only by the events a checkpoint makes: a new `.info` version
is created (a hard link) and a rewritten one is renamed into place. Reads
make no events here (q-view's own reads of the `.info` files once woke it
three times a second). A checkpoint writes many files: the redraw waits
until they have stopped landing. Where inotify cannot be had (its watch
limit reached), the directories' change times are looked at every few
seconds instead.

The screen is fitted to the terminal: the top rows of each table, no line
wider than the terminal, so the head of the report never scrolls away.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import threading
import time
from typing import Callable, TextIO

from watchdog.events import (FileCreatedEvent, FileMovedEvent, FileSystemEvent,
                             FileSystemEventHandler)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from qtools.qformat import QFormatError

from ..model.viewerrors import ViewError
from ..model.escape import printable
from ..render.fit import fit_text

CLEAR = "\x1b[H\x1b[2J"
QUIET = 0.5  # seconds without a new `.info` before a redraw: the checkpoint is complete
LONGEST = 3.0  # seconds a redraw waits at most while `.info` files keep landing
POLL = 2.0  # seconds between looks at the directories when inotify cannot be had
CHROME = 3  # screen lines not for the report: the title, a blank line, the cursor's line


class _InfoLanded(FileSystemEventHandler):
    def __init__(self, flag: threading.Event) -> None:
        self.flag = flag

    def on_any_event(self, event: FileSystemEvent) -> None:
        path = event.dest_path if isinstance(event, FileMovedEvent) else event.src_path
        name = os.path.basename(os.fsdecode(path))
        if ".info#" in name and not name.startswith("."):
            self.flag.set()


def watched_directories(inputs: list[str]) -> list[str]:
    dirs = {os.path.abspath(i if os.path.isdir(i) else os.path.dirname(i) or ".")
            for i in inputs}
    return sorted(dirs)


def _observe(directories: list[str], flag: threading.Event) -> BaseObserver | None:
    """An inotify observer of checkpoints in ``directories``, or None where
    inotify is not available (then the caller polls)."""
    observer = Observer()
    try:
        for directory in directories:
            observer.schedule(_InfoLanded(flag), directory, recursive=False,
                              event_filter=[FileCreatedEvent, FileMovedEvent])
        observer.start()
    except OSError:
        return None
    return observer


def _stamps(directories: list[str]) -> list[int]:
    """Change times of the directories: a created or renamed entry moves them."""
    stamps = []
    for directory in directories:
        try:
            stamps.append(os.stat(directory).st_mtime_ns)
        except OSError:
            stamps.append(-1)
    return stamps


def screen(inputs: list[str], draw: Callable[[TextIO, int], int], columns: int,
           lines: int) -> str:
    """One screenful: a title line, then the report fitted to the terminal."""
    body = io.StringIO()
    rows = max(1, lines - CHROME)
    try:
        draw(body, rows)
    except (ViewError, QFormatError, OSError) as e:
        body.write(f"q-view: {printable(str(e))}\n")  # a set being replaced: redrawn at the next
    title = f"q-view --watch {printable(' '.join(inputs))}   {time.strftime('%H:%M:%S')}" \
            "   (Ctrl-C to stop)"
    return f"{CLEAR}{title[:columns]}\n\n{fit_text(body.getvalue(), rows, columns)}"


def watch(inputs: list[str], draw: Callable[[TextIO, int], int], out: TextIO,
          redraws: int | None = None) -> int:
    """Draw, then draw again after every checkpoint, until Ctrl-C (or ``redraws``).

    ``draw(out, rows)`` writes the report, ideally in ``rows`` lines."""
    directories = watched_directories(inputs)
    for directory in directories:
        if not os.path.isdir(directory):
            raise ViewError("no such directory to watch", directory)
    changed = threading.Event()
    observer = _observe(directories, changed)
    resized = signal.signal(signal.SIGWINCH, lambda *_: changed.set())
    # Ctrl-C is how a watch ends, as in top: even when started from a shell
    # that left SIGINT ignored (a background job without job control), which
    # would otherwise leave a watch nothing but SIGKILL can stop.
    interrupted = signal.signal(signal.SIGINT, signal.default_int_handler)
    drawn = 0
    try:
        while True:
            stamps = _stamps(directories) if observer is None else None
            size = shutil.get_terminal_size()
            out.write(screen(inputs, draw, size.columns, size.lines))
            out.flush()
            drawn += 1
            if redraws is not None and drawn >= redraws:
                break
            _wait(changed, directories, stamps)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGWINCH, resized)
        signal.signal(signal.SIGINT, interrupted)
        if observer is not None:
            observer.stop()
            observer.join()
    return 0


def _wait(changed: threading.Event, directories: list[str], stamps: list[int] | None) -> None:
    """Until a checkpoint has landed (and its files stopped landing); with
    ``stamps`` (no inotify), until the directories' change times move."""
    if stamps is None:
        changed.wait()
    else:
        while not changed.wait(POLL) and _stamps(directories) == stamps:
            pass
    first = time.monotonic()
    changed.clear()
    while changed.wait(QUIET) and time.monotonic() - first < LONGEST:
        changed.clear()
    changed.clear()
