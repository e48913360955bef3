"""The conformance pass: an ``implemented`` spec against its op class (L1, check 8, L4 bench).

The class is found only one way, the way the runtime binds it: the module named by
``source.op``, attribute named exactly as the manifest key (seed 001: no case or
abbreviation guessing; a near miss is named in the message so it is easy to fix). Then:

* L1 ``__init__``: the spec's params in declaration order, each with the spec's default
  (or none), then each static dim as a required keyword-only argument in declaration
  order; ``**options`` (target, check_contents) may follow.
* L1 ``forward``: the call-time inputs in declaration order, optional ones defaulting to
  None, then each out buffer by keyword (default None), named as the spec's ``buffer``.
* Check 8: the ``torch.library`` boundary registered for the class has exactly the mutated
  inputs as written arguments (``mutates_args``), and exists when the spec promises
  ``torch_compile_fullgraph``.
* L4: a benchmark module named by ``source.bench`` obtains its shapes via ``load_workloads``.

This module imports op modules, hence torch; :mod:`tileops_core.validate.lint` does not.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Iterator

from ..errors import CheckError, SpecError
from ..op.base import Op
from ..op.definition import OpDef, definition_of, rebind
from ..spec.nodes import REQUIRED, OpSpec
from .context import SpecContext
from .diagnostics import Diagnostic

__all__ = [
    "find_op_class", "bound_to", "check_init", "check_forward", "check_schema", "check_bench", "orphan_classes",
]

#: Keyword arguments every op accepts through ``Op.__init__`` besides its spec's.
OP_OPTIONS = ("target", "check_contents")


def find_op_class(ctx: SpecContext) -> tuple[type | None, ModuleType | None, list[Diagnostic]]:
    """The op class of ``ctx.spec`` (``source.op`` + the key), with L1.import / L1.class findings."""
    spec = ctx.spec
    line = spec.field_lines.get("source")
    module_name = spec.source.get("op")
    if module_name is None:
        return None, None, [ctx.diag("L1.class", "an implemented spec names its op module in source.op",
                                     field="source", line=line, fix="source: {op: <module>}")]
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import failure is the finding; the message carries it
        return None, None, [ctx.diag("L1.import", f"source.op module {module_name} cannot be imported: "
                                     f"{type(exc).__name__}: {exc}", field="source.op", line=line)]
    cls = getattr(module, spec.name, None)
    if isinstance(cls, type) and issubclass(cls, Op):
        return cls, module, []
    if cls is not None:
        return None, module, [ctx.diag("L1.class", f"{module_name}.{spec.name} is not an Op subclass",
                                       field="source.op", line=line)]
    near = [n for n, v in vars(module).items() if isinstance(v, type) and n.lower() == spec.name.lower()]
    hint = f"; {module_name} has {near[0]}, but the class name must equal the key exactly" if near else ""
    return None, module, [ctx.diag("L1.class", f"{module_name} defines no class named {spec.name}{hint}",
                                   field="source.op", line=line, fix=f"class {spec.name}(Op): ..." if not near else
                                   f"rename {near[0]} to {spec.name}")]


def orphan_classes(module: ModuleType, known: set[str]) -> list[type]:
    """Op subclasses defined in ``module`` with no manifest entry of their name (they cannot bind)."""
    return sorted((v for v in vars(module).values() if isinstance(v, type) and issubclass(v, Op) and v is not Op
                   and v.__module__ == module.__name__ and not v.__dict__.get("abstract", False)
                   and v.__name__ not in known), key=lambda c: c.__name__)


def _default_matches(spec: OpSpec, name: str, default: Any) -> bool:
    p = spec.params[name]
    if p.default is REQUIRED:
        return default is inspect.Parameter.empty
    if default is inspect.Parameter.empty or not p.type.accepts(default):
        return False
    value = p.type.normalise(default)
    if isinstance(value, bool) or isinstance(p.default, bool):
        return type(value) is type(p.default) and value == p.default
    return value == p.default


def check_init(ctx: SpecContext, cls: type[Op]) -> list[Diagnostic]:
    """L1: ``__init__`` against params (order, defaults, kw_only) and static dims (keyword-only, required)."""
    spec = ctx.spec
    where = f"{cls.__module__}.{cls.__qualname__}.__init__"
    sig = inspect.signature(cls.__init__)
    params = [p for p in list(sig.parameters.values())[1:]]
    problems: list[str] = []
    lines: list[int | None] = []  # the declaration each problem is about
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword = [p for p in params if p.kind == p.KEYWORD_ONLY]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        problems.append("takes *args, so the spec's positional order cannot be checked")
    expected_pos = [n for n, p in spec.params.items() if not p.kw_only]
    expected_kw = [n for n, p in spec.params.items() if p.kw_only] + [t.name for t in spec.construction_inputs]
    got_pos = [p.name for p in positional]
    if got_pos != expected_pos:
        problems.append(f"takes ({', '.join(got_pos) or 'nothing'}) positionally, the spec's params are "
                        f"({', '.join(expected_pos) or 'none'}) in this order")
        first = next((e for g, e in zip(got_pos + [""] * len(expected_pos), expected_pos) if g != e), None)
        lines.append(spec.params[first].loc.line if first else None)
    by_name = {p.name: p for p in params}
    for name in spec.params:
        p = by_name.get(name)
        if p is not None and not _default_matches(spec, name, p.default):
            want = "no default" if spec.params[name].default is REQUIRED else f"default {spec.params[name].default!r}"
            have = "no default" if p.default is inspect.Parameter.empty else f"default {p.default!r}"
            problems.append(f"{name} has {have}, the spec gives {want}")
            lines.append(spec.params[name].loc.line)
        if p is not None and spec.params[name].kw_only and p.kind != p.KEYWORD_ONLY:
            problems.append(f"{name} is kw_only in the spec but not keyword-only here")
            lines.append(spec.params[name].loc.line)
    static = [p.name for p in keyword if p.name in spec.static_dims]
    if static != list(spec.static_dims):
        problems.append(f"static dims are ({', '.join(static) or 'none'}) as keyword-only arguments, the spec has "
                        f"({', '.join(spec.static_dims) or 'none'}) in this order")
    for name in spec.static_dims:
        p = by_name.get(name)
        if p is not None and p.default is not inspect.Parameter.empty:
            problems.append(f"static dim {name} has a default; a promised value is always given by the caller")
    for t in spec.construction_inputs:
        p = by_name.get(t.name)
        if p is None:
            problems.append(f"construction-time input {t.name} is not an argument")
        elif t.optional and p.default is not None:
            problems.append(f"optional construction-time input {t.name} must default to None")
    known = set(spec.params) | set(spec.static_dims) | set(expected_kw) | set(OP_OPTIONS)
    for p in keyword:
        if p.name not in known:
            problems.append(f"keyword argument {p.name} is not in the spec")
    if not problems:
        return []
    line = next((ln for ln in lines if ln is not None), None)
    return [ctx.diag("L1.init", f"{where}{sig}: " + "; ".join(problems), field="signature.params", line=line,
                     fix=f"def __init__({_expected_init(spec)})")]


def _expected_init(spec: OpSpec) -> str:
    parts = ["self"]
    for name, p in spec.params.items():
        if not p.kw_only:
            parts.append(name if p.default is REQUIRED else f"{name}={p.default!r}")
    kw = [n if p.default is REQUIRED else f"{n}={p.default!r}" for n, p in spec.params.items() if p.kw_only]
    kw += [t.name + ("=None" if t.optional else "") for t in spec.construction_inputs]
    kw += list(spec.static_dims)
    if kw:
        parts.append("*")
        parts.extend(kw)
    parts.append("**options")
    return ", ".join(parts)


def check_forward(ctx: SpecContext, cls: type[Op]) -> list[Diagnostic]:
    """L1: ``forward`` against the call-time inputs (order, optional = None) and out buffers."""
    spec = ctx.spec
    where = f"{cls.__module__}.{cls.__qualname__}.forward"
    if cls.forward is Op.forward:
        return [ctx.diag("L1.forward", f"{cls.__name__} does not define forward()", field="signature.inputs")]
    sig = inspect.signature(cls.forward)
    params = list(sig.parameters.values())[1:]
    problems: list[str] = []
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        problems.append("takes *args or **kwargs; spell out the inputs")
    inputs = [t.name for t in spec.call_inputs]
    buffers = [o.buffer for o in spec.outputs.values() if o.buffer]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    got = [p.name for p in positional][: len(inputs)]
    line: int | None = None
    if got != inputs:
        problems.append(f"takes ({', '.join(p.name for p in positional) or 'nothing'}) positionally, the call-time "
                        f"inputs are ({', '.join(inputs) or 'none'}) in this order")
        first = next(e for g, e in zip(got + [""] * len(inputs), inputs) if g != e)
        line = spec.inputs[first].loc.line
    by_name = {p.name: p for p in params}
    for t in spec.call_inputs:
        p = by_name.get(t.name)
        if p is None:
            continue
        if t.optional and p.default is not None:
            problems.append(f"optional input {t.name} must default to None")
        if not t.optional and p.default is not inspect.Parameter.empty:
            problems.append(f"required input {t.name} has a default")
    for b in buffers:
        p = by_name.get(b)
        if p is None:
            problems.append(f"out buffer {b} is not a keyword argument")
        elif p.kind == p.POSITIONAL_ONLY or p.default is not None:
            problems.append(f"out buffer {b} must be a keyword argument defaulting to None")
    extra = [p.name for p in params if p.name not in inputs and p.name not in buffers
             and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if extra:
        problems.append(f"takes {', '.join(extra)}, which the spec does not declare as call-time inputs or buffers")
    if not problems:
        return []
    expected = ", ".join(["self", *(t.name + ("=None" if t.optional else "") for t in spec.call_inputs)]
                         + (["*", *(f"{b}=None" for b in buffers)] if buffers else []))
    return [ctx.diag("L1.forward", f"{where}{sig}: " + "; ".join(problems), field="signature.inputs",
                     line=line or spec.field_lines.get("signature"), fix=f"def forward({expected})")]


@contextmanager
def bound_to(cls: type, spec: OpSpec) -> Iterator[OpDef]:
    """The definition of ``cls`` made from ``spec``: its generated checks and compile boundary.

    An op class binds to the manifest entry of its name when it is defined. When the spec
    under validation is another one (a file given on the command line, a plugin's spec not
    installed yet), the class is bound to it for the duration of the checks and restored
    afterwards, its torch.library registration removed, so the conformance pass always
    judges the class against the text it reads and leaves nothing registered behind.
    """
    current: OpDef | None
    try:
        current = definition_of(cls)
    except (SpecError, CheckError):
        current = None
    if current is not None and (current.spec is spec or (current.spec.file, current.spec.line) == (spec.file,
                                                                                                    spec.line)):
        yield current
        return
    definition, undo = rebind(cls, spec)
    try:
        yield definition
    finally:
        undo()


def check_schema(ctx: SpecContext, definition: OpDef) -> list[Diagnostic]:
    """Check 8: the compile boundary's written arguments are exactly the mutated inputs."""
    spec = ctx.spec
    cls = definition.op_cls
    boundary = definition.boundary
    if boundary is None:
        if spec.torch_compile_fullgraph and spec.call_inputs:
            return [ctx.diag("C8.schema", f"the spec promises torch_compile_fullgraph, but {cls.__name__} has no "
                             f"torch.library boundary: {definition.boundary_reason}",
                             field="torch_compile_fullgraph", line=spec.field_lines.get("torch_compile_fullgraph"))]
        return []
    schema = boundary.opoverload._schema
    written = sorted(a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write)
    mutated = sorted(t.name for t in spec.call_inputs if t.mutated)
    if written != mutated:
        return [ctx.diag("C8.schema", f"the torch.library boundary {boundary.qualname} writes "
                         f"({', '.join(written) or 'nothing'}), the spec marks ({', '.join(mutated) or 'nothing'}) "
                         f"mutated: {schema}", field="signature.inputs", line=spec.field_lines.get("signature"))]
    return []


