"""Cycles among declarations that refer to each other by name (type families, ``let`` entries).

A family whose case names another family, or a ``let`` that reads another ``let``, has no
value if the references come back round. The checks of both report each cycle once, named
from where the search first met it, so the search is written once here.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Mapping

__all__ = ["find_cycles"]


def find_cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Each distinct cycle of ``edges`` (name -> names it refers to), as ``[a, b, ..., a]``.

    A depth-first search in the mapping's order; a cycle met again through another entry
    point (the same members) is not listed twice.
    """
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    state: dict[str, int] = {}  # 1 = on the path, 2 = done
    # An explicit stack, not recursion: a manifest is untrusted input, and a chain of 1500 lets ran out
    # of Python's recursion limit (found in review). Each frame is a name and its remaining references.
    for start in edges:
        if state.get(start) is not None:
            continue
        path: list[str] = [start]
        stack: list[Iterator[str]] = [iter(edges[start])]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                if frozenset(cycle) not in seen:
                    seen.add(frozenset(cycle))
                    found.append(cycle)
            elif state.get(nxt) is None:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(edges[nxt]))
    return found
