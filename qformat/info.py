"""`.info` files as typed data (docs/q-format.md, sections 3 and 4).

``parse_info`` turns the forms of an `.info` file into an ``Info`` (its
classes are in forms.py);
``dump_info`` writes one back in canonical form, so that
``parse_info(dump_info(x)) == x``. Known keys become typed fields; unknown
keys stay in each object's ``extra`` and unknown forms in ``Info.extra_forms``,
so nothing a newer writer adds is lost by an older reader.
"""

from __future__ import annotations

import errno
import os
import types
from typing import Any, Callable, TypeVar, Union, get_args, get_origin

from .errors import QFormatError
from .forms import (FORMAT_VERSION, CallCounts, CallStacks, Histogram, Info, JitdumpRef,
                    MapRange, ObjectRef, TaskInfo, Threads, fields_of, hints_of)
from .names import check_plain_name
from .sexp import Form, dump_forms, parse_forms
from .limits import DEFAULT_LIMITS, Limits, exceeded
from .files import open_regular, read_at_most

__all__ = ["FORMAT_VERSION", "CallCounts", "CallStacks", "Histogram", "Info", "JitdumpRef",
           "MapRange", "ObjectRef", "TaskInfo", "Threads"]  # the forms, read and written here
__all__ += ["CPU_STATS", "HEX_KEYS", "Unwanted", "Wanted", "data_expected", "dump_info",
            "info_from_bytes", "info_from_forms", "info_to_forms", "parse_info", "purpose",
            "read_info", "require_complete"]

HEX_KEYS = frozenset({"q:addr", "q:offset", "q:kernel-from", "q:other-functions"})


def _key(field_name: str) -> str:
    return "q:" + field_name.replace("_", "-")


# ------------------------------------------------- alist <-> form

_T = TypeVar("_T")
_FILE_FIELDS = {"file"}

# What a known number may be, beyond its type (docs/q-format.md, section 4):
# a value outside is an error, as a value of the wrong type is, so that no
# reader need guard each use (a pid of -5; a conversion factor of -1 made
# times negative; a start time of 1e300 is no date).
_LAST_DATE = 253402300799.0  # 9999-12-31 23:59:59 UTC, the last a date can show
_NOT_NEGATIVE = ("not negative", lambda v: v >= 0)
# a count (at most 2^64) times a factor, summed over every line a reader
# takes in, stays a finite float for any factor up to 1e9
_FACTOR = ("above 0, at most 1e9", lambda v: 0 < v <= 1e9)
_A_DATE = ("a time from 1970 to 9999", lambda v: 0 <= v <= _LAST_DATE)
_RANGES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    **dict.fromkeys(("q:pid", "q:pids", "q:cpu", "q:samples", "q:lost-samples", "q:lost-from",
                     "q:samples-folded", "q:stacks-folded", "q:off-cpu", "q:min-stack-ns",
                     "q:switches", "q:switch-records-lost", "q:cpu-rest", "q:code-loads",
                     "q:truncated", "q:y-granularity", "q:off-cpu-seconds",
                     "q:cpu-wait-seconds"), _NOT_NEGATIVE),
    **dict.fromkeys(("q:start-time", "q:end-time", "q:run-start", "q:slice-start"), _A_DATE),
    **dict.fromkeys(("q:y-unit-conversion-factor", "q:time-conversion-factor"), _FACTOR),
}


def _check(value: Any, hint: Any, key: str, line: int | None) -> Any:
    """Validate ``value`` against a field's type hint; return it normalised."""
    if get_origin(hint) in (Union, types.UnionType):
        hint = next(a for a in get_args(hint) if a is not type(None))
    origin = get_origin(hint) or hint
    ok: bool
    if origin is str:
        ok = isinstance(value, str)
        value = str(value) if ok else value  # a Symbol value reads as its text
    elif origin is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif origin is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif origin is list:
        (elem,) = get_args(hint)
        ok = isinstance(value, list) and all(
            isinstance(v, elem) and not isinstance(v, bool) for v in value)
        value = [elem(v) for v in value] if ok else value
    elif origin is dict:
        ok = isinstance(value, dict)
    else:  # pragma: no cover - a field type this module does not know
        raise AssertionError(f"unhandled field type {hint}")
    if not ok:
        raise QFormatError(f"{key}: expected {_type_text(hint)}, found {_describe(value)}",
                           line=line)
    return value


def _check_range(value: Any, key: str, line: int | None) -> None:
    """Refuse a number (or a list's element) that ``_RANGES[key]`` does not allow."""
    want, allowed = _RANGES[key]
    for v in value if isinstance(value, list) else [value]:
        if not allowed(v):
            raise QFormatError(f"{key}: out of range (want {want}): {v!r}"[:120], line=line)


def _type_text(hint: Any) -> str:
    return {str: "a string", int: "an integer", float: "a number"}.get(hint) or {
        list: "a list", dict: "an alist"}.get(get_origin(hint), str(hint))


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "an alist"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"[:60]


