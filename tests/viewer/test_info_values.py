"""An `.info` value no reader can show: one line on stderr naming the
file, never a traceback."""

from __future__ import annotations

import pytest

from qsynth import MS, QBuilder
from tests.conftest import q_view


@pytest.mark.parametrize("report", [(), ("FILE",)])
def test_a_pid_of_two_million_hex_digits_is_one_line(tmp_path, report):
    """The installed q-view, on ``(q:pid . #xfff...)`` of 2,000,000 digits:
    one line naming the file and the line, exit status 1."""
    q = QBuilder(tmp_path / ".q")
    name = q.task("calls", 7, 0, hist={0x1000: MS})
    path = q.path / name
    text = path.read_text()
    assert "(q:pid . 7)" in text
    path.write_text(text.replace("(q:pid . 7)", "(q:pid . #x" + "f" * 2_000_000 + ")"))
    proc = q_view(str(path) if report else str(q.path))
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    # the line where the form holding it starts (docs/q-format.md 3.3)
    assert proc.stderr.startswith(f"q-view: {path}:1: integer out of range"), proc.stderr
