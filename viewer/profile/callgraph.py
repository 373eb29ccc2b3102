"""Call-graph arithmetic: exclusive, inclusive and attributed times, cycles.

Definitions (the Sun/Oracle analyzer's, which gprof approximates):

- exclusive (self): weight of the stacks whose leaf is the function;
- inclusive: weight of the stacks that contain the function, each stack
  counted once however deep the recursion;
- attributed, for an arc caller -> callee: weight of the stacks in which the
  caller directly calls the callee, each stack counted once; the part whose
  leaf is the callee (the callee's own time, at whatever recursion depth)
  is the arc's ``self``, the rest ``children``. With recursion collapsed
  like this, an arc's self + children never exceed the callee's inclusive
  time, as in gprof;
- a cycle is a strongly connected component of the arc graph with two or
  more functions (Tarjan), marked ``<cycle N>`` as gprof does; its self is
  the sum of its members' self, its inclusive counts a stack once if any
  member is in it, so the numbers stay exact.

Call counts come only from `.edge` data; they do not change any time.
"""

from __future__ import annotations

import math
from array import array
from collections import defaultdict
from typing import Iterable

from ..model.graph import Arc, Cycle, Function, CallGraph, Samples
from ..model.frames import Frame

CYCLE_OBJECT = ""


def analyze(samples: Samples) -> CallGraph:
    """The CallGraph of ``samples``: every function, arc and cycle with its times."""
    frames = samples.frames
    # Sums per frame id in arrays, and arcs by caller * n + callee: a crafted
    # profile has a million frames, each with a dict entry, a float and a
    # tuple key apiece otherwise. ``order`` keeps the frames in the order
    # they were first met, the order of ``functions``.
    n = len(frames)
    self_w, incl, spont = (array("d", bytes(8 * n)) for _ in range(3))
    met = bytearray(n)
    order: list[int] = []
    arc_self: dict[int, float] = defaultdict(float)
    arc_total: dict[int, float] = defaultdict(float)
    for stack, w in samples.stacks.items():
        leaf = stack[0]
        self_w[leaf] += w
        spont[stack[-1]] += w
        distinct = set(stack) if len(stack) > 1 else (leaf,)
        for f in distinct:
            if not met[f]:
                met[f] = 1
                order.append(f)
            incl[f] += w
        if len(stack) == 1:
            continue
        if len(distinct) == len(stack):
            # No recursion: every pair is distinct, and only the innermost
            # pair has the leaf as its callee.
            for caller, callee in zip(stack[1:], stack):
                arc_total[caller * n + callee] += w
            arc_self[stack[1] * n + leaf] += w
        else:
            for caller, callee in set(zip(stack[1:], stack)):  # each pair once per stack
                arc_total[caller * n + callee] += w
                if callee == leaf:
                    arc_self[caller * n + callee] += w

    functions: dict[Frame, Function] = {}
    for fid in order:
        functions[frames[fid]] = Function(frames[fid], self_w[fid] or 0.0, incl[fid],
                                          spont[fid] or 0.0)
    arcs: dict[tuple[Frame, Frame], Arc] = {}
    for key, total in arc_total.items():
        source, target = frames[key // n], frames[key % n]
        s = arc_self.get(key, 0.0)
        arcs[(source, target)] = Arc(source, target, s, max(total - s, 0.0))
    if samples.calls is not None:
        _add_calls(samples, functions, arcs)

    profile = CallGraph(samples, samples.total, functions, arcs, [])
    if samples.stack_programs is not None:
        _arc_programs(samples, arcs)
    # Objects call each other both ways all the time (a library calls back
    # into the program): by object, that is no cycle worth a mark.
    profile.cycles = _cycles(samples, profile) if samples.by != "object" else []
    return profile


def _programs_of(bits: int, names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(name for i, name in enumerate(names) if bits >> i & 1)


def _arc_programs(samples: Samples, arcs: dict[tuple[Frame, Frame], Arc]) -> None:
    """Each arc's programs: those whose stacks (or call counts) hold it."""
    assert samples.stack_programs is not None
    frames = samples.frames
    bits: dict[tuple[int, int], int] = defaultdict(int)
    for stack, programs in samples.stack_programs.items():
        for pair in zip(stack[1:], stack):
            bits[pair] |= programs
    for pair, programs in (samples.call_programs or {}).items():
        bits[pair] |= programs
    names = samples.programs
    for (caller, callee), b in bits.items():
        arc = arcs.get((frames[caller], frames[callee]))
        if arc is not None:
            arc.programs = _programs_of(b, names)


def _add_calls(samples: Samples, functions: dict[Frame, Function],
               arcs: dict[tuple[Frame, Frame], Arc]) -> None:
    assert samples.calls is not None
    frames = samples.frames
    for fn in functions.values():
        fn.calls, fn.recursive_calls = 0.0, 0.0
    for arc in arcs.values():
        arc.calls = 0.0
    for (caller_id, callee_id), n in samples.calls.items():
        caller, callee = frames[caller_id], frames[callee_id]
        for frame in (caller, callee):
            if frame not in functions:  # called, but never sampled
                functions[frame] = Function(frame, calls=0.0, recursive_calls=0.0)
        fn = functions[callee]
        if caller == callee:
            fn.recursive_calls = (fn.recursive_calls or 0.0) + n
        else:
            fn.calls = (fn.calls or 0.0) + n
        found = arcs.get((caller, callee))
        if found is None:
            found = arcs[(caller, callee)] = Arc(caller, callee, calls=0.0)
        found.calls = (found.calls or 0.0) + n


# ---------------------------------------------------------------- cycles

def strongly_connected(nodes: Iterable[Frame], edges: dict[Frame, list[Frame]],
                       min_size: int = 1) -> list[list[Frame]]:
    """Tarjan's strongly connected components, iteratively (deep graphs are
    fine); those of at least ``min_size`` nodes."""
    index: dict[Frame, int] = {}
    low: dict[Frame, int] = {}
    on_stack: set[Frame] = set()
    stack: list[Frame] = []
    out: list[list[Frame]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[Frame, int]] = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            succ = edges.get(node, [])
            recurse = False
            while i < len(succ):
                nxt = succ[i]
                i += 1
                if nxt not in index:
                    work.append((node, i))
                    work.append((nxt, 0))
                    recurse = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if recurse:
                continue
            if work:  # propagate to the parent frame of the traversal
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) >= min_size:
                    out.append(component)
    return out


def _components(profile: CallGraph, arcs: Iterable[tuple[Frame, Frame]]) -> list[list[Frame]]:
    """The cycles of one call graph's arcs: strongly connected components of
    two or more functions."""
    edges: dict[Frame, list[Frame]] = defaultdict(list)
    for caller, callee in arcs:
        if caller != callee:  # direct recursion is no cycle (gprof neither)
            edges[caller].append(callee)
    nodes = sorted(edges.keys() | {c for cs in edges.values() for c in cs},
                   key=lambda f: (f.name, f.object))
    for node in edges:
        edges[node].sort(key=lambda f: (f.name, f.object))
    return strongly_connected(nodes, edges, 2)


def _program_components(samples: Samples, profile: CallGraph) -> list[list[Frame]]:
    """Cycles are recursion: found in each program's own call graph, so that
    two programs calling A then B and B then A in one shared library make
    no cycle. Cycles of several programs that share a function are one."""
    assert samples.stack_programs is not None
    per_program: dict[int, set[tuple[Frame, Frame]]] = defaultdict(set)
    for pair, arc in profile.arcs.items():
        for name in arc.programs or ():
            per_program[samples.programs.index(name)].add(pair)
    joined: dict[Frame, Frame] = {}  # union-find over the members

    def root(f: Frame) -> Frame:
        while joined.get(f, f) != f:
            f = joined[f]
        return f
    members: set[Frame] = set()
    for program in sorted(per_program):
        for component in _components(profile, per_program[program]):
            first = root(component[0])
            for frame in component:
                members.add(frame)
                other = root(frame)
                if other != first:
                    joined[other] = first
    groups: dict[Frame, list[Frame]] = defaultdict(list)
    for frame in sorted(members, key=lambda f: (f.name, f.object)):
        groups[root(frame)].append(frame)
    return list(groups.values())


def _cycles(samples: Samples, profile: CallGraph) -> list[Cycle]:
    if samples.stack_programs is not None:
        components = _program_components(samples, profile)
    else:
        components = _components(profile, profile.arcs)
    if not components:
        return []
    frame_id = {f: i for i, f in enumerate(samples.frames)}
    member_of: dict[int, int] = {}
    for k, comp in enumerate(components):
        for frame in comp:
            if frame in frame_id:
                member_of[frame_id[frame]] = k
    incl = [0.0] * len(components)
    caller_self: dict[tuple[int, int], float] = defaultdict(float)
    caller_total: dict[tuple[int, int], float] = defaultdict(float)
    for stack, w in samples.stacks.items():
        inside = {member_of[f] for f in stack if f in member_of}
        for k in inside:
            incl[k] += w
        if not inside:
            continue
        # Every adjacent pair of a stack is an arc, so a stack that leaves a
        # cycle and comes back passed only through members: the leaf's time
        # is the cycle's own (self) exactly when the leaf is a member.
        leaf_cycle = member_of.get(stack[0])
        entered: set[tuple[int, int]] = set()
        for i in range(len(stack) - 1):
            member = member_of.get(stack[i])
            if member is None or member_of.get(stack[i + 1]) == member:
                continue
            k = member
            pair = (stack[i + 1], k)
            if pair in entered:
                continue
            entered.add(pair)
            caller_total[pair] += w
            if leaf_cycle == k:
                caller_self[pair] += w
    cycles: list[Cycle] = []
    for k, comp in enumerate(components):
        members = sorted(comp, key=lambda f: (-profile.functions[f].inclusive, f.name, f.object))
        cycles.append(Cycle(0, members, math.fsum(profile.functions[m].self for m in members),
                            incl[k]))
        for (caller_id, kk), total in caller_total.items():
            if kk == k:
                caller = samples.frames[caller_id]
                s = caller_self.get((caller_id, k), 0.0)
                cycles[-1].callers[caller] = Arc(caller, Frame(f"<cycle {k}>", CYCLE_OBJECT),
                                                 s, max(total - s, 0.0))
    order = sorted(range(len(cycles)), key=lambda k: (-cycles[k].inclusive,
                                                      cycles[k].members[0].name))
    cycles = [cycles[k] for k in order]
    for number, cycle in enumerate(cycles, 1):
        cycle.number = number
        for frame in cycle.members:
            profile.functions[frame].cycle = number
        for arc in cycle.callers.values():
            arc.callee = Frame(cycle.name, CYCLE_OBJECT)
        _cycle_calls(profile, cycle)
    return cycles


def _cycle_calls(profile: CallGraph, cycle: Cycle) -> None:
    if not profile.has_calls:
        return
    members = set(cycle.members)
    cycle.calls, cycle.internal_calls = 0.0, 0.0
    for (caller, callee), arc in profile.arcs.items():
        if callee not in members or arc.calls is None:
            continue
        if caller in members:
            cycle.internal_calls += arc.calls
        else:
            cycle.calls += arc.calls
            if caller in cycle.callers:
                c = cycle.callers[caller]
                c.calls = (c.calls or 0.0) + arc.calls
            else:
                cycle.callers[caller] = Arc(caller, Frame(cycle.name, CYCLE_OBJECT),
                                            calls=arc.calls)
