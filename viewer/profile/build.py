"""From the selected task sets to their profile.

Each set is read as stacks of locations (``locate``; from its `.threads`
file where the profile is of a metric other than the samples, of some
threads, or by thread: ``threadlocs``), in its own address space from the
one symbolizer, which names its locations as a report needs them. The
profile reads its sets when a report goes through them, one at a time.

Exports label each sample with its thread: they take a set's CPU samples
from its `.threads` file where that adds up to its `.hist`
(``threadlocs.locate_cpu_by_thread``), so the flat profile stays the CPU
profile the `.stack` gives; where it does not, the set is exported from
its `.stack` without thread labels, as sets of earlier releases are, and
q-view says so once.
"""

from __future__ import annotations

from typing import Iterator

from qtools.qformat import LimitExceeded, QFormatError

from ..inputs.load import StoredSet
from ..model.options import ProfileOptions
from ..model.profile import Profile, SetSamples, View
from ..naming.addrspace import AddressSpace
from ..naming.symbols import Symbols, Warn
from .locate import SetLocations, locate_set
from .threadlocs import ThreadView, locate_cpu_by_thread, locate_threads

CPU_SAMPLES = ThreadView()  # the samples of every thread, from the `.stack` files


def thread_view(opts: ProfileOptions) -> ThreadView:
    """What of the `.threads` files a profile shows."""
    return ThreadView(opts.metric, opts.tids, opts.by_thread)


def profile(sets: list[StoredSet], symbols: Symbols, warn: Warn, opts: ProfileOptions,
            view: View, thread_labels: bool = False) -> Profile:
    """The profile of ``sets`` (named through ``symbols``, which must stay open
    while the profile is read); with ``thread_labels``, each CPU sample under
    its thread where the set has them (exports)."""
    threads = thread_view(opts)
    if threads.in_time and sets and not any(ts.info.threads and ts.info.threads.off_cpu
                                            for ts in sets):
        where = ", ".join(dict.fromkeys(ts.directory for ts in sets))
        warn(f"{where}: no off-CPU data in the selected sets (collected without "
             f"q-syscollect --off-cpu): {threads.metric} "
             + ("holds their CPU time only" if threads.metric == "wall"
                and any(ts.info.threads for ts in sets) else "is empty"))

    def each_set() -> Iterator[SetSamples]:
        if thread_labels:
            return _by_thread(sets, symbols, warn, threads)
        return located(sets, symbols, warn, threads)
    return Profile(each_set, view, opts.metric)


def located(sets: list[StoredSet], symbols: Symbols, warn: Warn,
            threads: ThreadView = CPU_SAMPLES) -> Iterator[SetLocations]:
    """Each set's located stacks, one set at a time, each with its address
    space (``SetLocations``); from its `.threads` file where ``threads``
    needs one."""
    for index, ts in enumerate(sets):
        space = AddressSpace(symbols, ts.directory, ts.info)
        if threads.needed:
            yield locate_threads(ts, index, space, threads, warn)
        else:
            yield locate_set(ts, index, space, warn)


def _by_thread(sets: list[StoredSet], symbols: Symbols, warn: Warn, threads: ThreadView
               ) -> Iterator[SetSamples]:
    """Each set's stacks, each under its thread where the set has them by
    thread; the sets whose `.threads` does not add up told once, at the end."""
    by_thread = threads._replace(by_thread=True)
    unsplit: list[str] = []
    for index, ts in enumerate(sets):
        space = AddressSpace(symbols, ts.directory, ts.info)
        if threads.needed:
            yield locate_threads(ts, index, space, by_thread, warn)
            continue
        s = None
        if ts.info.threads is not None:
            try:
                s = locate_cpu_by_thread(ts, index, space, warn)
                if s is None:
                    unsplit.append(ts.path)
            except LimitExceeded:
                raise
            except QFormatError as e:  # a bad or missing `.threads`: the `.stack` holds
                warn(f"{e}; exported without thread labels")
        yield s or locate_set(ts, index, space, warn)
    if unsplit:
        more = f" and {len(unsplit) - 1} other set(s)" if len(unsplit) > 1 else ""
        warn(f"{unsplit[0]}{more}: per-thread CPU samples (.threads) do not add up to the "
             ".hist; exported from the .stack, without thread labels")
