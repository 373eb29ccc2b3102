"""Finding and reading task sets: names, versions, selections, data files.

A task set is one `.info` file (one version) and the data files it names.
Inputs are `.info` names (``#N`` or the latest version), directories and
tar archives of directories; each directory is read through a
``qformat.stores.Store`` (a directory, or one inside an archive read in
place), so nothing below knows which it has. ``--comm``, ``--pid``,
``--cpu`` and ``--host`` select among the sets found.
"""

from __future__ import annotations

import os
import shlex
from typing import IO, Callable, Iterator, NamedTuple, TypeAlias, TypeVar

from qtools.qformat import DEFAULT_LIMITS, Info, Limits, MissingFile, QFormatError, SetName, \
    Stack, data_expected, info_versions, parse_name, read_edges, read_hist, \
    read_stacks, require_complete, resolve_info
from qtools.qformat.archive import looks_like_archive, open_archive
from qtools.qformat.data import Arc
from qtools.qformat.info import Unwanted, Wanted
from qtools.qformat.threads import ThreadName, ThreadWeight, read_threads, with_cpu_rest
from qtools.qformat.stores import DirStore, Store

from ..model.viewerrors import ViewError
from . import hints

DEFAULT_DIR = ".q"
MTIME_SLACK = 60.0  # seconds: file times lag the clock that stamps end-time by a tick or so


class SetRemoved(MissingFile):
    """A set whose `.info` was removed after it was read (a live directory)."""


#: an input: a path (directory, `.info` or program name) or an opened store
Source: TypeAlias = str | Store


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
    if parse_set_name(os.path.basename(path)) is None and not os.path.isfile(path):
        raise ViewError("no such file (nor an .info name whose versions exist)", path)
    _check_version(path)
    try:
        resolved = path if parse_set_name(os.path.basename(path)) is None else resolve_info(path)
    except QFormatError as e:
        raise e.located(path) from None
    directory, name = os.path.split(resolved)
    try:
        return read_set(directory or ".", name, parse_set_name(name), limits)
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


def parse_set_name(name: str) -> SetName | None:
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


def versions_of(path: str, limits: Limits = DEFAULT_LIMITS) -> list[StoredSet]:
    """Every version of the set an `.info` name (without ``#N``) names."""
    directory, name = os.path.split(path)
    set_name = parse_set_name(name)
    if set_name is None:
        return [open_info(path, limits)]
    return sets_in(directory or ".", all_versions=True, named=lambda n: n == set_name,
                   limits=limits) or [open_info(path, limits)]


# The kernel sets' rows in the overview and roots in whole-machine stacks:
# the idle task's samples, or with -k every pid's kernel samples.
IDLE = "idle"
KERNEL = "kernel"


def kernel_only_run(ts: StoredSet) -> bool:
    """Whether the set was collected with ``q-syscollect -k``."""
    return "k" in collector_flags(ts)


def collector_flags(ts: StoredSet) -> set[str]:
    """The one-letter options q-syscollect was given for the set (``-kv``:
    k and v), as its q:syscollect-cmdline says."""
    flags: set[str] = set()
    for arg in (ts.info.task.syscollect_cmdline or [])[1:]:
        if arg == "--":
            break
        if arg.startswith("-") and not arg.startswith("--") and arg[1:].isalpha():
            flags.update(arg[1:])
    return flags
