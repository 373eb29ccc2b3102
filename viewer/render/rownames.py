"""How frames are named in text reports."""

from __future__ import annotations

from typing import Iterable

from ..model.frames import Frame
from ..model.graph import CallGraph


def ambiguous_names(frames: Iterable[Frame]) -> set[str]:
    """The names that functions of more than one object share."""
    first: dict[str, str] = {}  # name -> the object of its first frame (not a set per name)
    shared: set[str] = set()
    for frame in frames:
        if first.setdefault(frame.name, frame.object) != frame.object:
            shared.add(frame.name)
    return shared


def plain_name(frame: Frame, ambiguous: set[str]) -> str:
    """The name, with its object where another object has the same name."""
    name = frame.name
    if name in ambiguous and not name.endswith(">"):
        name = f"{name}<{frame.object}>"
    if frame.function:  # --by line: FILE:LINE (function)
        name += f" ({frame.function})"
    return name


class Namer:
    """Display names: a name shared by functions of different objects gets its
    object (``init<libfoo.so>``), and cycle members their ``<cycle N>`` tag."""

    def __init__(self, profile: CallGraph, cycles: bool = True) -> None:
        self.profile = profile
        self.cycles = cycles
        self.ambiguous = ambiguous_names(profile.functions)

    def plain(self, frame: Frame) -> str:
        return plain_name(frame, self.ambiguous)

    def __call__(self, frame: Frame) -> str:
        name = self.plain(frame)
        fn = self.profile.functions.get(frame)
        if self.cycles and fn is not None and fn.cycle is not None:
            name += f" <cycle {fn.cycle}>"
        return name
