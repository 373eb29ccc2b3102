"""Telling runs apart: which q-syscollect invocation wrote a task set.

Every `.info` a run writes carries the run's random id (``q:run-id``) and
its start (``q:run-start``); sets written before run ids existed belong to
"an unknown run". Nothing is hidden by default: a selection that spans
several runs is shown whole, with a one-line notice, and ``--run ID``
(a unique prefix), ``--run latest`` or ``--run unknown`` picks one.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Iterable, NamedTuple

from ..model.viewerrors import UsageError, ViewError

if TYPE_CHECKING:  # select imports this module
    from qtools.qformat import SetName

    from .load import StoredSet

    # (run start, set names) -> every version of those sets written since the start
    Reread = Callable[[float | None, set[SetName]], list[StoredSet]]

LATEST = "latest"
UNKNOWN = "unknown"
LISTED = 3  # runs named in the notice; older ones are counted


class Run(NamedTuple):
    id: str | None  # None: written before runs had ids
    start: float | None  # Unix seconds
    host: str | None

    def label(self, hosts: bool = False) -> str:
        name = self.id if self.id is not None else "an unknown run (sets without a run id)"
        facts = [_when(self.start)] if self.start is not None else []
        if hosts and self.host:
            facts.insert(0, self.host)
        return f"{name} ({', '.join(facts)})" if facts else name


def run_of(ts: StoredSet) -> Run:
    task = ts.info.task
    if not task.run_id:
        return Run(None, None, task.hostname)
    return Run(task.run_id, task.run_start, task.hostname)


def runs_of(sets: Iterable[StoredSet]) -> list[Run]:
    """The distinct runs of ``sets``, oldest first (the unknown run first of all)."""
    runs: dict[str | None, Run] = {}
    for ts in sets:
        run = run_of(ts)
        runs.setdefault(run.id, run)
    return sorted(runs.values(), key=lambda r: (r.id is not None, r.start or 0.0, r.id or ""))


def check_spec(spec: str) -> str:
    """``--run`` takes a run id or a prefix of one (hex digits), latest or unknown."""
    text = spec.strip().lower()
    if text in (LATEST, UNKNOWN) or (text and all(c in "0123456789abcdef" for c in text)):
        return text
    raise UsageError(f"--run takes a run id (or a unique prefix of one), "
                     f"'{LATEST}' or '{UNKNOWN}', not {spec!r}")


def resolve(spec: str, runs: list[Run]) -> Run | None:
    """The run ``spec`` names among ``runs``; None when it names none of them.

    An ambiguous prefix is an error that lists the runs it matches."""
    if spec == LATEST:
        known = [r for r in runs if r.id is not None]
        return max(known, key=lambda r: (r.start or 0.0, r.id or "")) if known else (
            runs[0] if runs else None)
    if spec == UNKNOWN:
        return next((r for r in runs if r.id is None), None)
    hits = [r for r in runs if r.id is not None and r.id.startswith(spec)]
    if len(hits) > 1:
        names = ", ".join(r.label() for r in hits)
        raise ViewError(f"--run {spec} matches {len(hits)} runs: {names}; give more digits")
    return hits[0] if hits else None


def no_such_run(spec: str, runs: list[Run], where: str | None) -> ViewError:
    if not runs:
        return ViewError(f"no task set to choose --run {spec} from", where)
    there = ", ".join(r.label(_hosts(runs)) for r in runs[-LISTED:])
    more = f" and {len(runs) - LISTED} older" if len(runs) > LISTED else ""
    return ViewError(f"no run {spec} here; the runs of the sets here: {there}{more}", where)


def notice(runs: list[Run], hint: bool) -> str | None:
    """One line for a selection that spans several runs, else None."""
    if len(runs) < 2:
        return None
    hosts = _hosts(runs)
    named = [r.label(hosts) for r in runs[-LISTED:]]
    older = len(runs) - len(named)
    text = f"these sets come from {len(runs)} runs of q-syscollect: "
    text += (f"{older} older, " if older else "") + ", ".join(named)
    if hint:
        text += f"; --run ID (a prefix will do) or --run {LATEST} shows one"
    return text


def _hosts(runs: list[Run]) -> bool:
    return len({r.host for r in runs if r.host}) > 1


def _when(t: float) -> str:
    return "started " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def of_run(chosen: list[StoredSet], run: Run, reread: Reread,
           every_version: bool) -> list[StoredSet]:
    """The sets of ``run``, from ``chosen`` (the selection's sets of directories).

    Without ``every_version`` each set shows its latest version, but a
    set's latest version may belong to a later run (``kernel-cpu0`` is
    written by every run). Versions only grow, so only such sets can hold
    an older version of ``run``: ``reread(run_start, names)`` gives every
    version of those, and each one's latest version of ``run`` is kept."""
    kept = [ts for ts in chosen if run_of(ts).id == run.id]
    if every_version:
        return kept
    later = {ts.set_name for ts in chosen
             if ts.set_name is not None and run_of(ts).id != run.id
             and not _before(run_of(ts), run)}
    if not later:
        return kept
    older: dict[SetName, StoredSet] = {}
    for ts in reread(run.start, later):  # each set's versions come oldest first
        if run_of(ts).id == run.id and ts.set_name is not None:
            older[ts.set_name] = ts
    return kept + list(older.values())


def _before(a: Run, b: Run) -> bool:
    return a.start is not None and b.start is not None and a.start < b.start
