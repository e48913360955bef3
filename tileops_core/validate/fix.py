"""``tileops validate --fix``: apply seed 000 table 3's mechanical rewrites to the YAML.

Rewritten (each only when the rewrite is mechanical):

* T3.3 ``C_in_g == C_in // groups`` defining a name: the rule is removed and
  ``C_in_g: "C_in // groups"`` is added under ``signature.let``;
* T3.4/T3.5 ``x is None`` / ``x is not None``: replaced in place by ``not present(x)`` /
  ``present(x)``, the rest of the text kept character for character, in a shape rule and in
  every other expression field (``requires``, ``let``, ``match``, the roofline, a dtype's
  condition);
* T3.1 ``x.shape == (B, S)`` (or, for an optional ``x``, ``x is None or x.shape == (B, S)``):
  the rule is removed and ``shape: "[B, S]"`` is declared on ``x`` (only when ``x`` declares
  no shape yet and every item is an axis expression; a declared shape is checked only when
  the tensor is passed, so the guard goes with the rule).

T3.2, T3.6 and T3.7 need a decision (which shape items, which axis count) and are only
reported. The file is edited as text at the exact spans of the YAML nodes involved
(positions from PyYAML's composer), so comments, key order, quoting, flow mappings split
over several lines and every untouched byte stay as they were; a round-trip dump (even
ruamel's) reflows long flow mappings and so could not promise a diff limited to the
rewritten rules. Every rewritten expression is re-parsed and compared, as IR, with the
compiler's own rewrite before it is written.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..lang import ir
from ..lang.parse import parse_expr
from ..spec.legacy import rewrite_is_none
from ..spec.manifest import load_files
from ..spec.nodes import OpSpec

__all__ = ["FIXABLE", "FixResult", "fix_text", "fix_file"]

#: The table 3 rows --fix rewrites.
FIXABLE = ("T3.1", "T3.3", "T3.4", "T3.5")

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RULE_FIELD = re.compile(r"^signature\.shape_rules\[(\d+)\]$")


@dataclass(frozen=True)
class _Edit:
    start: int
    end: int
    text: str


@dataclass
class FixResult:
    """The fixed text, what was rewritten and what was left (with why)."""

    text: str
    applied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.applied)


# -- YAML node navigation -------------------------------------------------------------------------

def _child(node: Any, key: str) -> tuple[Any, Any] | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return k, v
    return None


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _node_at(node: Any, field: str) -> Any:
    """The YAML node at a diagnostic's field path (``signature.requires[0]``, ``roofline.bytes``), or None."""
    for name, index in _PATH_PART.findall(field):
        if name:
            found = _child(node, name)
            node = found[1] if found else None
        elif isinstance(node, yaml.SequenceNode) and int(index) < len(node.value):
            node = node.value[int(index)]
        else:
            node = None
        if node is None:
            return None
    return node


def _line_start(text: str, index: int) -> int:
    return text.rfind("\n", 0, index) + 1


def _line_end(text: str, index: int) -> int:
    """Index just past the newline ending the line that contains ``index``."""
    end = text.find("\n", index)
    return len(text) if end < 0 else end + 1


def _quote(value: str, style: str | None) -> str:
    if style == "'":
        return "'" + value.replace("'", "''") + "'"
    return json.dumps(value)


# -- rewriting one expression ---------------------------------------------------------------------

def rewrite_is_none_text(text: str) -> str | None:
    """``x is None`` -> ``not present(x)``, ``x is not None`` -> ``present(x)``, keeping the rest of the text."""
    body = text.strip()
    lead = text[: len(text) - len(text.lstrip())]
    trail = text[len(text.rstrip()):]
    try:
        tree = ast.parse(body, mode="eval")
    except SyntaxError:
        return None
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    spans: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot))
                and isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value is None
                and isinstance(node.left, ast.Name)):
            continue
        end = node.end_col_offset
        if node.lineno != node.end_lineno or end is None:
            return None
        name = node.left.id
        if isinstance(node.ops[0], ast.IsNot):
            new = f"present({name})"
        else:
            new = f"not present({name})"
            parent = parents.get(id(node))
            bare_ok = isinstance(parent, (ast.Expression, ast.BoolOp, ast.IfExp)) or (
                isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not))
            start = node.col_offset
            wrapped = body[:start].rstrip().endswith("(") and body[end:].lstrip().startswith(")")
            if not bare_ok and not wrapped:
                new = f"({new})"
        spans.append((node.col_offset, end, new))
    if not spans:
        return None
    for start, end, new in sorted(spans, reverse=True):
        body = body[:start] + new + body[end:]
    return lead + body + trail


