"""``q-view --watch``: redraw like top whenever a checkpoint lands.

Driven by file events (the watchdog library: inotify on Linux), not by
polling: a collector's checkpoint replaces `.info` files by rename, and
that event triggers the redraw. A burst of events is drawn once.
"""

from __future__ import annotations

import io
import os
import threading
import time
from typing import Callable, TextIO

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from qtools.qformat import QFormatError

from .errors import ViewError

CLEAR = "\x1b[H\x1b[2J"
SETTLE = 0.3  # seconds to let a checkpoint's other files land before redrawing


class _InfoChanged(FileSystemEventHandler):
    def __init__(self, flag: threading.Event) -> None:
        self.flag = flag

    def on_any_event(self, event: FileSystemEvent) -> None:
        path = getattr(event, "dest_path", "") or event.src_path
        name = os.path.basename(os.fsdecode(path))
        if ".info" in name and not name.startswith("."):
            self.flag.set()


def watched_directories(inputs: list[str]) -> list[str]:
    dirs = {os.path.abspath(i if os.path.isdir(i) else os.path.dirname(i) or ".")
            for i in inputs}
    return sorted(dirs)


def watch(inputs: list[str], draw: Callable[[TextIO], int], out: TextIO,
          redraws: int | None = None) -> int:
    """Draw, then draw again after every change, until Ctrl-C (or ``redraws``)."""
    changed = threading.Event()
    observer = Observer()
    for directory in watched_directories(inputs):
        if not os.path.isdir(directory):
            raise ViewError("no such directory to watch", directory)
        observer.schedule(_InfoChanged(changed), directory, recursive=False)
    observer.start()
    drawn = 0
    try:
        while redraws is None or drawn < redraws:
            screen = io.StringIO()
            try:
                draw(screen)
            except (ViewError, QFormatError, OSError) as e:
                screen.write(f"q-view: {e}\n")  # a set being replaced: the next event redraws
            stamp = time.strftime("%H:%M:%S")
            out.write(f"{CLEAR}q-view --watch {' '.join(inputs)}   {stamp}   (Ctrl-C to stop)\n\n")
            out.write(screen.getvalue())
            out.flush()
            drawn += 1
            changed.wait()
            time.sleep(SETTLE)
            changed.clear()
    except KeyboardInterrupt:
        pass
    finally:
        observer.stop()
        observer.join()
    return 0
