"""The profile: one value that every report, export and filter reads.

As pprof's ``profile.Profile``, a profile is samples over locations: each
selected task set's stacks of location ids (innermost first) with their
counts, as its data files hold them, and each location an address of that
set with where its mappings place it. Addresses of different processes
mean different things, so each set keeps its own locations (``SetSamples``)
and names them through its own address space (``Names``).

How a location reads as frames (a function, an object, an address or a
source line; with its inlined functions or not), and which samples and
frames a report keeps (the kernel's, Python's, ``--focus``, ``--ignore``,
``--hide``), is the profile's ``View``: every output groups the same
samples through the same view (``profile.group``), so a filter means the
same in the flat profile, the call graph, JSON, folded stacks, DOT, pprof
and OpenTelemetry.

Names are looked up when a view first needs them, through the set's
address space, which stays usable while the symbolizer that made it is
open (``profile.report``).
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, NamedTuple, Protocol

from .frames import SetSummary, Symbolized
from .lost import LostClaim

# ``LocationTable.places`` of an address in no mapping of the set: the
# kernel's (at or above q:kernel-from), or nowhere known (JIT code, unknown)
KERNEL, NOWHERE = -1, -2

BY_CHOICES = ("function", "object", "address", "line")
KERNEL_MODES = ("user", "kernel")  # --no-kernel, --kernel-only
WEIGHTS = ("event", "samples")  # folded stacks' counts (--weight)


class Mapping(NamedTuple):
    """Where an object sat in a process, as pprof's mappings say it."""

    start: int
    limit: int
    offset: int  # in the file, of ``start``
    file: str  # the object's original path ([kernel.kallsyms] for the kernel)
    build_id: str


class Names(Protocol):
    """What a set's address space answers about its addresses
    (``naming.space.AddressSpace``); a return address is asked about at
    address-1, inside its call."""

    def lookup(self, address: int, is_return: bool = False) -> Symbolized: ...

    def line(self, address: int, is_return: bool = False) -> tuple[str, int] | None: ...

    def inlined(self, address: int, is_return: bool = False,
                with_line: bool = False) -> list[tuple[str, str, int]]: ...

    def has_lines(self) -> bool: ...

    def is_root(self, address: int, is_return: bool) -> bool: ...

    def export_mapping(self, place: int) -> Mapping | None: ...


class LocationTable:
    """A set's locations by id, kept as columns (address, return address or
    not, place: the index of the set's mapping, or KERNEL or NOWHERE): 13
    bytes each, where a tuple took about 200, and a crafted set holds
    millions of distinct addresses."""

    def __init__(self) -> None:
        self.addresses = array("Q")
        self.returns = bytearray()  # 1: a return address
        self.places = array("i")

    def add(self, address: int, is_return: bool, place: int) -> int:
        """A new location; its id."""
        self.addresses.append(address)
        self.returns.append(is_return)
        self.places.append(place)
        return len(self.places) - 1

    def kernel(self, lid: int) -> bool:
        return self.places[lid] == KERNEL

    def __len__(self) -> int:
        return len(self.places)


class Labels(NamedTuple):
    """What a sample is of besides its stack: its set's process, CPU, machine
    and unit, and where the set's data has them, its thread."""

    comm: str | None
    pid: int | None
    cpu: int | None
    host: str | None
    unit: str | None = None  # the systemd unit (q:unit)
    container: str | None = None  # the container id (q:container)
    tid: int | None = None  # the thread (from a `.threads` file)
    thread: str | None = None  # its name

    def pairs(self) -> list[tuple[str, str]]:
        """The labels that are known, as text: pid and cpu too, as Pyroscope and
        Parca take labels (and cpu 0 stays cpu 0, not an unset number)."""
        known = (("comm", self.comm), ("pid", self.pid), ("cpu", self.cpu),
                 ("host", self.host), ("unit", self.unit), ("container", self.container),
                 ("thread", self.thread))
        return [(key, str(value)) for key, value in known if value is not None and value != ""]

    def numbers(self) -> list[tuple[str, int]]:
        """The numeric labels: the thread id, as pprof's schema names it."""
        return [("thread_id", self.tid)] if self.tid is not None else []


class SetFacts(NamedTuple):
    """What a report says of a set once its samples are grouped: kept for
    every set of a report where its samples are not (``SetSamples.facts``)."""

    summary: SetSummary
    path: str
    factor: float
    unit: str
    event: str
    granularity: float | None
    lost: LostClaim | None
    start_time: float | None
    end_time: float | None
    no_stack_file: bool
    root_label: str
    root_label_pid: str