def _same_ir(old: str, new: str) -> bool:
    try:
        return parse_expr(new) == rewrite_is_none(parse_expr(old))
    except Exception:  # noqa: BLE001 - any parse failure means "not the same"
        return False


# -- one op -----------------------------------------------------------------------------------

class _OpFixer:
    """Collects the edits of one op's rejected rules."""

    def __init__(self, text: str, spec: OpSpec, op_node: Any, result: FixResult) -> None:
        self.text = text
        self.spec = spec
        self.result = result
        found = _child(op_node, "signature")
        self.sig_key: Any = found[0] if found else None  # yaml nodes (the yaml stubs are not installed)
        self.sig: Any = found[1] if found else None
        self.rules_kv = _child(self.sig, "shape_rules") if self.sig is not None else None
        self.edits: list[_Edit] = []
        self.removed: set[int] = set()
        self.lets: list[tuple[str, str]] = []
        self.shapes: list[tuple[str, str]] = []

    def item(self, index: int) -> Any:
        if self.rules_kv is None or not isinstance(self.rules_kv[1], yaml.SequenceNode):
            return None
        items = self.rules_kv[1].value
        return items[index] if index < len(items) else None

    def skip(self, rule: str, index: int, why: str) -> None:
        self.result.skipped.append(f"{self.spec.file}: {self.spec.name} shape_rules[{index}] ({rule}): {why}")

    def apply(self, rule: str, index: int) -> None:
        node = self.item(index)
        if not isinstance(node, yaml.ScalarNode):
            self.skip(rule, index, "the rule is not a scalar string in the file")
            return
        source = node.value
        if rule in ("T3.4", "T3.5"):
            self.presence(rule, node, f"shape_rules[{index}]")
        elif rule == "T3.3":
            self._define(index, source)
        elif rule == "T3.1":
            self._declare_shape(index, source)

    def presence(self, rule: str, node: Any, where: str) -> None:
        """Rewrite ``x is None`` in the expression scalar ``node`` (any expression field, or a dtype condition)."""
        if not isinstance(node, yaml.ScalarNode):
            self.result.skipped.append(f"{self.spec.file}: {self.spec.name} {where} ({rule}): not a scalar string "
                                       "in the file")
            return
        source = node.value
        new = rewrite_is_none_text(source)
        if not where.endswith(".dtype") and (new is None or not _same_ir(source, new)):
            new = ir.unparse(rewrite_is_none(parse_expr(source)))
        if new is None:
            self.result.skipped.append(f"{self.spec.file}: {self.spec.name} {where} ({rule}): not of the form "
                                       "x is None")
            return
        self.edits.append(_Edit(node.start_mark.index, node.end_mark.index, _quote(new, node.style)))
        self.result.applied.append(f"{self.spec.name} {where} ({rule}): {source!r} -> {new!r}")

    def _define(self, index: int, source: str) -> None:
        tree = ast.parse(source.strip(), mode="eval").body
        if not (isinstance(tree, ast.Compare) and isinstance(tree.left, ast.Name) and len(tree.ops) == 1):
            self.skip("T3.3", index, "not of the form name == expression")
            return
        name = tree.left.id
        if name in self.spec.lets or any(n == name for n, _ in self.lets):
            self.skip("T3.3", index, f"let {name} already exists")
            return
        right = tree.comparators[0]
        expr = source.strip()[right.col_offset:right.end_col_offset]
        self.lets.append((name, expr))
        self.removed.add(index)
        self.result.applied.append(f"{self.spec.name} shape_rules[{index}] (T3.3): {source!r} -> let {name}: {expr!r}")

    def _declare_shape(self, index: int, source: str) -> None:
        tree = ast.parse(source.strip(), mode="eval").body
        body = source.strip()
        guarded = None  # `t is None or t.shape == (...)`: a declared shape is checked only when t is passed
        if isinstance(tree, ast.BoolOp) and isinstance(tree.op, ast.Or) and len(tree.values) == 2:
            guard, tree = tree.values
            if not (isinstance(guard, ast.Compare) and isinstance(guard.left, ast.Name) and len(guard.ops) == 1
                    and isinstance(guard.ops[0], ast.Is) and isinstance(guard.comparators[0], ast.Constant)
                    and guard.comparators[0].value is None):
                self.skip("T3.1", index, "not of the form x.shape == (...) or x is None or x.shape == (...)")
                return
            guarded = guard.left.id
        if not (isinstance(tree, ast.Compare) and len(tree.ops) == 1 and isinstance(tree.ops[0], ast.Eq)):
            self.skip("T3.1", index, "not of the form x.shape == (...)")
            return
        sides = (tree.left, tree.comparators[0])
        for attr, other in (sides, sides[::-1]):
            if (isinstance(attr, ast.Attribute) and attr.attr == "shape" and isinstance(attr.value, ast.Name)
                    and isinstance(other, (ast.Tuple, ast.List))):
                tensor = attr.value.id
                break
        else:
            self.skip("T3.1", index, "the other side is not a tuple of axes")
            return
        t = self.spec.inputs.get(tensor) or self.spec.outputs.get(tensor)
        if guarded is not None and (guarded != tensor or t is None or not t.optional):
            self.skip("T3.1", index, f"the guard tests {guarded}, not the optional input {tensor}")
            return
        if t is None or t.shape is not None or t.alias:
            self.skip("T3.1", index, f"{tensor} already declares a shape (or is not a tensor): merge by hand")
            return
        items = []
        for elt in other.elts:
            if any(isinstance(n, (ast.Attribute, ast.Subscript, ast.Call)) for n in ast.walk(elt)):
                self.skip("T3.1", index, "an item reads a tensor or calls a function: not a shape item")
                return
            items.append(body[elt.col_offset:elt.end_col_offset])
        shape = "[" + ", ".join(items) + "]"
        self.shapes.append((tensor, shape))
        self.removed.add(index)
        self.result.applied.append(f"{self.spec.name} shape_rules[{index}] (T3.1): {source!r} -> {tensor}: "
                                   f"{{shape: {shape!r}}}")

    # -- edits for removals and insertions ---------------------------------------------------

    def finish(self) -> list[_Edit]:
        edits = list(self.edits)
        if self.removed:
            edits.extend(self._removals())
        for tensor, shape in self.shapes:
            edits.extend(self._insert_shape(tensor, shape))
        if self.lets:
            edits.extend(self._insert_lets())
        return edits

    def _removals(self) -> list[_Edit]:
        assert self.rules_kv is not None  # only called after _rules() found the shape_rules list
        key, seq = self.rules_kv
        text = self.text
        kept = [n for i, n in enumerate(seq.value) if i not in self.removed]
        if seq.flow_style:
            inner = ", ".join(text[n.start_mark.index:n.end_mark.index] for n in kept)
            return [_Edit(seq.start_mark.index, seq.end_mark.index, f"[{inner}]")]
        if not kept:
            start = _line_start(text, key.start_mark.index)
            last = _last_scalar(seq.value[-1])
            return [_Edit(start, _line_end(text, max(last.end_mark.index - 1, last.start_mark.index)), "")]
        out = []
        for i in sorted(self.removed):
            node = seq.value[i]
            last = _last_scalar(node)
            out.append(_Edit(_line_start(text, node.start_mark.index),
                             _line_end(text, max(last.end_mark.index - 1, last.start_mark.index)), ""))
        return out

    def _insert_shape(self, tensor: str, shape: str) -> list[_Edit]:
        text = self.text
        for section in ("inputs", "outputs"):
            kv = _child(self.sig, section)
            found = _child(kv[1], tensor) if kv else None
            if found is None:
                continue
            node = found[1]
            if not isinstance(node, yaml.MappingNode) or not node.value:
                return []
            return [_mapping_insert(text, node, "shape", json.dumps(shape))]
        return []

    def _insert_lets(self) -> list[_Edit]:
        text = self.text
        let_kv = _child(self.sig, "let")
        entries = [(name, json.dumps(expr)) for name, expr in self.lets]
        if let_kv is not None and isinstance(let_kv[1], yaml.MappingNode) and let_kv[1].value:
            return [_mapping_insert(text, let_kv[1], name, value) for name, value in entries]
        anchor_key = self.rules_kv[0] if self.rules_kv is not None else self.sig.value[-1][0]
        indent = anchor_key.start_mark.column
        step = max(2, indent - self.sig_key.start_mark.column)
        lines = " " * indent + "let:\n" + "".join(f"{' ' * (indent + step)}{n}: {v}\n" for n, v in entries)
        if let_kv is not None:  # an empty `let: {}`: replace it
            k, v = let_kv
            return [_Edit(_line_start(text, k.start_mark.index), _line_end(text, v.end_mark.index), lines)]
        pos = _line_start(text, anchor_key.start_mark.index)
        return [_Edit(pos, pos, lines)]


