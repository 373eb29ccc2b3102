"""Finding and reading task sets: names, versions, selections, data files.

A task set is one `.info` file (one version) and the data files it names.
Inputs are `.info` names (``#N`` or the latest version), directories and
tar archives of directories; each directory is read through a
``qformat.stores.Store`` (a directory, or one inside an archive read in
place), so nothing below knows which it has. ``--comm``, ``--pid``,
``--cpu`` and ``--host`` select among the sets found.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import time
from typing import IO, Callable, Iterator, NamedTuple, TypeVar

from qtools.qformat import DEFAULT_LIMITS, Info, Limits, MissingFile, QFormatError, SetName, \
    Stack, data_expected, info_versions, parse_name, read_edges, read_hist, \
    read_stacks, require_complete, resolve_info, sanitize_prog
from qtools.qformat.archive import looks_like_archive, open_archive
from qtools.qformat.data import Arc
from qtools.qformat.info import Unwanted, Wanted
from qtools.qformat.threads import ThreadName, ThreadWeight, read_threads, with_cpu_rest
from qtools.qformat.stores import DirStore, Store

from ..errors import ViewError
from . import hints, runs
from .timewin import overlaps

DEFAULT_DIR = ".q"
_DELIMITERS = re.escape(b" \t\n\r\x0b\x0c()[]{}\";\\'")  # around an atom (qformat.sexp)
MTIME_SLACK = 60.0  # seconds: file times lag the clock that stamps end-time by a tick or so


class SetRemoved(MissingFile):
    """A set whose `.info` was removed after it was read (a live directory)."""


#: an input: a path (directory, `.info` or program name) or an opened store
Source = str | Store


def is_directory(item: Source) -> bool:
    """A directory of sets: a directory, or one inside an archive."""
    return isinstance(item, Store) or os.path.isdir(item)


def label(item: Source) -> str:
    """What messages name an input by."""
    return item.label if isinstance(item, Store) else item


def open_inputs(inputs: list[str], limits: Limits = DEFAULT_LIMITS) -> list[Source]:
    """``inputs`` with each tar archive replaced by its directories' stores
    (read in place: see ``qformat.archive``); close them with ``close_inputs``."""
    out: list[Source] = []
    try:
        for item in inputs:
            out += open_archive(item, limits) if looks_like_archive(item) else [item]
    except BaseException:
        close_inputs(out)
        raise
    return out


def close_inputs(inputs: list[Source]) -> None:
    for item in inputs:
        if isinstance(item, Store):
            item.close()


def _store(source: Source) -> Store:
    return source if isinstance(source, Store) else DirStore(source)


class StoredSet(NamedTuple):
    """One task set as read: its `.info`, and where its data files are."""

    directory: str  # where it was read: a directory, or ARCHIVE:DIR (``Store.label``)
    name: str  # the `.info` file name, with its version
    info: Info
    set_name: SetName | None  # None for a hand-named file
    limits: Limits = DEFAULT_LIMITS
    dir_id: tuple[int, int] | None = None  # the directory the `.info` was read from
    store: Store | None = None  # None: the directory ``directory``

    @property
    def path(self) -> str:
        return self.data_path(self.name)

    def data_path(self, name: str) -> str:
        return self.store.path(name) if self.store else os.path.join(self.directory, name)

    @property
    def host(self) -> str | None:
        """The machine that collected it (q:hostname)."""
        return self.info.task.hostname

    @property
    def service(self) -> str | None:
        """The systemd unit its samples ran in (q:unit); ``unit`` is the event's."""
        return self.info.task.unit

    @property
    def container(self) -> str | None:
        """The container id its samples ran in (q:container)."""
        return self.info.task.container

    @property
    def cgroup(self) -> str | None:
        return self.info.task.cgroup

    @property
    def data_expected(self) -> bool:
        """False where data files may be missing (see ``qformat.data_expected``)."""
        return data_expected(self.info)

    def _open(self, name: str) -> IO[bytes]:
        """A data file of this set: in the `.info`'s directory, no symlink
        (MissingFile where it is not there, SetRemoved where the `.info` has
        gone too: retention removes the `.info` first, then its data)."""
        store = self.store or DirStore(self.directory)
        try:
            return store.open_member(name, self.dir_id)
        except MissingFile as e:
            if not store.exists(self.name):
                raise SetRemoved("removed while being read", self.path) from None
            raise e

    @property
    def factor(self) -> float:
        h = self.info.histogram
        return h.y_unit_conversion_factor if h and h.y_unit_conversion_factor else 1.0

    @property
    def unit(self) -> str:
        h = self.info.histogram
        return (h.y_unit_label if h and h.y_unit_label else "events")

    @property
    def event(self) -> str:
        h = self.info.histogram
        return h.event_name if h and h.event_name else "samples"

    @property
    def comm(self) -> str | None:
        if self.info.task.comm:
            return self.info.task.comm
        return self.set_name.prog if self.set_name else None

    @property
    def pid(self) -> int | None:
        if self.info.task.pid is not None:
            return self.info.task.pid
        return self.set_name.pid if self.set_name else None

    @property
    def cpu(self) -> int | None:
        if self.info.task.cpu is not None:
            return self.info.task.cpu
        return self.set_name.cpu if self.set_name else None

    @property
    def is_kernel(self) -> bool:
        return bool(self.set_name and self.set_name.is_kernel)

    def command(self) -> str:
        """What ran, for the `Command:` line: the executable and its arguments."""
        task = self.info.task
        if task.exe and task.cmdline:
            return shlex.join([task.exe, *task.cmdline[1:]])
        if task.cmdline:
            return shlex.join(task.cmdline)
        if task.exe:
            return task.exe
        if self.is_kernel:
            return "[kernel]"
        return self.comm or self.name

    # ------------------------------------------------------------ data

    def hist(self) -> Iterator[tuple[int, int]]:
        """The `.hist` records; QFormatError (MissingFile) where the file cannot
        be read, unless the set may lack its data."""
        h = self.info.histogram
        if h is None:
            return iter(())
        try:
            f = self._open(h.file)
        except MissingFile:
            if self.data_expected:
                raise
            return iter(())
        return _closing(f, read_hist(f, self.limits, name=self.data_path(h.file)))

    def stacks(self) -> Iterator[Stack] | None:
        """The `.stack` records, or None where the set has no call-stack data
        (MissingFile where the `.info` names a file that is not there)."""
        cs = self.info.call_stacks
        if cs is None:
            return None
        try:
            f = self._open(cs.file)
        except MissingFile:
            if self.data_expected:
                raise
            return None
        return _closing(f, read_stacks(f, self.limits, name=self.data_path(cs.file)))

    def threads(self) -> Iterator[ThreadWeight | ThreadName] | None:
        """The `.threads` records (docs/q-format.md 5.8), or None where the
        set has none; with q:cpu-rest, the `cpu` lines of that thread put
        back from the `.stack` (4.9)."""
        th = self.info.threads
        if th is None:
            return None
        name = self.data_path(th.file)
        stacks: Iterator[Stack] | None = None
        if th.cpu_rest is not None:
            if self.info.call_stacks is None:
                raise QFormatError("q:threads has q:cpu-rest but the set has no .stack",
                                   self.path)
            stacks = self.stacks()
            if stacks is None:  # its .stack is missing: so is the thread's part
                return None
        try:
            f = self._open(th.file)
        except MissingFile:
            if self.data_expected:
                raise
            return None
        records = _closing(f, read_threads(f, self.limits, name=name))
        if stacks is None or th.cpu_rest is None:
            return records
        return with_cpu_rest(records, stacks, th.cpu_rest, name)

    def edges(self) -> Iterator[Arc] | None:
        """The `.edge` records, or None where the set has none (MissingFile
        where the `.info` names a file that is not there)."""
        cc = self.info.call_counts
        if cc is None:
            return None
        try:
            f = self._open(cc.file)
        except MissingFile:
            if self.data_expected:
                raise
            return None
        return _closing(f, read_edges(f, self.limits, name=self.data_path(cc.file)))

    def total(self) -> float:
        """The set's total in output units (hist counts times the conversion factor)."""
        return sum(count for _addr, count in self.hist()) * self.factor