class SetSamples:
    """One task set's samples: stacks of location ids, innermost first, with
    their counts in the set's own units (filled in by ``profile.locate``, or
    ``profile.threadlocs`` from a `.threads` file)."""

    def __init__(self, index: int, summary: SetSummary, labels: Labels, names: Names,
                 path: str) -> None:
        self.index = index  # the set's place in the profile
        self.summary = summary  # as the report lists it (names as the `.q` has them)
        self.labels = labels
        self.names = names  # its address space
        self.path = path  # its `.info`
        self.locations = LocationTable()
        # From the `.stack` (in order of first appearance), or without one from
        # the `.hist` (stacks of one location); counts.
        self.stacks: dict[tuple[int, ...], int] = {}
        self.from_stacks = False  # ``stacks`` came from a `.stack`
        self.stack_locations = 0  # locations [0, this) are those of ``stacks``
        self.stack_file: str | None = None  # its path (where the distinct-stacks limit is told)
        # Stacks not kept by the collector, placed on the leaves the `.hist`
        # has beyond the stacks' (added after ``stacks``), and what is left
        # unplaced (a frame of its own, ``group.UNKEPT``).
        self.spread: dict[int, int] = {}
        self.unkept = 0
        # (call site, callee) -> calls, from the `.edge` (None: no call counts),
        # and the estimated calls one count stands for
        self.calls: dict[tuple[int, int], int] | None = None
        self.calls_factor = 1.0
        self.no_stack_file = False  # the `.info` names no `.stack` though it has samples
        # Locations that stand for a thread (--by thread, and the exports'
        # thread labels): id -> (tid, the thread's name)
        self.thread_roots: dict[int, tuple[int, str | None]] = {}
        # What a count is worth: output units (seconds, usually) per count,
        # in ``unit``, of ``event``; ``granularity`` is one sample's weight
        # (q:y-granularity) in output units, where the set says it.
        self.factor = 1.0
        self.unit = "seconds"
        self.event = "cpu-clock"
        self.granularity: float | None = None
        self.counts_in_time = False  # counts are nanoseconds from a `.threads` file
        self.start_time: float | None = None
        self.end_time: float | None = None
        self.lost: LostClaim | None = None  # what the set says of its CPU's lost records
        # Weight the collector moved to a function's first address
        # (q:hist-moved), in counts; JIT information found, as text
        self.moved = 0
        self.jit_sources: list[str] = []
        # The frame its stacks go under in folded stacks of a whole machine,
        # without and with the pid (``comm``, ``comm-pid``)
        self.root_label = summary.comm or summary.file
        self.root_label_pid = self.root_label

    def facts(self) -> SetFacts:
        return SetFacts(self.summary, self.path, self.factor, self.unit, self.event,
                        self.granularity, self.lost, self.start_time, self.end_time,
                        self.no_stack_file, self.root_label, self.root_label_pid)


@dataclass(frozen=True)
class View:
    """How a profile's locations read as frames, and which samples and frames
    its reports keep, in the order they apply: the kernel's (``kernel``:
    "user" for --no-kernel, "kernel" for --kernel-only), Python's, then
    ``focus`` and ``ignore`` (whole stacks by the names of their frames)
    and ``hide`` (frames), as pprof applies its -focus, -ignore and -hide."""

    by: str = "function"  # a frame is a function, object, address or source line
    inline: bool = False  # a leaf's self time goes to its innermost inlined function
    escape: bool = True  # names escaped for a text report (JSON and exports keep them)
    kernel: str | None = None  # KERNEL_MODES, or None: every sample
    python: bool = False  # Python frames only, as py-spy shows them
    focus: tuple[re.Pattern[str], ...] = ()
    ignore: tuple[re.Pattern[str], ...] = ()
    hide: tuple[re.Pattern[str], ...] = ()
    roots: bool = False  # each set's stacks under their process (folded stacks)
    per_pid: bool = False  # ... named comm-pid
    weight: str = "event"  # ... weighed by event counts or by samples (WEIGHTS)

    @property
    def filters(self) -> tuple[str, ...]:
        """The name filters, as the user wrote them."""
        return tuple([f"--focus {p.pattern}" for p in self.focus]
                     + [f"--ignore {p.pattern}" for p in self.ignore]
                     + [f"--hide {p.pattern}" for p in self.hide])

    @property
    def processes(self) -> bool:
        """Whether a stack's frames are taken apart after grouping (kernel,
        Python, name filters), not only grouped."""
        return bool(self.kernel or self.python or self.focus or self.ignore or self.hide)


class Profile:
    """The selected task sets' samples, and how its reports read them.

    A profile streams its sets: each set's samples are read and named when a
    report goes through them (``each_set``), one set at a time, so that a
    whole machine's sets are never all in memory at once. ``metric`` is
    what the counts measure: "cpu" (the samples), or time from the sets'
    `.threads` files ("off-cpu", "cpu-wait", "wall"), in nanoseconds."""

    def __init__(self, source: Callable[[], Iterable[SetSamples]], view: View,
                 metric: str = "cpu") -> None:
        self.source = source
        self.view = view
        self.metric = metric

    def each_set(self) -> Iterable[SetSamples]:
        return self.source()

    def with_view(self, **changes: Any) -> Profile:
        """The same samples, read through a view with ``changes``."""
        return Profile(self.source, replace(self.view, **changes), self.metric)

    @property
    def in_time(self) -> bool:
        return self.metric != "cpu"