def _last_scalar(node: Any) -> Any:
    """The last node written inside a block collection (block nodes end at the next token)."""
    while isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and not node.flow_style and node.value:
        last = node.value[-1]
        node = last[1] if isinstance(node, yaml.MappingNode) else last
    return node


def _mapping_insert(text: str, node: Any, key: str, value: str) -> _Edit:
    """Add ``key: value`` at the end of a flow or block mapping node."""
    if node.flow_style:
        close = node.end_mark.index - 1
        assert text[close] == "}", "a flow mapping ends with '}'"
        at = len(text[:close].rstrip())
        sep = ", " if node.value else ""
        return _Edit(at, at, f"{sep}{key}: {value}")
    first_key = node.value[0][0]
    indent = first_key.start_mark.column
    last = _last_scalar(node.value[-1][1])
    end = _line_end(text, max(last.end_mark.index - 1, last.start_mark.index))
    return _Edit(end, end, f"{' ' * indent}{key}: {value}\n")


# -- files --------------------------------------------------------------------------------------

def fix_text(text: str, specs: dict[str, OpSpec]) -> FixResult:
    """Apply the mechanical table 3 rewrites to one file's text; ``specs`` are its compiled entries."""
    result = FixResult(text)
    root = yaml.compose(text, Loader=_Loader)
    if not isinstance(root, yaml.MappingNode):
        return result
    edits: list[_Edit] = []
    for key, op_node in root.value:
        spec = specs.get(key.value)
        if spec is None:
            continue
        fixer = _OpFixer(text, spec, op_node, result)
        for problem in spec.problems:
            match = _RULE_FIELD.match(problem.location.field or "")
            if problem.rule in FIXABLE and match:
                fixer.apply(problem.rule, int(match.group(1)))
            elif problem.rule in ("T3.4", "T3.5") and problem.location.field:  # every other expression field
                fixer.presence(problem.rule, _node_at(op_node, problem.location.field), problem.location.field)
            elif problem.rule.startswith("T3.") and match:
                fixer.skip(problem.rule, int(match.group(1)), "needs a decision; rewrite by hand: "
                           + (problem.fix or ""))
        edits.extend(fixer.finish())
    ordered = sorted(edits, key=lambda e: (e.start, e.end), reverse=True)
    for before, after in zip(ordered[1:], ordered):
        if before.end > after.start:
            raise AssertionError(f"overlapping fix edits at {before} and {after}")
    new = text
    for e in ordered:
        new = new[:e.start] + e.text + new[e.end:]
    result.text = new
    return result


def fix_file(path: Path, label: str, *, write: bool = True) -> FixResult:
    """Fix one YAML file in place (when ``write``); the result says what changed."""
    text = path.read_text(encoding="utf-8")
    manifest = load_files([(path, label)])
    result = fix_text(text, {name: spec for name, spec in manifest.items() if spec.file == label})
    if write and result.changed and result.text != text:
        path.write_text(result.text, encoding="utf-8")
    return result
