"""A collector's stop raised from a signal handler: at once, except inside
an uninterrupted step (one set's data files), which it waits for."""

from __future__ import annotations

import os
import signal

import pytest

from qtools.daemon import stopping
from qtools.daemon.stopping import ParentGone


@pytest.fixture
def stop_signal():
    old = signal.signal(signal.SIGUSR2, lambda *_: stopping.stop_now())
    yield lambda: os.kill(os.getpid(), signal.SIGUSR2)
    signal.signal(signal.SIGUSR2, old)
    stopping._pending = False


def test_the_stop_comes_at_once_outside_a_step(stop_signal):
    done = []
    with pytest.raises(ParentGone):
        stop_signal()
        for _ in range(1000):  # the handler runs between two bytecodes
            done.append(1)
    assert len(done) < 1000


def test_the_stop_waits_for_an_uninterrupted_step(stop_signal):
    done = []
    with pytest.raises(ParentGone):
        with stopping.uninterrupted():
            stop_signal()
            done.extend(["hist", "stack"])
            with stopping.uninterrupted():  # nested: the outer step decides
                done.append("edge")
            done.append("end of step")
        done.append("after the step")
    assert done == ["hist", "stack", "edge", "end of step"]


def test_the_stop_is_not_lost_to_an_error_in_the_step(stop_signal):
    with pytest.raises(ParentGone):
        with stopping.uninterrupted():
            stop_signal()
            raise OSError("No space left on device")
