"""Golden files: tests/golden/NAME, compared exactly; Q_REGEN_GOLDEN=1 rewrites them."""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def check(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("Q_REGEN_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"missing golden file {path} (run with Q_REGEN_GOLDEN=1 to create it)"
    expected = path.read_text()
    assert text == expected, f"output differs from {path}:\n{text}"
