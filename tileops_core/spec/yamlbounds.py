"""Bounds on what one manifest file may cost to read: size, nesting, nodes after aliases.

A YAML file is small on disk and may still be huge in memory: nine nested anchors, each an
alias list of the one before ("billion laughs"), expand a 900-byte file into a billion
nodes that every later reader walks. PyYAML's composer resolves aliases but bounds
nothing, and its C composer recurses once per nesting level. So the node graph is composed
here, from PyYAML's event stream, one event at a time: every node counts once for each
place it appears (an alias counts the whole subtree it names), and the first alias, node or
scalar past a bound is an error naming the file and the line it is on. A spec is a few KB
(the largest shipped file is about 4 KB); the bounds admit hundreds of times that.
"""

from __future__ import annotations

from typing import Any

import yaml

from ..errors import Location, SpecError

__all__ = ["MAX_FILE_BYTES", "MAX_DEPTH", "MAX_NODES", "MAX_SCALAR_CHARS", "MAX_OPS_PER_FILE", "compose_bounded",
           "oversize_problem"]

#: Bytes one manifest file may hold (a family file is a few KB).
MAX_FILE_BYTES = 2 * 1024 * 1024
#: Nesting levels of mappings and sequences (a spec nests about 6 deep).
MAX_DEPTH = 64
#: Nodes of one file counted as the reader sees them: an alias counts every node it stands for.
MAX_NODES = 100_000
#: Characters of one scalar (a description or an expression is at most a few hundred).
MAX_SCALAR_CHARS = 64 * 1024
#: Ops in one file (a file is one family of a handful of ops).
MAX_OPS_PER_FILE = 1024


def oversize_problem(head: bytes | str, size: int, file_name: str) -> SpecError:
    """The problem of a file of ``size`` bytes (> MAX_FILE_BYTES); ``head`` is its first bytes, for the line."""
    newline: Any = b"\n" if isinstance(head, bytes) else "\n"
    line = head.count(newline, 0, MAX_FILE_BYTES) + 1
    return SpecError(f"the file is {size} bytes, more than the {MAX_FILE_BYTES} a manifest file may hold "
                     f"(the limit is passed on this line); split it, one family per file",
                     Location(file_name, line), rule="L0.limit")


class _Composer:
    """Builds PyYAML nodes from the loader's events, counting and bounding as it goes."""

    def __init__(self, loader: Any, file_name: str) -> None:
        self.loader = loader
        self.file_name = file_name
        self.anchors: dict[str, tuple[yaml.Node, int]] = {}  # anchor -> (node, nodes it stands for)
        self.open_anchors: set[str] = set()
        self.total = 0

    def fail(self, message: str, mark: Any) -> SpecError:
        return SpecError(message, Location(self.file_name, mark.line + 1 if mark is not None else None),
                         rule="L0.limit")

    def count(self, weight: int, mark: Any, what: str) -> None:
        self.total += weight
        if self.total > MAX_NODES:
            raise self.fail(f"{what} brings the file past {MAX_NODES} YAML nodes (aliases count every node they "
                            "repeat); write the values out, or split the file", mark)

    def document(self) -> yaml.Node | None:
        """The single document's root node, or None for an empty stream."""
        loader = self.loader
        loader.get_event()  # stream start
        if loader.check_event(yaml.StreamEndEvent):
            loader.get_event()
            return None
        loader.get_event()  # document start
        node, _ = self.node(1)
        loader.get_event()  # document end
        if not loader.check_event(yaml.StreamEndEvent):
            raise self.fail("a manifest file holds one YAML document; found another", loader.peek_event().start_mark)
        loader.get_event()
        return node

    def node(self, depth: int) -> tuple[yaml.Node, int]:
        """Compose the next node (at nesting ``depth``); returns it and how many nodes it stands for."""
        loader = self.loader
        if loader.check_event(yaml.AliasEvent):
            event = loader.get_event()
            if event.anchor in self.open_anchors:
                raise self.fail(f"alias *{event.anchor} is used inside the node it names (a cycle)", event.start_mark)
            if event.anchor not in self.anchors:
                raise self.fail(f"alias *{event.anchor} names no anchor defined before it", event.start_mark)
            node, weight = self.anchors[event.anchor]
            self.count(weight, event.start_mark, f"alias *{event.anchor} ({weight} nodes)")
            return node, weight
        event = loader.peek_event()
        if depth > MAX_DEPTH:
            raise self.fail(f"YAML nested deeper than {MAX_DEPTH} levels", event.start_mark)
        anchor = event.anchor
        if anchor is not None:
            if anchor in self.anchors or anchor in self.open_anchors:
                raise self.fail(f"anchor &{anchor} is defined twice", event.start_mark)
            self.open_anchors.add(anchor)
        self.count(1, event.start_mark, "this node")
        if loader.check_event(yaml.ScalarEvent):
            node, weight = self.scalar(), 1
        else:
            node, weight = self.collection(depth)
        if anchor is not None:
            self.open_anchors.discard(anchor)
            self.anchors[anchor] = (node, weight)
        return node, weight

    def scalar(self) -> yaml.Node:
        event = self.loader.get_event()
        if len(event.value) > MAX_SCALAR_CHARS:
            raise self.fail(f"a scalar of {len(event.value)} characters, more than {MAX_SCALAR_CHARS}",
                            event.start_mark)
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(yaml.ScalarNode, event.value, event.implicit)
        return yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)

    def collection(self, depth: int) -> tuple[yaml.Node, int]:
        """A sequence or a mapping (the next event starts one), with its children."""
        loader = self.loader
        start = loader.get_event()
        mapping = isinstance(start, yaml.MappingStartEvent)
        node_class, end = (yaml.MappingNode, yaml.MappingEndEvent) if mapping else \
            (yaml.SequenceNode, yaml.SequenceEndEvent)
        tag = start.tag
        if tag is None or tag == "!":
            tag = loader.resolve(node_class, None, start.implicit)
        node = node_class(tag, [], start.start_mark, None, flow_style=start.flow_style)
        weight = 1
        while not loader.check_event(end):
            child, w = self.node(depth + 1)
            weight += w
            if mapping:
                value, wv = self.node(depth + 1)
                node.value.append((child, value))
                weight += wv
            else:
                node.value.append(child)
        node.end_mark = loader.get_event().end_mark
        return node, weight


def compose_bounded(loader: Any, file_name: str) -> yaml.Node | None:
    """The root node of the loader's single document, composed within the bounds above."""
    return _Composer(loader, file_name).document()
