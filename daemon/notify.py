"""The sd_notify protocol: datagrams to $NOTIFY_SOCKET (systemd Type=notify).

READY=1 once collecting, STATUS=... for `systemctl status`, WATCHDOG=1
keep-alives at half of $WATCHDOG_USEC, STOPPING=1 on the way out. Without
$NOTIFY_SOCKET (not under systemd) every call is a no-op.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket


class Notifier:
    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET", "")
        if path.startswith("@"):
            path = "\0" + path[1:]  # abstract namespace
        self.address = path if path.startswith(("/", "\0")) else None
        usec = env.get("WATCHDOG_USEC", "")
        watchdog_pid = env.get("WATCHDOG_PID", "")
        mine = not watchdog_pid or watchdog_pid == str(os.getpid())
        self.watchdog_interval = int(usec) / 2e6 if usec.isdigit() and int(usec) and mine \
            else None
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *fields: str) -> bool:
        """Send ``KEY=value`` fields in one datagram; False if it could not go."""
        if self.address is None:
            return False
        try:
            if self._sock is None:
                import socket  # only under systemd: not imported at every start
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto("\n".join(fields).encode(), self.address)
        except OSError:
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.send("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def status(self, status: str) -> bool:
        return self.send(f"STATUS={status}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self, status: str) -> bool:
        return self.send("STOPPING=1", f"STATUS={status}")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
