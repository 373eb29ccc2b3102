"""The forms of an `.info` file as classes (docs/q-format.md, section 4).

Each class is one form (``q:info``, ``q:histogram``, ``q:object``...) and
``Info`` all of one file. A field is a parameter of the class's
``__init__`` under the name the attribute has; info.py reads and writes
the forms by them (``fields_of``), so a field added here is read and
written with its key (``q:`` and the name with dashes). Unknown keys stay
in each form's ``extra``.
"""

from __future__ import annotations

from typing import Any, NamedTuple, get_type_hints

from .sexp import Form

FORMAT_VERSION = 1


class _Form:
    """What the forms' classes share: equality and a repr by the fields
    their ``__init__`` takes, each kept under its parameter's name; the
    reader and writer of `.info` files (info.py) go by the same list
    (``fields_of``). Plain classes: building dataclasses at import was a
    tenth of a collector's start-up."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, n) == getattr(other, n) for n in fields_of(type(self)).names)

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in fields_of(type(self)).names)
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
        lost_from: int | None = None,
        slice_start: float | None = None,
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
        # Where those records fall among the CPU's losses in its slice: the
        # CPU's count when the set began, and when that slice began (its id).
        self.lost_from = lost_from
        self.slice_start = slice_start
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


class Fields(NamedTuple):
    """The fields of a form's class, from its ``__init__``."""

    names: tuple[str, ...]  # in order, ``extra`` last where there is one
    required: frozenset[str]  # without a default


_FIELDS: dict[type, Fields] = {}
_HINTS: dict[type, dict[str, Any]] = {}


def fields_of(cls: type) -> Fields:
    """Read off ``__init__`` once per class."""
    got = _FIELDS.get(cls)
    if got is None:
        init = cls.__init__  # type: ignore[misc]
        code = init.__code__
        names = code.co_varnames[1:code.co_argcount]
        required = names[:len(names) - len(init.__defaults__ or ())]
        got = _FIELDS[cls] = Fields(names, frozenset(required))
    return got


def hints_of(cls: type) -> dict[str, Any]:
    """The fields' types, which only reading checks values against, once per
    class: get_type_hints evaluates the annotation strings anew at every
    call (half of reading an .info), and writing needs the names alone."""
    got = _HINTS.get(cls)
    if got is None:
        got = _HINTS[cls] = get_type_hints(cls.__init__)  # type: ignore[misc]
    return got
