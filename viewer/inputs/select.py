"""Which task sets a view takes: ``--comm``, ``--pid``, ``--cpu``,
``--host``, ``--unit``, a time window and ``--run`` among the sets that
load.py finds in the inputs.
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
from typing import NamedTuple

from qtools.qformat import DEFAULT_LIMITS, Limits, SetName, info_versions, sanitize_prog
from qtools.qformat.info import Wanted
from qtools.qformat.stores import Store

from ..model.viewerrors import ViewError
from . import hints, runs
from .load import MTIME_SLACK, Source, StoredSet, _listdir, is_directory, label, open_info, \
    sets_in, versions_of
from .timewin import overlaps

_DELIMITERS = re.escape(b" \t\n\r\x0b\x0c()[]{}\";\\'")  # around an atom (qformat.sexp)


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
    if selection.pid is not None:
        unlisted = sorted({ts.set_name.prog for ts in candidates if ts.set_name
                           and ts.info.task.extra.get("q:pids-not-listed")})
        if unlisted:
            near = near or (f"; aggregates folded more pids than they list (q:pids-not-listed): "
                            f"{', '.join(unlisted[:10])}{', ...' if len(unlisted) > 10 else ''}")
    return ViewError(f"no task set matches {what or 'the selection'}{near}",
                     label(inputs[0]) if len(inputs) == 1 else None)
