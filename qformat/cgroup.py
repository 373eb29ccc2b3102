"""What a cgroup path names: the systemd unit and the container.

Pure functions on the path as the kernel reports it (PERF_RECORD_CGROUP,
/proc/PID/cgroup, relative to the cgroup2 root). The daemon writes what
they find into each `.info` (q:cgroup, q:unit, q:container), the viewer
selects and groups by it; both read the same answer from here.

The unit is the innermost path component that is a systemd unit a task can
live in (``.service``, ``.scope``, ``.socket``, ``.mount``, ``.swap``):
``/system.slice/nginx.service`` is ``nginx.service``; a subtree a unit
delegates (``/system.slice/x.service/worker``) still belongs to it; a
user's manager ``user@1000.service/app.slice/foo.service`` gives
``foo.service``. Slices hold no tasks, so they are no unit of a task.

The container is the id the common runtimes put in the path: docker
(``docker-ID.scope``, cgroupfs ``/docker/ID``), containerd and CRI
(``cri-containerd-ID.scope``), CRI-O (``crio-ID.scope``), podman
(``libpod-ID.scope``, ``/libpod_parent/libpod-ID``), Kubernetes' cgroupfs
driver (``/kubepods/burstable/podUID/ID``); the innermost one wins. A
runtime's monitor (``crio-conmon-ID.scope``, ``libpod-conmon-ID.scope``)
is not its container.
"""

from __future__ import annotations

import re
from typing import NamedTuple

MAX_PATH = 4096  # a cgroup path longer than PATH_MAX is nobody's

_UNIT_SUFFIXES = (".service", ".scope", ".socket", ".mount", ".swap")
_ID = r"([0-9a-f]{64})"
# systemd-driver scopes: runtime prefix, the id, ".scope"
_SCOPE = re.compile(r"(?:docker|cri-containerd|crio|libpod|containerd)-" + _ID + r"\.scope")
# cgroupfs-driver directories: the runtime's directory, then the id
_RUNTIME_DIRS = ("docker", "libpod_parent", "containerd", "crio", "actions_job")
_BARE_ID = re.compile(_ID)
_LIBPOD_DIR = re.compile(r"libpod-" + _ID)
_KUBE_POD = re.compile(r"pod[0-9a-f_-]{32,40}")


class CgroupName(NamedTuple):
    """What one cgroup path names; None where it names nothing."""

    path: str
    unit: str | None = None
    container: str | None = None  # the runtime's container id (64 hex digits)


def name_cgroup(path: str) -> CgroupName:
    """The unit and container of a cgroup ``path`` (``/`` for the root)."""
    parts = [p for p in path[:MAX_PATH].split("/") if p and p not in (".", "..")]
    unit = None
    for part in parts:
        if any(part.endswith(s) and len(part) > len(s) for s in _UNIT_SUFFIXES):
            unit = part
    return CgroupName(path, unit, _container(parts))


def _container(parts: list[str]) -> str | None:
    found = None
    for i, part in enumerate(parts):
        m = _SCOPE.fullmatch(part) or _LIBPOD_DIR.fullmatch(part)
        if m:
            found = m.group(1)
            continue
        if i and _BARE_ID.fullmatch(part):
            parent = parts[i - 1]
            kube = _KUBE_POD.fullmatch(parent) and any(p.startswith("kubepods") for p in parts)
            if parent in _RUNTIME_DIRS or kube:
                found = part
    return found


def proc_cgroup_path(text: str) -> str | None:
    """The cgroup path of a task from its /proc/PID/cgroup text: the
    unified hierarchy's (``0::PATH``), else systemd's named v1 hierarchy,
    else the first one listed."""
    first = named = None
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3 or not fields[2].startswith("/"):
            continue
        if fields[0] == "0" and fields[1] == "":
            return fields[2]
        if fields[1] == "name=systemd":
            named = fields[2]
        if first is None:
            first = fields[2]
    return named or first
