"""`.info` files as typed data (docs/q-format.md, sections 3 and 4).

``parse_info`` turns the forms of an `.info` file into an ``Info``;
``dump_info`` writes one back in canonical form, so that
``parse_info(dump_info(x)) == x``. Known keys become typed fields; unknown
keys stay in each object's ``extra`` and unknown forms in ``Info.extra_forms``,
so nothing a newer writer adds is lost by an older reader.
"""

from __future__ import annotations

import errno
import os
import types
from typing import Any, Callable, NamedTuple, TypeVar, Union, get_args, get_origin, get_type_hints

from .errors import QFormatError
from .names import check_plain_name
from .sexp import Form, dump_forms, parse_forms
from .limits import DEFAULT_LIMITS, Limits, exceeded
from .store import open_regular, read_at_most

FORMAT_VERSION = 1

HEX_KEYS = frozenset({"q:addr", "q:offset", "q:kernel-from"})


def _key(field_name: str) -> str:
    return "q:" + field_name.replace("_", "-")


class _Form:
    """What the forms' classes share: equality and a repr by the fields
    their ``__init__`` takes, each kept under its parameter's name; the
    reader and writer below go by the same list (``_params``). Plain
    classes: building dataclasses at import was a tenth of a collector's
    start-up."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, n) == getattr(other, n) for n in _params(type(self)).names)

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in _params(type(self)).names)
        return f"{type(self).__name__}({fields})"


class MapRange(_Form):
    """One mapping of an object: where it sat in the address space."""

    def __init__(self, addr: int, size: int, offset: int = 0,
                 extra: dict[str, Any] | None = None) -> None:
        self.addr = addr
        self.size = size
        self.offset = offset
        self.extra: dict[str, Any] = {} if extra is None else extra

    def contains(self, address: int) -> bool:
        return self.addr <= address < self.addr + self.size

    def file_offset(self, address: int) -> int:
        return address - self.addr + self.offset


class TaskInfo(_Form):
    """The ``q:info`` form: who was profiled, how, when."""

    def __init__(
        self,
        format_version: int | None = FORMAT_VERSION,
        syscollect_cmdline: list[str] | None = None,
        cmdline: list[str] | None = None,
        comm: str | None = None,
        exe: str | None = None,
        pid: int | None = None,
        pids: list[int] | None = None,
        cpu: int | None = None,
        hostname: str | None = None,
        kernel_release: str | None = None,
        arch: str | None = None,
        run_id: str | None = None,
        run_start: float | None = None,
        start_time: float | None = None,
        end_time: float | None = None,
        samples: int | None = None,
        lost_samples: int | None = None,
        task_stats: dict[str, Any] | None = None,
        cpu_stats: dict[str, Any] | None = None,
        state: str | None = None,
        clock_step: float | None = None,
        samples_folded: int | None = None,
        stacks_folded: int | None = None,
        purpose: str | None = None,
        kernel_from: int | None = None,
        cgroup: str | None = None,
        unit: str | None = None,
        container: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.format_version = format_version
        self.syscollect_cmdline = syscollect_cmdline
        self.cmdline = cmdline
        self.comm = comm
        self.exe = exe
        self.pid = pid
        self.pids = pids
        self.cpu = cpu
        self.hostname = hostname
        self.kernel_release = kernel_release
        self.arch = arch
        self.run_id = run_id  # random, one per q-syscollect invocation: tells runs apart
        self.run_start = run_start  # Unix seconds when that invocation started
        self.start_time = start_time
        self.end_time = end_time
        self.samples = samples
        self.lost_samples = lost_samples
        self.task_stats = task_stats
        self.cpu_stats = cpu_stats
        self.state = state  # "open" while the writer may still rewrite it, then "closed"
        # Seconds the wall clock differed from start-time + monotonic time elapsed
        # when the set ended (positive: stepped forward); only beyond 2 s.
        self.clock_step = clock_step
        self.samples_folded = samples_folded  # samples whose stacks went to the remainder line
        self.stacks_folded = stacks_folded  # distinct stacks among them (an estimate, ~3%)
        self.purpose = purpose  # "cpu-stats": no samples, only q:cpu-stats
        # Lowest address the set holds that was taken in kernel mode: at or above
        # it every address is the kernel's, below it user space (qformat.arch).
        self.kernel_from = kernel_from
        # The cgroup the set's samples ran in (the one with the most weight),
        # and the systemd unit and container id it names (qformat.cgroup).
        self.cgroup = cgroup
        self.unit = unit
        self.container = container
        self.extra: dict[str, Any] = {} if extra is None else extra


class Histogram(_Form):
    """The ``q:histogram`` form: the `.hist` file and its units."""

    def __init__(self, file: str, event_name: str | None = None,
                 x_unit_label: str | None = None, y_unit_label: str | None = None,
                 y_unit_conversion_factor: float | None = None,
                 y_granularity: float | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        self.file = file
        self.event_name = event_name
        self.x_unit_label = x_unit_label
        self.y_unit_label = y_unit_label
        self.y_unit_conversion_factor = y_unit_conversion_factor
        self.y_granularity = y_granularity
        self.extra: dict[str, Any] = {} if extra is None else extra


class CallCounts(_Form):
    """The ``q:call-counts`` form: the `.edge` file."""

    def __init__(self, file: str, conversion_factor: float | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        self.file = file
        self.conversion_factor = conversion_factor
        self.extra: dict[str, Any] = {} if extra is None else extra


class CallStacks(_Form):
    """The ``q:call-stacks`` form: the `.stack` file and how it was unwound."""

    def __init__(self, file: str, unwinder: str | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        self.file = file
        self.unwinder = unwinder
        self.extra: dict[str, Any] = {} if extra is None else extra


class Threads(_Form):
    """The ``q:threads`` form: the `.threads` file (per-thread CPU, off-CPU
    and wait-for-CPU weights) and the units of its times."""

    def __init__(self, file: str, off_cpu: int | None = None,
                 time_unit_label: str | None = None,
                 time_conversion_factor: float | None = None,
                 min_stack_ns: int | None = None, switches: int | None = None,
                 switch_records_lost: int | None = None,
                 off_cpu_seconds: float | None = None, cpu_wait_seconds: float | None = None,
                 cpu_rest: int | None = None, extra: dict[str, Any] | None = None) -> None:
        self.file = file
        self.off_cpu = off_cpu  # 1: S/D/W lines (--off-cpu)
        self.time_unit_label = time_unit_label
        self.time_conversion_factor = time_conversion_factor
        self.min_stack_ns = min_stack_ns
        self.switches = switches
        self.switch_records_lost = switch_records_lost
        self.off_cpu_seconds = off_cpu_seconds  # the S and D lines' total, in seconds
        self.cpu_wait_seconds = cpu_wait_seconds  # the W lines' total
        self.cpu_rest = cpu_rest  # a TID whose cpu lines are the .stack less the others'
        self.extra: dict[str, Any] = {} if extra is None else extra


class ObjectRef(_Form):
    """A ``q:object`` form: a mapped file, its copy and its mappings."""

    def __init__(self, name: str, file: str | None = None, path: str | None = None,
                 build_id: str | None = None, maps: list[MapRange] | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        self.name = name
        self.file = file
        self.path = path
        self.build_id = build_id
        self.maps: list[MapRange] = [] if maps is None else maps
        self.extra: dict[str, Any] = {} if extra is None else extra


class JitdumpRef(_Form):
    """``q:jitdump``: what `.q` keeps of a process's jitdump (qformat.jitdump)."""

    def __init__(self, file: str, pid: int | None = None, path: str | None = None,
                 code_loads: int | None = None, truncated: int | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        self.file = file
        self.pid = pid
        self.path = path  # the dump as the task mapped it
        self.code_loads = code_loads  # CODE_LOAD and CODE_MOVE records kept
        self.truncated = truncated  # 1: reading stopped early (limit or bad record)
        self.extra: dict[str, Any] = {} if extra is None else extra


class Info(_Form):
    """Everything one `.info` file says."""

    def __init__(self, task: TaskInfo | None = None, histogram: Histogram | None = None,
                 call_counts: CallCounts | None = None, call_stacks: CallStacks | None = None,
                 threads: Threads | None = None, kallsyms: str | None = None,
                 vdso: str | None = None, perf_maps: list[str] | None = None,
                 jitdumps: list[JitdumpRef] | None = None,
                 objects: list[ObjectRef] | None = None,
                 extra_forms: list[Form] | None = None) -> None:
        self.task: TaskInfo = TaskInfo() if task is None else task
        self.histogram = histogram
        self.call_counts = call_counts
        self.call_stacks = call_stacks
        self.threads = threads
        self.kallsyms = kallsyms
        self.vdso = vdso
        self.perf_maps: list[str] = [] if perf_maps is None else perf_maps
        self.jitdumps: list[JitdumpRef] = [] if jitdumps is None else jitdumps
        self.objects: list[ObjectRef] = [] if objects is None else objects
        self.extra_forms: list[Form] = [] if extra_forms is None else extra_forms

    def data_files(self) -> list[str]:
        """Names of the data files this `.info` refers to."""
        refs = (self.histogram, self.call_counts, self.call_stacks, self.threads)
        return [r.file for r in refs if r is not None]

    def copies(self) -> list[str]:
        """Names of the object copies this `.info` refers to."""
        names = [o.file for o in self.objects if o.file]
        names += [n for n in (self.kallsyms, self.vdso) if n]
        return names + list(self.perf_maps) + [j.file for j in self.jitdumps]


# ------------------------------------------------- alist <-> form

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


class _Params(NamedTuple):
    """The fields of a form's class, from its ``__init__``."""

    names: tuple[str, ...]  # in order, ``extra`` last where there is one
    required: frozenset[str]  # without a default
    hints: dict[str, Any]  # their types


_PARAMS: dict[type, _Params] = {}


def _params(cls: type) -> _Params:
    """Read off ``__init__`` once per class (get_type_hints evaluates the
    annotation strings anew at every call, which was half of reading an .info)."""
    got = _PARAMS.get(cls)
    if got is None:
        init = cls.__init__  # type: ignore[misc]
        code = init.__code__
        names = code.co_varnames[1:code.co_argcount]
        required = names[:len(names) - len(init.__defaults__ or ())]
        got = _PARAMS[cls] = _Params(names, frozenset(required), get_type_hints(init))
    return got


def _from_alist(cls: type[_T], alist: Any, tag: str, line: int | None,
                special: dict[str, Any] | None = None) -> _T:
    if not isinstance(alist, dict):
        raise QFormatError(f"({tag} ...) needs an alist, found {_describe(alist)}", line=line)
    rest = dict(alist)
    params = _params(cls)
    hints = params.hints
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
        if name in _FILE_FIELDS and value is not None:
            value = _plain(value, line)
        kwargs[name] = value
    kwargs["extra"] = rest
    return cls(**kwargs)


def _optional(hint: Any) -> bool:
    return get_origin(hint) in (Union, types.UnionType) and type(None) in get_args(hint)


def _to_alist(obj: Any, special: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _params(type(obj)).names:
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
