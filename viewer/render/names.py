"""How frames are named in text reports."""

from __future__ import annotations

from ..profile.model import Frame, CallGraph


class Namer:
    """Display names: a name shared by functions of different objects gets its
    object (``init<libfoo.so>``), and cycle members their ``<cycle N>`` tag."""

    def __init__(self, profile: CallGraph, cycles: bool = True) -> None:
        self.profile = profile
        self.cycles = cycles
        owners: dict[str, set[str]] = {}
        for frame in profile.functions:
            owners.setdefault(frame.name, set()).add(frame.object)
        self.ambiguous = {name for name, objs in owners.items() if len(objs) > 1}

    def plain(self, frame: Frame) -> str:
        name = frame.name
        if name in self.ambiguous and not name.endswith(">"):
            name = f"{name}<{frame.object}>"
        if frame.function:  # --by line: FILE:LINE (function)
            name += f" ({frame.function})"
        return name

    def __call__(self, frame: Frame) -> str:
        name = self.plain(frame)
        fn = self.profile.functions.get(frame)
        if self.cycles and fn is not None and fn.cycle is not None:
            name += f" <cycle {fn.cycle}>"
        return name
