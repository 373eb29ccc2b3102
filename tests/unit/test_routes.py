"""The routing table: one route per record type, and a collector whose
handlers take every record its drains hand on. Each handler is named
where the collector is made (``routes.Handlers``), not looked up by a
name built at run time: one left out fails there, not by records
dropped in silence."""

from __future__ import annotations

import inspect
import io

import pytest

from qtools.daemon.collector import CpuCollector, Options
from qtools.daemon.decode.drain import dispatch
from qtools.daemon.decode.layout import SampleLayout
from qtools.daemon.decode.routes import ROUTES, Handlers
from qtools.daemon.decode.tracepoints import TRACEPOINT_ROUTES
from qtools.daemon.kernel import abi
from qtools.daemon.kernel.source import ReplaySource
from qtools.daemon.machine.host import StaticHost
from qtools.daemon.sets.checkpoint import RunInfo
from qtools.daemon.sets.objects import ObjectCopier
from qtools.qformat import QDir

LAYOUT = SampleLayout(abi.SAMPLE_IDENTIFIER | abi.SAMPLE_IP | abi.SAMPLE_TID | abi.SAMPLE_TIME
                      | abi.SAMPLE_CPU | abi.SAMPLE_PERIOD | abi.SAMPLE_CALLCHAIN)
HANDLED = {r.record for r in ROUTES if r.handler is not None} | \
    {t.record for t in TRACEPOINT_ROUTES}


def _each_its_own() -> Handlers:
    """A Handlers whose every field is a function of its own, named for it."""
    def named(field: str):
        def handler(rec: object) -> None:
            pass
        handler.__name__ = field
        return handler
    return Handlers(**{f: named(f) for f in Handlers._fields})


def test_one_route_per_record_type_and_one_handler_per_record_class():
    assert len({r.number for r in ROUTES}) == len(ROUTES)
    handlers = _each_its_own()
    picked: dict[type, set[str]] = {}
    for r in ROUTES:
        if r.handler is not None:
            picked.setdefault(r.record, set()).add(r.handler(handlers).__name__)
    for t in TRACEPOINT_ROUTES:
        picked.setdefault(t.record, set()).add(t.handler(handlers).__name__)
    assert all(len(names) == 1 for names in picked.values()), picked
    # every handler is some record's: none is named and never called
    assert {n for names in picked.values() for n in names} == set(Handlers._fields)


def test_a_collector_has_a_handler_for_every_record_its_drains_hand_on(tmp_path):
    with QDir.open(tmp_path / "q", create=True) as qdir:
        host = StaticHost(files=None)
        c = CpuCollector(Options(cpu=0, off_cpu=True), RunInfo(["q-syscollect"], "cpu-clock",
                         "seconds", 1e-9, "fp"), ReplaySource(LAYOUT, []), qdir,
                         ObjectCopier(qdir, host=host), out=io.StringIO(), host=host)
        table = dispatch(c.handlers)
    assert set(table) == HANDLED
    # each is a method of one of the collector's parts, bound as it was made
    assert all(inspect.ismethod(h) for h in table.values()), table


def test_a_handler_left_out_fails_as_the_handlers_are_made():
    fields = _each_its_own()._asdict()
    del fields["cgroup"]
    with pytest.raises(TypeError, match="cgroup"):
        Handlers(**fields)
