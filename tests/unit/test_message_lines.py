"""Every line the collectors write to the stderr they share is one write.

sys.stderr writes through to its file descriptor (no buffer): print's two
writes (the text, then the newline) from two collectors at once came out
as one line holding both messages and an empty line."""

from __future__ import annotations

import io

from qtools.daemon.messages import tell, write_line


class Writes(io.RawIOBase):
    """A raw stream that keeps each write apart, as a pipe's reader sees
    the writes of several processes."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[override]
        self.writes.append(bytes(b))
        return len(b)


def stderr_like() -> tuple[Writes, io.TextIOWrapper]:
    raw = Writes()
    return raw, io.TextIOWrapper(raw, encoding="utf-8", write_through=True)  # type: ignore[arg-type]


def test_a_line_is_one_write():
    raw, out = stderr_like()
    write_line(out, "[12] profiling on cpu 0 with cpu-clock at 997 Hz")
    tell(out, "sampling 2 CPUs")
    assert raw.writes == [b"[12] profiling on cpu 0 with cpu-clock at 997 Hz\n",
                          b"q-syscollect: sampling 2 CPUs\n"]


def test_print_would_have_made_two():  # what the shared stderr got before
    raw, out = stderr_like()
    print("[12] profiling on cpu 0", file=out, flush=True)
    assert len(raw.writes) == 2