_T = TypeVar("_T")


def _closing(f: IO[bytes], records: Iterator[_T]) -> Iterator[_T]:
    with f:
        yield from records


def read_set(source: Source, name: str, set_name: SetName | None, limits: Limits,
             objects: bool = True, wanted: Wanted | None = None) -> StoredSet:
    """The task set of the `.info` ``name`` in ``source``: no symlink, within
    ``limits``, whole (an empty or cut `.info` is an error, not an empty set);
    ``Unwanted`` where ``wanted`` turns its text down."""
    store = _store(source)
    info, dir_id = store.read_info(name, objects, limits, wanted)
    require_complete(info, store.path(name))
    return StoredSet(store.label, name, info, set_name, limits, dir_id, store)


def default_directory(explicit: str | None) -> str:
    return explicit or os.environ.get("Q_DIR") or DEFAULT_DIR


def open_info(path: str, limits: Limits = DEFAULT_LIMITS) -> StoredSet:
    """The task set of an `.info` name; without ``#N``, its latest version.

    A file whose name is no q name at all is read as it is (a hand-made or
    renamed `.info`); a q name of another type is refused.
    """
    if not os.path.isdir(os.path.dirname(path) or "."):
        raise ViewError("no such file or directory", path)
    if _set_name(os.path.basename(path)) is None and not os.path.isfile(path):
        raise ViewError("no such file (nor an .info name whose versions exist)", path)
    _check_version(path)
    try:
        resolved = path if _set_name(os.path.basename(path)) is None else resolve_info(path)
    except QFormatError as e:
        raise e.located(path) from None
    directory, name = os.path.split(resolved)
    try:
        return read_set(directory or ".", name, _set_name(name), limits)
    except MissingFile as e:
        raise ViewError("no such file", e.path) from None