def _from_alist(cls: type[_T], alist: Any, tag: str, line: int | None,
                special: dict[str, Any] | None = None) -> _T:
    if not isinstance(alist, dict):
        raise QFormatError(f"({tag} ...) needs an alist, found {_describe(alist)}", line=line)
    rest = dict(alist)
    params = fields_of(cls)
    hints = hints_of(cls)
    kwargs: dict[str, Any] = {}
    for name in params.names:
        if name == "extra":
            continue
        key = _key(name)
        if special and name in special:
            if key in rest:
                kwargs[name] = special[name](rest.pop(key), line)
            continue
        if key not in rest:
            if name in params.required:
                raise QFormatError(f"({tag} ...) lacks {key}", line=line)
            if _optional(hints[name]):
                kwargs[name] = None  # absent: unknown (a default of the writer's is not)
            continue  # else the field's own default
        value = _check(rest.pop(key), hints[name], key, line)
        if key in _RANGES and value is not None:
            _check_range(value, key, line)
        if name in _FILE_FIELDS and value is not None:
            value = _plain(value, line)
        kwargs[name] = value
    kwargs["extra"] = rest
    return cls(**kwargs)


def _optional(hint: Any) -> bool:
    return get_origin(hint) in (Union, types.UnionType) and type(None) in get_args(hint)


def _to_alist(obj: Any, special: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in fields_of(type(obj)).names:
        if name == "extra":
            continue
        value = getattr(obj, name)
        if special and name in special:
            value = special[name](value)
        if value is not None:
            out[_key(name)] = value
    for key, value in obj.extra.items():
        if key in out:
            raise ValueError(f"extra key {key} shadows a known field")
        out[key] = value
    return out


def _plain(name: Any, line: int | None) -> str:
    if not isinstance(name, str):
        raise QFormatError(f"expected a file name, found {_describe(name)}", line=line)
    try:
        return check_plain_name(name)
    except QFormatError as e:
        raise e.located(line=line) from None


def _read_maps(value: Any, line: int | None) -> list[MapRange]:
    # The original writes one map as a bare alist and several in the loose
    # dotted form; both arrive here, as a dict or a list of dicts.
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, list):
        raise QFormatError(f"q:maps: expected alists, found {_describe(value)}", line=line)
    maps = [_from_alist(MapRange, m, "q:maps", line) for m in items]
    for m in maps:
        if m.addr < 0 or m.size < 0 or m.offset < 0:
            raise QFormatError("q:maps: negative address, size or offset", line=line)
    return maps


def _write_maps(maps: list[MapRange]) -> list[dict[str, Any]]:
    return [_to_alist(m) for m in maps]


_OBJECT_SPECIAL_READ = {"maps": _read_maps}
_OBJECT_SPECIAL_WRITE = {"maps": _write_maps}


# ------------------------------------------------- whole files

_SINGLE = {
    "q:histogram": ("histogram", Histogram),
    "q:call-counts": ("call_counts", CallCounts),
    "q:call-stacks": ("call_stacks", CallStacks),
    "q:threads": ("threads", Threads),
}
_NAMED = {"q:kallsyms": "kallsyms", "q:vdso": "vdso"}
_OBJECT_TAGS = frozenset({"q:object"})


def info_from_forms(forms: list[Form]) -> Info:
    info = Info(task=TaskInfo(format_version=None))
    seen: set[str] = set()
    for form in forms:
        tag, line = form.tag, form.line
        if tag in seen and tag not in ("q:object", "q:perf-map", "q:jitdump"):
            raise QFormatError(f"more than one ({tag} ...) form", line=line)
        seen.add(tag)
        if tag == "q:info":
            info.task = _from_alist(TaskInfo, form.value, tag, line)
            if info.task.kernel_from is not None and not 0 <= info.task.kernel_from < 1 << 64:
                raise QFormatError("q:kernel-from: not a 64-bit address", line=line)
        elif tag in _SINGLE:
            attr, cls = _SINGLE[tag]
            setattr(info, attr, _from_alist(cls, form.value, tag, line))
        elif tag in _NAMED:
            setattr(info, _NAMED[tag], _plain(form.value, line))
        elif tag == "q:perf-map":
            info.perf_maps.append(_plain(form.value, line))
        elif tag == "q:jitdump":
            info.jitdumps.append(_from_alist(JitdumpRef, form.value, tag, line))
        elif tag == "q:object":
            obj = _from_alist(ObjectRef, form.value, tag, line, _OBJECT_SPECIAL_READ)
            info.objects.append(obj)
        else:
            info.extra_forms.append(form)
    return info


