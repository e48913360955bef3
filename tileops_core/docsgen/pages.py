"""The pages of the documentation, built from the specs and the support matrix.

``index``: what is installed (backends and their versions), the list of ops and the full
support matrix (op x kernel x device x dtype, with refusal regions). ``ops/<Op>``: one
reference page per spec: signature, inputs and outputs with shapes and dtypes, params,
rules, workloads (each with its roofline figures), the roofline formulas, and the op's
part of the support matrix. Everything is read from the spec as parsed (the text as the
YAML writes it) and from the registered kernels; nothing is written here by hand.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..bench.roofline import roofline_of_row
from ..errors import TileOpsError
from ..kernels import registry
from ..spec.nodes import REQUIRED, FamilyRef, OpSpec, TensorSpec
from ..workloads import RESERVED_KEYS, dtype_cases
from .blocks import Bullets, Code, Heading, Link, Page, Para, Table
from .matrix import OpSupport
from .summary import kernel_rows, refusal_regions

__all__ = ["index_page", "op_page", "signature_text"]


def _decl(spec: OpSpec, decl: Any, text: str | None) -> str:
    """A shape or dtype declaration as written; a type family as ``match x: a -> ..; b -> ..``."""
    if isinstance(decl, FamilyRef) and decl.name in spec.families:
        family = spec.families[decl.name]
        cases = "; ".join(f"{str(k).lower() if isinstance(k, bool) else k} -> {_decl(spec, v, getattr(v, 'text', None))}"
                          for k, v in family.cases)
        return f"match {family.match.text}: {cases}"
    if text is not None:
        return text
    return "-" if decl is None else str(getattr(decl, "text", decl))


def _flags(t: TensorSpec) -> str:
    flags = [name for name, on in (("optional", t.optional), ("mutated", t.mutated),
                                   ("construction-time", t.construction), ("contiguous", t.contiguous)) if on]
    if t.device:
        flags.append(f"device: {t.device}")
    if t.alias:
        flags.append(f"alias of {t.alias}")
    if t.buffer:
        flags.append(f"out buffer: {t.buffer}=")
    return ", ".join(flags)


def signature_text(spec: OpSpec) -> str:
    """``Op(params...)`` and ``op(inputs...) -> outputs`` as a user writes them."""
    init: list[str] = []
    for p in spec.params.values():
        if p.kw_only and "*" not in init:
            init.append("*")
        default = "" if p.default is REQUIRED else f"={p.default!r}"
        init.append(f"{p.name}: {p.type_text}{default}")
    if spec.static_dims:
        if "*" not in init:
            init.append("*")
        init.extend(f"{n}: int" for n in spec.static_dims)
    init.extend(f"{t.name}: Tensor" + ("=None" if t.optional else "") for t in spec.construction_inputs)
    call = [t.name + ("=None" if t.optional else "") for t in spec.call_inputs]
    call.extend(f"{o.buffer}=None" for o in spec.outputs.values() if o.buffer)
    outs = ", ".join(spec.outputs)
    return f"op = {spec.name}({', '.join(init)})\n{outs} = op({', '.join(call)})"


def _value(value: Any) -> str:
    """A row value as the YAML reads: ``[T, NV]`` rather than Python's ``['T', 'NV']``."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return str(value)


def _workload_rows(spec: OpSpec) -> list[list[str]]:
    rows = []
    for row in spec.workloads:
        args = ", ".join(f"{k}={_value(v)}" for k, v in row.values.items() if k not in RESERVED_KEYS)
        gen = row.values.get("generator")
        if isinstance(gen, dict):
            extra = ", ".join(f"{k}={_value(v)}" for k, v in gen.items() if k != "name")
            args += f" (generator {gen.get('name')}" + (f": {extra})" if extra else ")")
        elif gen:
            args += f" (generator {gen})"
        for case in dtype_cases(row):
            try:
                roof = roofline_of_row(spec, row, case)
                figures = [f"{roof.flops:,.0f}", f"{roof.bytes:,.0f}", f"{roof.intensity:.3g}"]
            except TileOpsError as exc:
                figures = ["-", "-", f"roofline error: {exc}"]
            rows.append([row.label, str(case), args, *figures])
    return rows


def _matrix_blocks(support: OpSupport, link: bool) -> list[Any]:
    spec = support.spec
    blocks: list[Any] = []
    if link:
        blocks.append(Heading(2, spec.name))
        blocks.append(Para(["Reference: ", Link(spec.name, f"ops/{spec.name}"), f" ({spec.file}:{spec.line})"]))
    headers, rows = kernel_rows(support)
    if rows:
        blocks.append(Table(headers, [r.texts() for r in rows]))
    for interface in support.unserved:
        blocks.append(Para(f"No kernel is registered for {interface}: the op cannot run with the installed backends."))
    regions = refusal_regions(support)
    if regions:
        blocks.append(Para("Refusal regions (the reason each kernel gave, and the calls it refused):"))
        blocks.append(Bullets([f"{r.kernel.split(':')[-1]} on {r.device} [{','.join(r.archs)}]: {r.reason} "
                               f"-- {', '.join(r.calls)}" for r in regions]))
    elif rows:
        blocks.append(Para("No kernel refused any probed call."))
    for problem in support.problems:
        blocks.append(Para(f"Not probed: {problem}"))
    return blocks