def _check_version(path: str) -> None:
    """A ``NAME.info#N`` that does not exist: say which versions do."""
    directory, name = os.path.split(path)
    try:
        q = parse_name(name)
    except QFormatError:
        return
    if q.type != "info" or q.version is None or os.path.lexists(path):
        return
    versions = info_versions(_listdir(directory or ".")).get(q.set, [])
    raise hints.missing_version(path, q.version, versions)


def _set_name(name: str) -> SetName | None:
    try:
        return parse_name(name).set
    except QFormatError:
        return None


def _listdir(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError as e:
        raise ViewError(f"cannot list directory: {e.strerror}", directory) from None


def sets_in(source: Source, all_versions: bool = False,
            named: Callable[[SetName], bool] | None = None,
            written_since: float | None = None, objects: bool = True,
            limits: Limits = DEFAULT_LIMITS,
            known: dict[str, StoredSet] | None = None,
            text: Callable[[SetName], Wanted | None] | None = None) -> list[StoredSet]:
    """Task sets of a directory: the latest version of each, or every version.

    A directory of a long run holds thousands, so what can be told without
    parsing is: only sets whose name passes ``named``, only `.info` files
    last written at ``written_since`` or later (a slice's end time precedes
    the write of its last `.info`), only those whose text passes the test
    ``text`` gives for their name (if any), and without ``objects`` no
    q:object forms (a listing needs none). Sets in ``known`` (by path) were
    read already: they are not read again."""
    store = _store(source)
    versions = info_versions(store.names() if isinstance(source, Store) else _listdir(source))
    out = []
    for set_name in sorted(versions):
        if named is not None and not named(set_name):
            continue
        chosen = sorted(versions[set_name]) if all_versions else [max(versions[set_name])]
        for v in chosen:
            name = set_name.file("info", v)
            if written_since is not None and store.mtime(name) < written_since:
                continue
            if known is not None and store.path(name) in known:
                out.append(known[store.path(name)])
                continue
            try:
                out.append(read_set(store, name, set_name, limits, objects,
                                    text(set_name) if text is not None else None))
            except MissingFile:
                continue  # removed since the listing (retention): not damage
            except Unwanted:
                continue
    return out


class Selection(NamedTuple):
    comm: str | None = None
    pid: int | None = None
    cpu: int | None = None
    since: float | None = None  # Unix seconds: only slices that overlap [since, until]
    until: float | None = None
    host: str | None = None  # only sets this machine collected (q:hostname)
    unit: str | None = None  # a glob: sets whose unit, container or cgroup path match

    @property
    def active(self) -> bool:
        return (self.comm is not None or self.pid is not None or self.cpu is not None
                or self.unit is not None)

    @property
    def windowed(self) -> bool:
        return self.since is not None or self.until is not None

    def in_window(self, ts: StoredSet) -> bool:
        return overlaps(ts.info.task.start_time, ts.info.task.end_time, self.since, self.until)

    @property
    def written_since(self) -> float | None:
        """No slice that overlaps the window had its `.info` last written
        before this (with slack for file systems' coarse clocks)."""
        return None if self.since is None else self.since - MTIME_SLACK

    def may_match(self, set_name: SetName) -> bool:
        """What the name alone tells: the pid and CPU of a set never change,
        and a set without a pid (folded tasks) may hold any pid. The comm is
        left to ``matches``: a task may rename itself."""
        if self.pid is not None and set_name.pid is not None and set_name.pid != self.pid:
            return False
        return self.cpu is None or set_name.cpu == self.cpu

    def text_test(self, set_name: SetName) -> Wanted | None:
        """For ``--comm``, what an `.info`'s text must hold to be worth
        parsing, where its name does not match already (a task may rename
        itself): the name as a string, or an escape that could spell it.
        None: parse it whatever its text (no --comm; the name matches; a
        name the test cannot be sure of)."""
        comm = self.comm
        if not comm or not comm.isascii() or not comm.isprintable() \
                or '"' in comm or "\\" in comm:
            return None
        needles = {comm, sanitize_prog(comm)}
        if set_name.prog in needles:
            return None
        # the name as a whole atom of the s-expression (a string's body or a
        # symbol), as qformat.sexp delimits atoms
        atom = re.compile(rb"(?<![^%s])(?:%s)(?![^%s])" % (
            _DELIMITERS, b"|".join(re.escape(n.encode()) for n in needles if n), _DELIMITERS))
        return lambda data: b"\\" in data or atom.search(data) is not None

    def wants(self, ts: StoredSet) -> bool:
        return self.matches(ts) and self.in_window(ts)

    def on_host(self, ts: StoredSet) -> bool:
        return self.host is None or ts.host == self.host

    def in_unit(self, ts: StoredSet) -> bool:
        """--unit: a glob on the unit (``nginx.service``, ``session-*.scope``),
        on the container id (or its first digits, as ``docker ps`` shows
        them), or, starting with /, on the cgroup path."""
        want = self.unit
        if want is None:
            return True
        if want.startswith("/"):
            return ts.cgroup is not None and fnmatch.fnmatchcase(ts.cgroup, want)
        unit, container = ts.service, ts.container
        return (unit is not None and fnmatch.fnmatchcase(unit, want)) or (
            container is not None and (fnmatch.fnmatchcase(container, want)
                                       or (len(want) >= 4 and container.startswith(want))))

    def matches(self, ts: StoredSet) -> bool:
        if not self.on_host(ts) or not self.in_unit(ts):
            return False
        if self.comm is not None:
            names = {ts.comm, ts.set_name.prog if ts.set_name else None}
            if self.comm not in names and sanitize_prog(self.comm) not in names:
                return False
        if self.pid is not None:
            if ts.pid != self.pid and self.pid not in (ts.info.task.pids or []):
                return False
        if self.cpu is not None and ts.cpu != self.cpu:
            return False
        return True

    def describe(self) -> str:
        parts = [f"--comm {self.comm}" if self.comm is not None else "",
                 f"--pid {self.pid}" if self.pid is not None else "",
                 f"--cpu {self.cpu}" if self.cpu is not None else "",
                 f"--host {self.host}" if self.host is not None else "",
                 f"--unit {self.unit}" if self.unit is not None else "",
                 f"--since {_when(self.since)}" if self.since is not None else "",
                 f"--until {_when(self.until)}" if self.until is not None else ""]
        return " ".join(p for p in parts if p) or "the selection"


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def versions_of(path: str, limits: Limits = DEFAULT_LIMITS) -> list[StoredSet]:
    """Every version of the set an `.info` name (without ``#N``) names."""
    directory, name = os.path.split(path)
    set_name = _set_name(name)
    if set_name is None:
        return [open_info(path, limits)]
    return sets_in(directory or ".", all_versions=True, named=lambda n: n == set_name,
                   limits=limits) or [open_info(path, limits)]


def select(inputs: list[Source], selection: Selection, all_versions: bool,
           run: str | None = None, limits: Limits = DEFAULT_LIMITS) -> list[StoredSet]:
    """Task sets named by ``inputs`` (files or directories) that match ``selection``.

    With a time window every version (time slice) is a candidate, and those
    that overlap the window are merged. ``run`` (a ``--run`` argument)
    picks one run's sets among those found in directories; files named
    explicitly are taken whatever run wrote them.
    """
    every = all_versions or selection.windowed
    directories = [item for item in inputs if is_directory(item)]
    found: list[StoredSet] = []
    named: list[StoredSet] = []
    for item in inputs:
        if item in directories:
            sets = sets_in(item, every, selection.may_match, selection.written_since,
                           limits=limits, text=selection.text_test)
            if not sets and isinstance(item, str) and not info_versions(_listdir(item)):
                raise hints.no_sets(item)
            found += sets
        elif isinstance(item, Store):
            continue  # for mypy: a store is a directory
        elif selection.windowed and "#" not in os.path.basename(item):
            named += versions_of(item, limits)
        else:
            named.append(open_info(item, limits))

    chosen = [ts for ts in found if selection.wants(ts)]
    if run is not None and directories:
        chosen = pick_run(chosen, run, directories, selection, every, limits=limits)
    chosen += [ts for ts in named if selection.wants(ts)]
    if not chosen:
        if selection.comm is not None:  # the sets --comm skipped name the near ones
            found = [ts for d in directories
                     for ts in sets_in(d, every, selection.may_match, selection.written_since,
                                       limits=limits)]
        raise _nothing_matches(selection, run, inputs, found + named)
    seen: set[str] = set()
    unique = []
    for ts in chosen:  # the same set named twice is merged once
        key = os.path.realpath(ts.path)
        if key not in seen:
            seen.add(key)
            unique.append(ts)
    return unique


def pick_run(chosen: list[StoredSet], spec: str, directories: list[Source], selection: Selection,
             every: bool, objects: bool = True,
             limits: Limits = DEFAULT_LIMITS) -> list[StoredSet]:
    """The sets of the run ``spec`` names among ``chosen`` (sets of
    ``directories`` that ``selection`` wants); without ``every`` (each
    set's latest version) older versions are read where they may hold it.

    ``latest`` is the latest run of the chosen sets; an id is looked for
    among every set there, so that a run the selection excludes is a
    selection that matches nothing, not a run that does not exist."""
    def reread(run_start: float | None, names: set[SetName] | None) -> list[StoredSet]:
        """Every version since ``run_start`` of the sets ``names`` (None: all
        those the selection may want by name, read only for their runs)."""
        since = run_start - MTIME_SLACK if run_start is not None else None
        if selection.written_since is not None:
            since = max(since or selection.written_since, selection.written_since)
        named = (lambda n: n in names) if names is not None else selection.may_match
        return [ts for d in directories for ts in sets_in(d, True, named, since,
                                                            objects and names is not None,
                                                            limits, read)
                if names is None or selection.wants(ts)]

    read = {ts.path: ts for ts in chosen}  # each `.info` is parsed once

    known = runs.runs_of(chosen)
    run = runs.resolve(spec, known)
    if run is None and spec != runs.LATEST:  # perhaps a run the selection excludes
        known = runs.runs_of(reread(None, None))
        run = runs.resolve(spec, known)
    if run is None:
        raise runs.no_such_run(spec, known,
                               label(directories[0]) if len(directories) == 1 else None)
    return runs.of_run(chosen, run, reread, every)


def _nothing_matches(selection: Selection, run: str | None, inputs: list[Source],
                     candidates: list[StoredSet]) -> ViewError:
    narrowed = selection.active or selection.windowed or selection.host is not None
    what = selection.describe() if narrowed else ""
    if run is not None:
        what = f"{what} --run {run}".strip()
    near = ""
    if selection.comm is not None:
        names = [n for ts in candidates
                 for n in (ts.comm, ts.set_name.prog if ts.set_name else None) if n]
        near = hints.nearest(selection.comm, names)
    if selection.host is not None:
        hosts = sorted({ts.host for ts in candidates if ts.host})
        near = near or (f"; hosts there: {', '.join(hosts)}" if hosts else "")
    if selection.unit is not None:
        units = sorted({ts.service for ts in candidates if ts.service})
        near = near or (f"; units there: {', '.join(units[:20])}" if units
                        else "; no set there records its unit")
    return ViewError(f"no task set matches {what or 'the selection'}{near}",
                     label(inputs[0]) if len(inputs) == 1 else None)
