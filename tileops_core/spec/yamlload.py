"""YAML reading that keeps line numbers and refuses duplicate keys.

PyYAML silently keeps the last of two equal keys; a manifest that says the same thing
twice is almost always a merge accident, so here it is an error naming both lines.
Mappings come back as :class:`LineDict` (a ``dict`` that remembers the line of each key)
and sequences as :class:`LineList`, so that every later error can say ``file:line``.
The C loader is used when PyYAML was built with it. The node graph is composed within the
bounds of :mod:`.yamlbounds` (file size, nesting, nodes counted through aliases), so a
hostile file costs at most a bounded read before it is reported.
"""

from __future__ import annotations

from typing import Any

import yaml

from ..errors import Location, SpecError
from .yamlbounds import MAX_FILE_BYTES, compose_bounded, oversize_problem

__all__ = ["LineDict", "LineList", "load_yaml_text", "line_of"]

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LineDict(dict):
    """A mapping that remembers the 1-based line of itself and of each key."""

    __slots__ = ("line", "key_lines")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.line: int | None = None
        self.key_lines: dict[Any, int] = {}


class LineList(list):
    """A sequence that remembers the 1-based line of itself and of each item."""

    __slots__ = ("line", "item_lines")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.line: int | None = None
        self.item_lines: list[int] = []


class _Loader(_Base):  # type: ignore[misc, valid-type]  # the C loader when built, else the Python one
    """Safe loader building LineDict/LineList and rejecting duplicate keys."""

    file_name = "<string>"

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """Construct ``node``; a scalar Python cannot hold (a 5000-digit int) is a problem at its line."""
        try:
            return super().construct_object(node, deep=deep)
        except SpecError:
            raise
        except (ValueError, OverflowError) as exc:
            raise SpecError(f"YAML value cannot be read: {type(exc).__name__}: {str(exc).splitlines()[0]}",
                            Location(self.file_name, node.start_mark.line + 1), rule="L0.yaml") from None


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    # Keys written in this mapping must be unique. Keys brought in by a merge (``<<: *base``)
    # come first after flattening and may be overridden by a key written here: that is
    # what a merge is for, not a key said twice.
    written = {id(k) for k, _ in node.value if k.tag != _MERGE_TAG}
    loader.flatten_mapping(node)
    result = LineDict()
    result.line = node.start_mark.line + 1
    merged: set[Any] = set()
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise SpecError("a mapping key must be a scalar", Location(loader.file_name, key_node.start_mark.line + 1),
                            rule="L0.yaml") from None
        line = key_node.start_mark.line + 1
        if key in result and key not in merged:
            first = result.key_lines[key]
            raise SpecError(f"duplicate key {key!r} (first written at line {first})",
                            Location(loader.file_name, line), rule="L0.duplicate-key")
        merged.discard(key)
        if id(key_node) not in written:
            merged.add(key)
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = line
    return result


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    result = LineList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def load_yaml_text(text: str, file_name: str) -> Any:
    """Parse one YAML document; syntax errors and passed bounds become SpecError with the file and line."""
    if len(text) > MAX_FILE_BYTES:
        raise oversize_problem(text[:MAX_FILE_BYTES], len(text.encode("utf-8")), file_name)
    loader = _Loader(text)
    loader.file_name = file_name
    try:
        root = compose_bounded(loader, file_name)
        return None if root is None else loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise SpecError(f"YAML syntax error: {exc.problem or exc.context}", Location(file_name, line),
                        rule="L0.yaml") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"YAML error: {exc}", Location(file_name), rule="L0.yaml") from None
    except SpecError:
        raise  # the loader's own findings (a duplicate key) already carry file and line
    except (ValueError, OverflowError, RecursionError) as exc:  # not from one node (those name their line)
        raise SpecError(f"YAML value cannot be read: {type(exc).__name__}: {str(exc).splitlines()[0]}",
                        Location(file_name), rule="L0.yaml") from None
    finally:
        loader.dispose()


def line_of(container: Any, key: Any, default: int | None = None) -> int | None:
    """The line of ``key`` in a LineDict / index in a LineList, else ``default``."""
    if isinstance(container, LineDict):
        return container.key_lines.get(key, default)
    if isinstance(container, LineList) and isinstance(key, int) and 0 <= key < len(container.item_lines):
        return container.item_lines[key]
    return default