def op_page(spec: OpSpec, support: OpSupport | None) -> Page:
    """The reference page of one op."""
    page = Page(spec.name, f"ops/{spec.name}")
    page.add(Para([Link("index", "index"), f" / {spec.name} ({spec.file}:{spec.line})"]))
    if spec.description:
        page.add(Para(spec.description))
    facts = [f"family: {spec.family}", f"reference API: {spec.ref_api}", f"status: {spec.status}",
             f"torch.compile(fullgraph=True): {'promised' if spec.torch_compile_fullgraph else 'not promised'}"]
    facts.extend(f"source.{k}: {v}" for k, v in spec.source.items())
    page.add(Bullets(facts), Heading(1, "Signature"), Code(signature_text(spec), "python"))
    page.add(Heading(1, "Inputs"), Table(["name", "dtype", "shape", "notes"], [
        [t.name, _decl(spec, t.dtype, t.dtype_text), _decl(spec, t.shape, t.shape_text), _flags(t)]
        for t in spec.inputs.values()]))
    page.add(Heading(1, "Outputs"), Table(["name", "dtype", "shape", "notes"], [
        [t.name, _decl(spec, t.dtype, t.dtype_text), _decl(spec, t.shape, t.shape_text), _flags(t)]
        for t in spec.outputs.values()]))
    if spec.params:
        page.add(Heading(1, "Params"), Table(["name", "type", "default", "keyword-only"], [
            [p.name, p.type_text, "required" if p.default is REQUIRED else repr(p.default), "yes" if p.kw_only else ""]
            for p in spec.params.values()]))
    rules: list[str] = []
    rules += [f"let {n} = {e.text}" for n, e in spec.lets.items()]
    rules += [f"static dim {n} = {sd.expr.text} (promised at construction, checked at every call)"
              for n, sd in spec.static_dims.items()]
    rules += [f"requires {e.text}" for e in spec.requires]
    rules += [f"shape rule {e.text}" for e in spec.shape_rules]
    rules += ["dtype combo " + ", ".join(f"{k}={v}" for k, v in c.items()) for c in spec.dtype_combos]
    if rules:
        page.add(Heading(1, "Rules"), Bullets(rules))
    page.add(Heading(1, "Workloads"), Table(["label", "dtype", "arguments", "FLOPs", "bytes", "FLOP/byte"],
                                            _workload_rows(spec)))
    roof = spec.roofline
    page.add(Heading(1, "Roofline"))
    if roof is None:
        page.add(Para("No roofline declared."))
    elif roof.func:
        page.add(Para(f"Computed by the registered roofline function {roof.func!r}."))
    else:
        page.add(Table(["name", "expression"], [[n, e.text] for n, e in roof.vars.items()]
                       + [["flops", roof.flops.text if roof.flops else "-"],
                          ["bytes", roof.bytes.text if roof.bytes else "-"]]))
    if roof is not None and (roof.reads or roof.writes):
        page.add(Para(f"reads: {', '.join(roof.reads or ())}; writes: {', '.join(roof.writes or ())}"))
    page.add(Heading(1, "Kernels"))
    if support is None:
        page.add(Para("Not in the support matrix (the op is not implemented)."))
    else:
        page.add(*_matrix_blocks(support, link=False))
    if spec.problems:
        page.add(Heading(1, "Spec findings"), Bullets([str(p) for p in spec.problems]))
    return page


def index_page(specs: Sequence[OpSpec], matrix: Sequence[OpSupport]) -> Page:
    """The front page: installed backends, the op list and the whole support matrix."""
    page = Page("TileOPs operators", "index")
    page.add(Para("Generated by `tileops docs` from the manifest and the installed backends."))
    backends = registry.backends()
    page.add(Heading(1, "Installed backends"), Table(["backend", "distribution", "version", "device types", "kernels"], [
        [name, info.distribution or "-", info.version or "-", ", ".join(info.device_types) or "-",
         str(len(info.kernels))] for name, info in sorted(backends.items())]))
    failures = registry.failures()
    if failures:
        page.add(Para("Plugins that failed to load:"), Bullets([str(f) for f in failures]))
    by_name = {s.spec.name: s for s in matrix}
    page.add(Heading(1, "Operators"), Table(["op", "family", "reference API", "status", "dtypes", "kernels"], [
        [Link(s.name, f"ops/{s.name}"), s.family or "-", s.ref_api or "-", s.status or "-",
         ", ".join(by_name[s.name].dtypes) if s.name in by_name else "-",
         ", ".join(sorted({c.kernel.split(':')[-1] for c in by_name[s.name].cells})) if s.name in by_name else "-"]
        for s in specs]))
    page.add(Heading(1, "Support matrix"), Para(
        "Each cell is served/probed: the calls of that dtype (every workload row, in the row's own dtypes and in every "
        "dtype the op's primary input declares) that the kernel serves, out of those probed. A kernel's refusal regions "
        "list the reason it gave and the calls it gave it for."))
    for support in matrix:
        page.add(*[_shift(b) for b in _matrix_blocks(support, link=True)])
    return page


def _shift(block: Any) -> Any:
    return Heading(block.level + 1, block.text) if isinstance(block, Heading) else block