def info_to_forms(info: Info) -> list[Form]:
    forms: list[Form] = []
    task = _to_alist(info.task)
    if task:
        forms.append(Form("q:info", [task]))
    for tag, (attr, _cls) in _SINGLE.items():
        ref = getattr(info, attr)
        if ref is not None:
            forms.append(Form(tag, [_to_alist(ref)]))
    for tag, attr in _NAMED.items():
        if getattr(info, attr) is not None:
            forms.append(Form(tag, [getattr(info, attr)]))
    forms += [Form("q:perf-map", [name]) for name in info.perf_maps]
    forms += [Form("q:jitdump", [_to_alist(j)]) for j in info.jitdumps]
    forms += [Form("q:object", [_to_alist(o, _OBJECT_SPECIAL_WRITE)]) for o in info.objects]
    return forms + list(info.extra_forms)


def parse_info(data: str | bytes, path: str | os.PathLike[str] | None = None,
               objects: bool = True) -> Info:
    """Parse the text of an `.info` file; without ``objects`` its q:object
    forms are skipped (a listing of thousands of sets needs none of them)."""
    name = os.fspath(path) if path is not None else None
    try:
        return info_from_forms(parse_forms(data, name, frozenset() if objects else _OBJECT_TAGS))
    except QFormatError as e:
        raise e.located(name) from None


class Unwanted(Exception):
    """An `.info` whose text a reader's ``wanted`` test turned down unparsed."""


Wanted = Callable[[bytes], bool]
"""Whether an `.info`'s raw text may hold what a reader looks for: False
only where it certainly does not (parsing is what costs, not reading)."""


def read_info(path: str | os.PathLike[str], objects: bool = True,
              limits: Limits = DEFAULT_LIMITS, *, follow: bool = True,
              fd: int | None = None, wanted: Wanted | None = None) -> Info:
    """Read and parse an `.info` file (see ``parse_info`` for ``objects``).

    At most ``limits.info_size`` bytes are read; a larger file is refused
    (LimitExceeded) before any is parsed. Without ``follow`` the file itself
    must not be a symlink. With ``fd`` (an open regular file, taken over and
    closed) ``path`` only names it in errors. Where ``wanted`` says no to
    the text read, nothing is parsed: ``Unwanted``.
    """
    cap = limits.info_size
    try:
        with os.fdopen(open_regular(path, follow=follow) if fd is None else fd, "rb") as f:
            if os.fstat(f.fileno()).st_size > cap:
                raise exceeded(f"{os.fstat(f.fileno()).st_size} bytes", os.fspath(path),
                               "info-size", cap)
            data = read_at_most(f, cap + 1, 1 << 20)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise QFormatError("a symlink, not a regular file: links inside a .q directory "
                               "are not followed", path) from None
        raise QFormatError(f"cannot read: {e.strerror}", path) from None
    if len(data) > cap:  # grew while being read
        raise exceeded(f"more than {cap} bytes", os.fspath(path), "info-size", cap)
    if wanted is not None and not wanted(data):
        raise Unwanted(os.fspath(path))
    return info_from_bytes(data, os.fspath(path), objects, limits)


def info_from_bytes(data: bytes, name: str, objects: bool = True,
                    limits: Limits = DEFAULT_LIMITS) -> Info:
    """Parse an `.info` already read (at most ``limits.info_size`` bytes, which
    the reader checked); ``name`` names it in errors."""
    try:
        return info_from_forms(parse_forms(data, name, frozenset() if objects else _OBJECT_TAGS,
                                           max_bytes=limits.info_size))
    except QFormatError as e:
        raise e.located(name) from None


CPU_STATS = "cpu-stats"
"""``q:purpose`` of a set that exists for its per-CPU statistics (the CPU
table of ``kernel-cpuN``); it may have no data files."""


def purpose(info: Info) -> str | None:
    value = getattr(info.task, "purpose", None) or info.task.extra.get("q:purpose")
    return value if isinstance(value, str) else None


def data_expected(info: Info) -> bool:
    """False for a set that may lack its data files: one kept for its CPU
    statistics, or one that says it has no samples (such as the header
    q-syscollect writes when it claims a version)."""
    return purpose(info) != CPU_STATS and info.task.samples != 0


def require_complete(info: Info, path: str) -> None:
    """Refuse an `.info` that cannot be whole: q-syscollect writes every one
    atomically, with its (q:info ...) form first, and a histogram unless it
    says it has no samples. An empty or cut file is damage, not "no samples"."""
    if info == Info(task=TaskInfo(format_version=None)):
        raise QFormatError("empty: no forms at all (truncated, or not written by q-syscollect)",
                           path)
    if info.task == TaskInfo(format_version=None):
        raise QFormatError("incomplete: no (q:info ...) form (truncated?)", path)
    if info.histogram is None and data_expected(info):
        raise QFormatError("incomplete: no (q:histogram ...) form, though it does not say it "
                           "has no samples (truncated?)", path)


def dump_info(info: Info) -> str:
    """Canonical text of an `.info` file."""
    return dump_forms(info_to_forms(info), HEX_KEYS)
