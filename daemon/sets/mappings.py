"""Which mappings a set's samples touched: their objects are listed in the
set's `.info` and copied into the `.q` while the task still lives.

Each sample's user addresses are looked up in its process's maps once per
version of those maps: an address met before is skipped, and so is a
stack tuple met before (the unwinder hands out one tuple for every sample
of a walk it remembers), whose addresses are all noted.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

from ..machine import synthesize
from ..machine.host import Host
from ..machine.tasks import Process, TaskTable
from .aggregate import NOTED_STACKS, CollectedSet
from .objects import ObjectCopier

MAPS_REFRESH_SECONDS = 1.0
"""A process's maps are read again from /proc at most this often, for an
address none of its mappings holds (an mmap whose record was lost)."""


class MappingNotes:
    """Notes the mappings samples touch, for one collector."""

    def __init__(self, table: TaskTable, host: Host, copier: ObjectCopier,
                 write_error: Callable[[OSError], None]) -> None:
        self.table = table
        self.host = host
        self.copier = copier
        self.write_error = write_error  # a copy could not be written: told, not raised

    def note(self, proc: Process, ts: CollectedSet, addresses: Sequence[int],
             arcs: Sequence[tuple[int, int]] = ()) -> None:
        """Record which mappings the sample touched (their objects get copied
        and listed); addresses seen before under the same maps are skipped.
        ``addresses`` are user ones: a kernel address is in no mapping."""
        cache = ts.noted
        if not arcs and cache.holds(addresses, proc.maps_version):
            return
        noted = cache.addresses
        if cache.maps_version != proc.maps_version:
            noted.clear()
            cache.stacks.clear()
            cache.maps_version = proc.maps_version
        if not arcs:
            if noted.issuperset(addresses):  # the common case, at C speed
                if type(addresses) is tuple:
                    if len(cache.stacks) >= NOTED_STACKS:
                        cache.stacks.clear()
                    cache.stacks[id(addresses)] = addresses
                return
        fresh = [a for a in addresses if a not in noted]
        if arcs:
            fresh += [a for arc in arcs for a in arc if a not in noted]
        if not fresh:
            return
        mappings = ts.data.tally.mappings
        refreshed = False
        for addr in fresh:
            m = proc.maps.find(addr)
            if m is None and not refreshed:
                refreshed = True
                if self.refresh_maps(proc):
                    noted.clear()
                    cache.stacks.clear()
                    cache.maps_version = proc.maps_version
                    m = proc.maps.find(addr)
            if m is None:
                continue
            noted.add(addr)
            if m in mappings:
                continue
            mappings.add(m)
            if not m.obj.special and self.copier.known(m.obj) is None:
                try:
                    self.copier.copy(proc, m)  # now, while the task still lives
                except OSError as e:
                    self.write_error(e)

    def refresh_maps(self, proc: Process) -> bool:
        """Read a live process's maps again, unless they were read within
        MAPS_REFRESH_SECONDS; True if they were."""
        now = time.monotonic()
        if proc.ended or now - proc.maps_loaded_at < MAPS_REFRESH_SECONDS:
            return False
        proc.maps_loaded_at = now
        lines = self.host.maps(proc.pid)
        if lines is None:
            return False
        self.table.refresh_maps(proc, synthesize.mmaps(proc.pid, lines, 0))
        return True
