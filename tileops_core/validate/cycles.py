"""Cycles among declarations that refer to each other by name (type families, ``let`` entries).

A family whose case names another family, or a ``let`` that reads another ``let``, has no
value if the references come back round. The checks of both report each cycle once, named
from where the search first met it, so the search is written once here.
"""

from __future__ import annotations

from typing import Iterable, Mapping

__all__ = ["find_cycles"]


def find_cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Each distinct cycle of ``edges`` (name -> names it refers to), as ``[a, b, ..., a]``.

    A depth-first search in the mapping's order; a cycle met again through another entry
    point (the same members) is not listed twice.
    """
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    state: dict[str, int] = {}  # 1 = on the path, 2 = done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        path.append(name)
        for nxt in edges[name]:
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                if frozenset(cycle) not in seen:
                    seen.add(frozenset(cycle))
                    found.append(cycle)
            elif state.get(nxt) is None:
                visit(nxt, path)
        path.pop()
        state[name] = 2

    for name in edges:
        if state.get(name) is None:
            visit(name, [])
    return found
