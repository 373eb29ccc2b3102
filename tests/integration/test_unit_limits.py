"""The systemd unit's sandbox and limits, checked where systemd is not the
init: from the unit's text."""

from __future__ import annotations

import re

from tests.integration.test_service import UNIT


def unit_values(text: str, key: str) -> list[str]:
    """Every ``key=`` assignment of a unit's text, in order."""
    return re.findall(rf"^{key}=(.*)$", text, re.M)


def test_the_unit_leaves_kernel_symbols_readable() -> None:
    # systemd's ProtectKernelTunables= makes /proc/kallsyms an empty file, and
    # ProtectKernelLogs= drops CAP_SYSLOG (kallsyms then shows zero
    # addresses): either leaves every kernel frame unnamed. What they protect
    # must be protected by hand instead.
    text = UNIT.read_text()
    assert not unit_values(text, "ProtectKernelTunables")
    assert not unit_values(text, "ProtectKernelLogs")
    assert "CAP_SYSLOG" in unit_values(text, "CapabilityBoundingSet")[-1].split()
    read_only = " ".join(unit_values(text, "ReadOnlyPaths")).split()
    assert {"/sys", "/proc/sys"} <= set(read_only)
    hidden = {p.lstrip("-") for p in " ".join(unit_values(text, "InaccessiblePaths")).split()}
    assert {"/proc/kmsg", "/proc/kcore"} <= hidden
