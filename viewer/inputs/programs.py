"""``q-view .q/PROG.info``: a program's name stands for all of its sets.

Users type the program's name as the collector names its files, without
pid and cpu (``q-view .q/app.info``). Such a name, where no file of that
name exists, selects every set of program PROG in that directory, merged,
exactly like ``--comm PROG``. A name that matches no program gets the list
of programs that do exist.
"""

from __future__ import annotations

import os

from qtools.qformat import QFormatError, info_versions, parse_name
from qtools.qformat.limits import DEFAULT_LIMITS, Limits

from ..model.viewerrors import ViewError
from .load import Source, StoredSet
from .select import Selection, select

MAX_LISTED = 40  # programs named in the error message


def program_of(path: str) -> tuple[str, str] | None:
    """(directory, PROG) where ``path`` is ``DIR/PROG.info`` naming no file and
    no task set; None for anything else."""
    directory, base = os.path.split(path)
    if not base.endswith(".info") or "#" in base or os.path.exists(path):
        return None
    try:
        parse_name(base)
        return None  # a set's name (its latest version): load.py's business
    except QFormatError:
        pass
    prog = base[: -len(".info")]
    directory = directory or "."
    if not prog or not os.path.isdir(directory):
        return None
    return directory, prog


def programs_in(directory: str) -> list[str]:
    """The program names (PROG of the set names) found in ``directory``."""
    try:
        names = info_versions(os.listdir(directory))
    except OSError:
        return []
    return sorted({n.prog for n in names})


def select_inputs(inputs: list[Source], selection: Selection, all_versions: bool,
                  run: str | None = None, limits: Limits = DEFAULT_LIMITS) -> list[StoredSet]:
    """``select.select`` where some inputs may be program names (which, like
    directories, ``run`` narrows to one run of q-syscollect)."""
    programs = [(item, program_of(item) if isinstance(item, str) else None)
                for item in inputs]
    plain = [item for item, prog in programs if prog is None]
    chosen = select(plain, selection, all_versions, run, limits) if plain else []
    for item, prog in programs:
        if prog is not None and isinstance(item, str):
            chosen += _program_sets(item, prog[0], prog[1], selection, all_versions, run,
                                    limits)
    # A set without a histogram holds no samples (a version just claimed, a
    # set kept only for its CPU statistics): it would only make a merge of
    # the whole directory refuse "different units".
    with_data = [ts for ts in chosen if ts.info.histogram is not None]
    if with_data:
        chosen = with_data
    seen: set[str] = set()
    unique = []
    for ts in chosen:  # a set named twice is merged once
        key = os.path.realpath(ts.path)
        if key not in seen:
            seen.add(key)
            unique.append(ts)
    return unique


def _program_sets(item: str, directory: str, prog: str, selection: Selection,
                  all_versions: bool, run: str | None,
                  limits: Limits) -> list[StoredSet]:
    narrowed = selection._replace(comm=prog) if selection.comm is None \
        else selection
    try:
        found = select([directory], narrowed, all_versions, run, limits)
    except ViewError:
        found = []
    found = [ts for ts in found if Selection(comm=prog).matches(ts)]  # and any --comm
    if found:
        return found
    known = programs_in(directory)
    if prog in known or not known:
        raise ViewError(f"no set of program {prog!r} matches {narrowed.describe()}", item)
    listed = ", ".join(known[:MAX_LISTED])
    more = f" and {len(known) - MAX_LISTED} more" if len(known) > MAX_LISTED else ""
    raise ViewError(f"no such file, and no program {prog!r} in {directory}; "
                    f"programs there: {listed}{more}", item)

