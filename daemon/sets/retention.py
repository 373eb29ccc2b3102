"""Keeping a long-running `.q` bounded: compress closed slices, remove the
oldest when over size or age, and collect object copies nobody refers to.

A round must cost little when little changed: a service's directory holds
tens of thousands of sets. ``Index`` keeps what retention needs of each
`.info` (state, times, data files, copies, sizes) keyed by the file's
(inode, size, mtime): a file is parsed only when it is new or was replaced.
Every writer replaces files by rename, which changes the directory's
mtime, so a round in which the directory did not change lists nothing; a
closed set is never rewritten, so it is not even looked at again. Parsing
stops after ``PARSE_SECONDS`` a round (a restarted service meets 100,000
sets at once, and must keep answering its watchdog): until every `.info`
is known, no copy is collected and only known sets are removed.

Ages never come from the wall clock alone (see daemon/clock.py). Each set
gets a birth on the monotonic clock: a set of this run (a name that was not
there when the run began, ``begin``) or one seen to change was born when it
was seen; a set of an earlier run was born as long before as its recorded
end said when first seen (never after: a record from the future counts as
new). Its age is the
monotonic time since, so a stepped clock deletes nothing, and the sets
stay in birth order without sorting each round. A set counts as closed
when its writer said so (``q:state "closed"``) or when it has not changed
for longer than a collector lets an open set sit (its writer is gone, e.g.
after ``kill -9``). Deleting or compressing a set that was open after all
does no harm: its collector rewrites every file it owns whole.
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple

from qtools.qformat import QDir, QFormatError, read_info
from qtools.qformat.data import GZIP_MAGIC
from qtools.qformat.pushstate import STATE_NAME, read_sent
from qtools.qformat.store import TEMP_PREFIX

from ..clock import SYSTEM, Clock, Stamp

CHUNK = 1 << 20
DATA_TYPES = ("hist", "stack", "edge", "threads")
QUIET_SECONDS = 1.0
"""A directory whose mtime is this much older than our look at it cannot
change without its mtime changing (file times are coarser than ns)."""
PARSE_SECONDS = 2.0
"""Monotonic seconds of `.info` parsing per round at most (about 1,500 sets)."""

Key = tuple[int, int, int]  # inode, size, mtime_ns
UNSETTLED: Key = (-1, -1, -1)
"""The key of a file parsed within QUIET_SECONDS of its change: a file
replaced again within the same tick of the file clock may get the freed
inode back and the same size and mtime, so it is read again next round."""


def _key(st: os.stat_result) -> Key:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _own_bytes(st: os.stat_result) -> int:
    """Disk space a file costs the directory: nothing for a hard link that
    another name still holds, its blocks otherwise."""
    if st.st_nlink > 1 or not stat.S_ISREG(st.st_mode):
        return 0
    return st.st_blocks * 512


class SetFiles:
    """One versioned set as the index knows it."""

    __slots__ = ("info", "key", "born", "end_time", "state_closed", "data", "copies", "size",
                 "compressed")

    def __init__(self, info: str, key: Key, born: float, end_time: float, state_closed: bool,
                 data: list[str], copies: list[str], size: int = 0,
                 compressed: bool = False) -> None:
        self.info = info
        self.key = key
        self.born = born  # monotonic seconds: its age is the time since
        self.end_time = end_time  # as recorded (Unix seconds)
        self.state_closed = state_closed
        self.data = data
        self.copies = copies
        self.size = size
        self.compressed = compressed  # its data files were found (or made) gzip

    def age(self, mono: float) -> float:
        return mono - self.born

    def closed(self, mono: float, stale_after: float) -> bool:
        return self.state_closed or mono - self.born > stale_after


class Copy(NamedTuple):
    """One object copy as the index knows it."""

    key: Key
    born: float
    st: os.stat_result


class Report:
    """What one round of upkeep did."""

    __slots__ = ("compressed", "removed", "unsent_removed", "collected", "size", "sets",
                 "measured")

    def __init__(self) -> None:
        self.compressed = 0
        self.removed: list[str] = []
        self.unsent_removed: list[str] = []  # --max-size forced them
        self.collected: list[str] = []
        self.size = 0
        self.sets = 0
        self.measured = False  # every .info is known: ``size`` is the directory's


class Index:
    """What retention knows of a `.q` directory, kept between rounds."""

    def __init__(self, clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.sets: dict[str, SetFiles] = {}
        self.copies: dict[str, Copy] = {}
        self.unreadable: dict[str, Key] = {}
        self.orphans: dict[str, float] = {}  # data files without their .info: since when
        self.pending = 0  # .info files not parsed yet (over a round's budget)
        self.parses = 0  # .info files parsed so far (the cost this index saves)
        self.first_pass_done = False
        self.earlier: set[str] | None = None  # names there when the run began
        self._dir_mtime: int | None = None
        self._changed = True  # the derived views below need rebuilding
        self.by_birth: list[SetFiles] = []
        self.wanted: set[str] = set()  # copies the known sets name
        self.uncompressed: list[SetFiles] = []
        self.size = 0
        self.sent: set[str] | None = None  # with --push: the slices q-push delivered
        self._sent_key: Key | None = None
        self.copies_collected = 0  # copies removed so far, no set naming them

    # ------------------------------------------------------------ looking

    def begin(self, qdir: QDir) -> set[str]:
        """Note what an earlier run left, before this run writes anything:
        only those sets and copies are aged by their recorded times."""
        self.earlier = {n for n in qdir.names()
                        if ".info#" in n or (n.startswith(".") and not n.startswith(TEMP_PREFIX)
                                             and n != STATE_NAME)}
        return self.earlier

    def refresh(self, qdir: QDir) -> None:
        """Bring the index up to date with the directory."""
        now = self.clock.stamp()
        st = os.fstat(qdir.fd)
        if st.st_mtime_ns != self._dir_mtime:
            self._relist(qdir, now)
            quiet = now.wall - st.st_mtime_ns / 1e9 > QUIET_SECONDS
            self._dir_mtime = st.st_mtime_ns if quiet and not self.pending else None
        if self._changed:
            self.by_birth = sorted(self.sets.values(), key=lambda s: s.born)
            self.wanted = {c for s in self.sets.values() for c in s.copies}
            self.uncompressed = [s for s in self.by_birth if not s.compressed]
            self.size = sum(s.size for s in self.sets.values()) + sum(
                _own_bytes(c.st) for c in self.copies.values())
            self._changed = False

    def _relist(self, qdir: QDir, now: Stamp) -> None:
        names = qdir.names()
        earlier = self.earlier if self.earlier is not None else self.begin(qdir)
        stop_parsing = now.mono + PARSE_SECONDS
        pending = parsed_now = 0
        infos: dict[str, SetFiles] = {}
        copies: dict[str, Copy] = {}
        unreadable: dict[str, Key] = {}
        data_names: list[str] = []
        for name in names:
            if name.startswith(TEMP_PREFIX) or name == STATE_NAME:
                continue
            if name.startswith("."):
                try:
                    cst = qdir.lstat(name)
                except OSError:
                    continue
                old = self.copies.get(name)
                if old is not None and old.key == _key(cst):
                    copies[name] = Copy(old.key, old.born, cst)
                else:
                    age = max(0.0, now.wall - cst.st_ctime) if name in earlier else 0.0
                    copies[name] = Copy(_key(cst), now.mono - age, cst)
                continue
            if ".info#" not in name:
                if "#" in name:  # a versioned data file (an orphan if no .info names it)
                    data_names.append(name)
                continue
            entry = self.sets.get(name)
            if entry is not None and entry.state_closed:
                infos[name] = entry  # written for the last time
                continue
            try:
                ist = qdir.lstat(name)
            except OSError:
                continue
            key = _key(ist)
            if entry is not None and entry.key == key:
                infos[name] = entry
                continue
            if self.unreadable.get(name) == key:
                unreadable[name] = key
                continue
            if pending or (parsed_now and self.clock.mono() >= stop_parsing):
                pending += 1  # at least one a round, so every round makes progress
                continue
            parsed_now += 1
            parsed = self._parse(qdir, name, key, ist, now, name in earlier)
            earlier.discard(name)  # if it changes after this, it changes while we watch
            if parsed is not None and entry is not None and entry.key == UNSETTLED \
                    and (entry.end_time, entry.state_closed) == (parsed.end_time,
                                                                 parsed.state_closed):
                parsed.born, parsed.compressed = entry.born, entry.compressed  # read again
            if parsed is None:
                unreadable[name] = key
            else:
                infos[name] = parsed
        self._changed = True
        self.sets, self.copies, self.unreadable, self.pending = infos, copies, unreadable, pending
        self._note_orphans(data_names, set(names), now)
        if not pending:
            self.first_pass_done = True

    def _parse(self, qdir: QDir, name: str, key: Key, ist: os.stat_result, now: Stamp,
               earlier: bool) -> SetFiles | None:
        self.parses += 1
        try:
            info = read_info(qdir.join(name), follow=False)  # ours are never links
        except QFormatError:
            return None
        end = info.task.end_time or info.task.start_time or ist.st_mtime
        age = max(0.0, now.wall - end) if earlier else 0.0
        settled = now.wall - ist.st_mtime > QUIET_SECONDS
        entry = SetFiles(name, key if settled else UNSETTLED, now.mono - age, end,
                         info.task.state == "closed", info.data_files(), info.copies())
        entry.size = _size(qdir, [name, *entry.data])
        return entry

    def _note_orphans(self, data_names: list[str], present: set[str], now: Stamp) -> None:
        """Data files without their `.info` (a writer that died between the
        two): kept while a writer may still be at it, then collectable."""
        orphans: dict[str, float] = {}
        if not self.unreadable and not self.pending:  # else one may name any of them
            named = {f for s in self.sets.values() for f in s.data}
            for name in data_names:
                if name in named:
                    continue
                base, _, version = name.rpartition("#")
                stem, _, kind = base.rpartition(".")
                if kind not in DATA_TYPES or f"{stem}.info#{version}" in present:
                    continue
                orphans[name] = self.orphans.get(name, now.mono)
        self.orphans = orphans

    # ------------------------------------------------------------ deciding

    def read_push_state(self, qdir: QDir) -> None:
        """What q-push has delivered (``.push-state``), read again when it changed;
        a state file that cannot be read counts as nothing sent (keeps more)."""
        try:
            key = _key(qdir.lstat(STATE_NAME))
        except OSError:
            key = None
        if key is not None and key == self._sent_key and self.sent is not None:
            return
        try:
            self.sent = (read_sent(qdir) or set()) if key is not None else set()
        except QFormatError:
            self.sent = set()
        self._sent_key = key

    def unsent(self, s: SetFiles) -> bool:
        return self.sent is not None and s.info not in self.sent

    def removals(self, mono: float, stale_after: float, max_size: int | None,
                 max_age: float | None) -> list[SetFiles]:
        """Closed sets to remove, oldest first: all beyond ``max_age``, then
        as many more as it takes to get under ``max_size`` (once every
        `.info` is known: until then the size is not). With --push
        (``self.sent`` known) a slice not pushed yet is kept past
        ``max_age``, and removed for ``max_size`` only after every pushed one."""
        remove: list[SetFiles] = []
        if max_age is not None:
            for s in self.by_birth:
                if s.age(mono) <= max_age:
                    break
                if s.closed(mono, stale_after) and not self.unsent(s):
                    remove.append(s)
        if max_size is None or self.pending:
            return remove
        size = self.size - sum(s.size for s in remove)
        chosen = {s.info for s in remove}
        for unsent_too in (False, True):
            for s in self.by_birth:
                if size <= max_size:
                    return remove
                if s.info not in chosen and s.closed(mono, stale_after) \
                        and (unsent_too or not self.unsent(s)):
                    remove.append(s)
                    chosen.add(s.info)
                    size -= s.size
        return remove

    def unreferenced_copies(self, mono: float, grace: float) -> list[str]:
        """Copies no known `.info` names, older than ``grace`` (a collector
        may have just made one for a set it has not written yet: it names
        it at that set's next write, within a few checkpoints)."""
        if self.unreadable or self.pending:
            return []  # an .info not read may refer to anything
        return sorted(n for n, c in self.copies.items()
                      if n not in self.wanted and mono - c.born > grace)

    # ------------------------------------------------------------ changing

    def _forget(self, sets: list[SetFiles], names: list[str]) -> None:
        for s in sets:
            del self.sets[s.info]
        for name in names:
            self.copies.pop(name, None)
            self.orphans.pop(name, None)
        self._changed = True
        self._dir_mtime = None

    def compress_closed(self, qdir: QDir, mono: float, stale_after: float) -> int:
        """gzip the data files of closed sets that are still plain text; a
        set is looked at once per content of its `.info`."""
        done = 0
        for s in self.uncompressed:
            if not s.closed(mono, stale_after):
                continue
            for name in s.data:
                done += _compress(qdir, name)
            s.compressed = True
            old, s.size = s.size, _size(qdir, [s.info, *s.data])
            self.size += s.size - old
        self.uncompressed = [s for s in self.uncompressed if not s.compressed]
        if done:
            qdir.sync()
            self._dir_mtime = None
        return done

    def maintain(self, qdir: QDir, *, stale_after: float, grace: float,
                 max_size: int | None = None, max_age: float | None = None,
                 compress: bool = False, push: bool = False,
                 copy_grace: float | None = None) -> Report:
        """One round of upkeep; raises OSError only from writing (a full disk).
        ``push``: keep slices q-push has not delivered (see ``removals``).
        Data files without their `.info` go after ``grace``, copies no set
        names after ``copy_grace`` (``grace`` unless given)."""
        self.refresh(qdir)
        if push:
            self.read_push_state(qdir)
        mono = self.clock.mono()
        report = Report()
        removals = self.removals(mono, stale_after, max_size, max_age)
        report.unsent_removed = [s.info for s in removals if self.unsent(s)]
        for s in removals:
            qdir.remove(s.info)  # the .info first: a reader never finds it without its data
            for f in s.data:
                qdir.remove(f)
        report.removed = [s.info for s in removals]
        if removals:
            self._forget(removals, [])
            self.refresh(qdir)  # copies only the removed sets named are unreferenced now
        orphans = sorted(n for n, t in self.orphans.items() if mono - t > grace)
        copy_grace = grace if copy_grace is None else copy_grace
        unreferenced = self.unreferenced_copies(mono, copy_grace)
        for name in unreferenced + orphans:
            if qdir.remove(name):
                report.collected.append(name)
                self.copies_collected += name in unreferenced
        if report.collected:
            self._forget([], report.collected)
            self.refresh(qdir)
        if compress:
            report.compressed = self.compress_closed(qdir, mono, stale_after)
        report.sets = len(self.sets)
        report.size = self.size
        report.measured = not self.pending
        return report


def allocated(qdir: QDir) -> int:
    """Bytes on the disk that `.q` alone holds (no temporary file of a
    writer at work), by listing it: what upkeep's index knows once every
    `.info` is read."""
    total = 0
    for name in qdir.names():
        if name.startswith(TEMP_PREFIX):
            continue
        try:
            total += _own_bytes(qdir.lstat(name))
        except OSError:
            pass  # removed meanwhile
    return total


def _size(qdir: QDir, names: list[str]) -> int:
    size = 0
    for f in names:
        try:
            size += qdir.lstat(f).st_blocks * 512
        except OSError:
            pass
    return size


def _compress(qdir: QDir, name: str) -> int:
    try:
        fd = qdir.open_read(name)
    except (OSError, QFormatError):
        return 0
    with os.fdopen(fd, "rb") as f:
        if f.read(2) == GZIP_MAGIC:
            return 0
        f.seek(0)
        qdir.atomic_write(name, iter(lambda: f.read(CHUNK), b""), compress=True, sync=False)
    return 1
