"""Keeping a long-running `.q` bounded: compress closed slices, remove the
oldest when over size or age, and collect object copies nobody refers to.

The decisions are pure functions over what ``scan`` found; the parent
process applies them between checkpoints. A set counts as closed when its
writer said so (``q:state "closed"``) or when it has not been rewritten for
longer than a collector would let an open set sit (its writer is gone,
e.g. after ``kill -9``). Deleting or compressing a set that was open after
all does no harm: its collector rewrites every file it owns whole.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from qtools.qformat import QDir, QFormatError, read_info
from qtools.qformat.data import GZIP_MAGIC
from qtools.qformat.store import TEMP_PREFIX

CHUNK = 1 << 20


@dataclass
class SetFiles:
    """One versioned set as found on disk."""

    info: str
    end_time: float
    closed: bool
    data: list[str]
    copies: list[str]
    size: int = 0


@dataclass
class Scan:
    sets: list[SetFiles] = field(default_factory=list)
    copies: dict[str, os.stat_result] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(s.size for s in self.sets) + sum(_own_bytes(st) for st in self.copies.values())


def _own_bytes(st: os.stat_result) -> int:
    """Disk space a file costs the directory: nothing for a hard link that
    another name still holds, its blocks otherwise."""
    if st.st_nlink > 1 or not stat.S_ISREG(st.st_mode):
        return 0
    return st.st_blocks * 512


def scan(qdir: QDir, now: float, stale_after: float) -> Scan:
    out = Scan()
    for name in qdir.names():
        if name.startswith(TEMP_PREFIX):
            continue
        if name.startswith("."):
            try:
                out.copies[name] = qdir.lstat(name)
            except OSError:
                pass
            continue
        if ".info#" not in name:
            continue
        try:
            info = read_info(qdir.join(name))
        except QFormatError:
            out.unreadable.append(name)
            continue
        end = info.task.end_time or info.task.start_time or 0.0
        closed = info.task.state == "closed" or end < now - stale_after
        entry = SetFiles(name, end, closed, info.data_files(), info.copies())
        for f in [name, *entry.data]:
            try:
                entry.size += qdir.lstat(f).st_blocks * 512
            except OSError:
                pass
        out.sets.append(entry)
    return out


def choose_removals(found: Scan, now: float, max_size: int | None,
                    max_age: float | None) -> list[SetFiles]:
    """Closed sets to remove, oldest first: all beyond ``max_age``, then as
    many more as it takes to get under ``max_size``."""
    closed = sorted((s for s in found.sets if s.closed), key=lambda s: s.end_time)
    remove = [s for s in closed if max_age is not None and s.end_time < now - max_age]
    if max_size is not None:
        size = found.size - sum(s.size for s in remove)
        for s in closed:
            if size <= max_size:
                break
            if s not in remove:
                remove.append(s)
                size -= s.size
    return remove


def unreferenced_copies(found: Scan, removed: list[SetFiles], now: float,
                        grace: float) -> list[str]:
    """Copies no remaining `.info` names, older than ``grace`` seconds (a
    collector may have just made one for a set it has not written yet)."""
    if found.unreadable:
        return []  # an .info we cannot read may refer to anything
    gone = {s.info for s in removed}
    wanted = {c for s in found.sets if s.info not in gone for c in s.copies}
    return sorted(n for n, st in found.copies.items()
                  if n not in wanted and st.st_ctime < now - grace)


def remove_sets(qdir: QDir, sets: list[SetFiles]) -> None:
    for s in sets:
        qdir.remove(s.info)  # the .info first: a reader never finds it without its data
        for f in s.data:
            qdir.remove(f)


def compress_closed(qdir: QDir, found: Scan) -> int:
    """gzip the data files of closed sets that are still plain text."""
    done = 0
    for s in found.sets:
        if not s.closed:
            continue
        for name in s.data:
            try:
                fd = qdir.open_read(name)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as f:
                if f.read(2) == GZIP_MAGIC:
                    continue
                f.seek(0)
                qdir.atomic_write(name, iter(lambda: f.read(CHUNK), b""), compress=True,
                                  sync=False)
                done += 1
    if done:
        qdir.sync()
    return done


@dataclass
class Report:
    compressed: int = 0
    removed: list[str] = field(default_factory=list)
    collected: list[str] = field(default_factory=list)
    size: int = 0
    sets: int = 0


def maintain(qdir: QDir, now: float, *, stale_after: float, grace: float,
             max_size: int | None = None, max_age: float | None = None,
             compress: bool = False) -> Report:
    """One round of upkeep; raises OSError only from writing (a full disk)."""
    found = scan(qdir, now, stale_after)
    report = Report()
    removals = choose_removals(found, now, max_size, max_age)
    remove_sets(qdir, removals)
    report.removed = [s.info for s in removals]
    for name in unreferenced_copies(found, removals, now, grace):
        if qdir.remove(name):
            report.collected.append(name)
    kept = [s for s in found.sets if s not in removals]
    if compress:
        report.compressed = compress_closed(qdir, Scan(kept, found.copies))
    report.sets = len(kept)
    report.size = scan(qdir, now, stale_after).size if (removals or report.compressed) \
        else Scan(kept, {n: st for n, st in found.copies.items()
                         if n not in report.collected}).size
    return report