def _module_source(name: str) -> tuple[str | None, str]:
    """The source text of a benchmark given as a module path or a .py path, and how it was found."""
    if name.endswith(".py") or "/" in name:
        path = Path(name)
        return (path.read_text(encoding="utf-8"), str(path)) if path.is_file() else (None, f"no file {name}")
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if found is None or found.origin is None or not found.origin.endswith(".py"):
        return None, f"no module {name}"
    return Path(found.origin).read_text(encoding="utf-8"), found.origin


def _names_used(tree: ast.AST) -> Iterable[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, ast.alias):
            yield node.name.rsplit(".", 1)[-1]


def check_bench(ctx: SpecContext) -> list[Diagnostic]:
    """L4: the benchmark named by ``source.bench`` reads its shapes through ``load_workloads``."""
    name = ctx.spec.source.get("bench")
    if name is None:
        return []
    line = ctx.spec.field_lines.get("source")
    text, where = _module_source(name)
    if text is None:
        return [ctx.diag("L4.bench", f"source.bench {name} cannot be found ({where})", field="source.bench",
                         line=line)]
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        return [ctx.diag("L4.bench", f"source.bench {where} does not parse: {exc.msg}", field="source.bench",
                         line=line)]
    if "load_workloads" not in set(_names_used(tree)):
        return [ctx.diag("L4.bench", f"source.bench {name} never calls load_workloads, so its shapes are not the "
                         "spec's workloads", field="source.bench", line=line,
                         fix=f"from tileops_core import load_workloads; rows = load_workloads({ctx.spec.name!r})")]
    return []
