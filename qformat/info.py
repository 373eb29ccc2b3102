"""`.info` files as typed data (docs/q-format.md, sections 3 and 4).

``parse_info`` turns the forms of an `.info` file into an ``Info``;
``dump_info`` writes one back in canonical form, so that
``parse_info(dump_info(x)) == x``. Known keys become typed fields; unknown
keys stay in each object's ``extra`` and unknown forms in ``Info.extra_forms``,
so nothing a newer writer adds is lost by an older reader.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import types
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar, Union, get_args, get_origin, get_type_hints

from .errors import QFormatError
from .names import check_plain_name
from .sexp import Form, dump_forms, parse_forms
from .limits import DEFAULT_LIMITS, Limits, exceeded
from .store import open_regular, read_at_most

FORMAT_VERSION = 1

HEX_KEYS = frozenset({"q:addr", "q:offset", "q:kernel-from"})


def _key(field_name: str) -> str:
    return "q:" + field_name.replace("_", "-")


@dataclass
class MapRange:
    """One mapping of an object: where it sat in the address space."""

    addr: int
    size: int
    offset: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def contains(self, address: int) -> bool:
        return self.addr <= address < self.addr + self.size

    def file_offset(self, address: int) -> int:
        return address - self.addr + self.offset


@dataclass
class TaskInfo:
    """The ``q:info`` form: who was profiled, how, when."""

    format_version: int | None = FORMAT_VERSION
    syscollect_cmdline: list[str] | None = None
    cmdline: list[str] | None = None
    comm: str | None = None
    exe: str | None = None
    pid: int | None = None
    pids: list[int] | None = None
    cpu: int | None = None
    hostname: str | None = None
    kernel_release: str | None = None
    arch: str | None = None
    run_id: str | None = None  # random, one per q-syscollect invocation: tells runs apart
    run_start: float | None = None  # Unix seconds when that invocation started
    start_time: float | None = None
    end_time: float | None = None
    samples: int | None = None
    lost_samples: int | None = None
    task_stats: dict[str, Any] | None = None
    cpu_stats: dict[str, Any] | None = None
    state: str | None = None  # "open" while the writer may still rewrite it, then "closed"
    # Seconds the wall clock differed from start-time + monotonic time elapsed
    # when the set ended (positive: stepped forward); only beyond 2 s.
    clock_step: float | None = None
    samples_folded: int | None = None  # samples whose stacks went to the remainder line
    stacks_folded: int | None = None  # distinct stacks among them (an estimate, ~3%)
    purpose: str | None = None  # "cpu-stats": no samples, only q:cpu-stats
    # Lowest address the set holds that was taken in kernel mode: at or above
    # it every address is the kernel's, below it user space (qformat.arch).
    kernel_from: int | None = None
    # The cgroup the set's samples ran in (the one with the most weight),
    # and the systemd unit and container id it names (qformat.cgroup).
    cgroup: str | None = None
    unit: str | None = None
    container: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Histogram:
    """The ``q:histogram`` form: the `.hist` file and its units."""

    file: str
    event_name: str | None = None
    x_unit_label: str | None = None
    y_unit_label: str | None = None
    y_unit_conversion_factor: float | None = None
    y_granularity: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class CallCounts:
    """The ``q:call-counts`` form: the `.edge` file."""

    file: str
    conversion_factor: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class CallStacks:
    """The ``q:call-stacks`` form: the `.stack` file and how it was unwound."""

    file: str
    unwinder: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Threads:
    """The ``q:threads`` form: the `.threads` file (per-thread CPU, off-CPU
    and wait-for-CPU weights) and the units of its times."""

    file: str
    off_cpu: int | None = None  # 1: S/D/W lines (--off-cpu)
    time_unit_label: str | None = None
    time_conversion_factor: float | None = None
    min_stack_ns: int | None = None
    switches: int | None = None
    switch_records_lost: int | None = None
    off_cpu_seconds: float | None = None  # the S and D lines' total, in seconds
    cpu_wait_seconds: float | None = None  # the W lines' total
    cpu_rest: int | None = None  # a TID whose cpu lines are the .stack less the others'
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ObjectRef:
    """A ``q:object`` form: a mapped file, its copy and its mappings."""

    name: str
    file: str | None = None
    path: str | None = None
    build_id: str | None = None
    maps: list[MapRange] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class JitdumpRef:
    """``q:jitdump``: what `.q` keeps of a process's jitdump (qformat.jitdump)."""

    file: str
    pid: int | None = None
    path: str | None = None  # the dump as the task mapped it
    code_loads: int | None = None  # CODE_LOAD and CODE_MOVE records kept
    truncated: int | None = None  # 1: reading stopped early (limit or bad record)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Info:
    """Everything one `.info` file says."""

    task: TaskInfo = field(default_factory=TaskInfo)
    histogram: Histogram | None = None
    call_counts: CallCounts | None = None
    call_stacks: CallStacks | None = None
    threads: Threads | None = None
    kallsyms: str | None = None
    vdso: str | None = None
    perf_maps: list[str] = field(default_factory=list)
    jitdumps: list[JitdumpRef] = field(default_factory=list)
    objects: list[ObjectRef] = field(default_factory=list)
    extra_forms: list[Form] = field(default_factory=list)

    def data_files(self) -> list[str]:
        """Names of the data files this `.info` refers to."""
        refs = (self.histogram, self.call_counts, self.call_stacks, self.threads)
        return [r.file for r in refs if r is not None]

    def copies(self) -> list[str]:
        """Names of the object copies this `.info` refers to."""
        names = [o.file for o in self.objects if o.file]
        names += [n for n in (self.kallsyms, self.vdso) if n]
        return names + list(self.perf_maps) + [j.file for j in self.jitdumps]


# ------------------------------------------------- alist <-> dataclass

_T = TypeVar("_T")
_FILE_FIELDS = {"file"}


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
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name == "extra":
            continue
        key = _key(f.name)
        if special and f.name in special:
            if key in rest:
                kwargs[f.name] = special[f.name](rest.pop(key), line)
            continue
        if key not in rest:
            if _optional(hints[f.name]):
                kwargs[f.name] = None
            elif f.default is not dataclasses.MISSING:
                kwargs[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                kwargs[f.name] = f.default_factory()
            else:
                raise QFormatError(f"({tag} ...) lacks {key}", line=line)
            continue
        value = _check(rest.pop(key), hints[f.name], key, line)
        if f.name in _FILE_FIELDS and value is not None:
            value = _plain(value, line)
        kwargs[f.name] = value
    kwargs["extra"] = rest
    return cls(**kwargs)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The field types of a form's class: get_type_hints evaluates the
    annotation strings anew at every call, which was half of reading an .info."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = get_type_hints(cls)
    return hints


def _optional(hint: Any) -> bool:
    return get_origin(hint) in (Union, types.UnionType) and type(None) in get_args(hint)


def _to_alist(obj: Any, special: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if f.name == "extra":
            continue
        value = getattr(obj, f.name)
        if special and f.name in special:
            value = special[f.name](value)
        if value is not None:
            out[_key(f.name)] = value
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
