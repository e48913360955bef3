"""Check 8 (spec side): what a call writes agrees across aliases, buffers and the roofline.

A call writes its fresh outputs, its ``out=`` buffers and the inputs marked ``mutated``;
an alias output is one of those mutated inputs handed back as the very same object. On
every effect branch (an optional mutated input present or not, a buffer passed or not)
the written set is these declarations restricted to what is present, so checking the
declarations once covers every branch:

* an alias output names a required input that is mutated, and is not also a buffer;
* a buffer name is a valid keyword not taken by an input, param or static dim, used once;
* a mutated input is a call-time input (a construction-time tensor is copied to the
  calling device, so writes to it would be lost);
* roofline ``writes`` (when declared) is exactly the outputs and mutated inputs, and
  ``reads`` names inputs and covers every input that is not only written.

The torch.library side (``mutates_args``) is checked by the conformance pass.
"""

from __future__ import annotations

from .context import SpecContext
from .diagnostics import Diagnostic

__all__ = ["check_effects"]


def check_effects(ctx: SpecContext) -> list[Diagnostic]:
    """Aliases, buffers, mutated inputs and roofline reads/writes of one spec."""
    return _aliases(ctx) + _buffers(ctx) + _mutated(ctx) + _roofline_sets(ctx)


def _aliases(ctx: SpecContext) -> list[Diagnostic]:
    spec = ctx.spec
    out = []
    for o in spec.outputs.values():
        if o.alias is None:
            continue
        target = spec.inputs.get(o.alias)
        if target is None:
            out.append(ctx.diag("C8.alias", f"output {o.name} aliases {o.alias!r}, which is not an input", loc=o.loc))
        elif target.optional:
            out.append(ctx.diag("C8.alias", f"output {o.name} aliases optional input {o.alias}: on a call without it "
                                "the output would be missing, and the output count is fixed", loc=o.loc))
        elif not target.mutated:
            out.append(ctx.diag("C8.alias", f"output {o.name} aliases input {o.alias}, which is not mutated: an alias "
                                "output hands back an input the call writes", loc=o.loc,
                                fix=f"declare {o.alias}: {{mutated: true}}, or make {o.name} a fresh output"))
        elif target.construction:
            out.append(ctx.diag("C8.alias", f"output {o.name} aliases construction-time input {o.alias}", loc=o.loc))
        if o.buffer is not None:
            out.append(ctx.diag("C8.buffer", f"output {o.name} is both an alias of {o.alias} and written into the out "
                                f"buffer {o.buffer}", loc=o.loc))
    return out


def _buffers(ctx: SpecContext) -> list[Diagnostic]:
    spec = ctx.spec
    taken = {**{n: "an input" for n in spec.inputs}, **{n: "a param" for n in spec.params},
             **{n: "a static dim" for n in spec.static_dims}}
    out = []
    used: dict[str, str] = {}
    for o in spec.outputs.values():
        b = o.buffer
        if b is None:
            continue
        if not (b.isidentifier() and not b.startswith("_")):
            out.append(ctx.diag("C8.buffer", f"out buffer name {b!r} of output {o.name} is not a valid keyword",
                                loc=o.loc))
        elif b in taken:
            out.append(ctx.diag("C8.buffer", f"out buffer {b} of output {o.name} has the name of {taken[b]}",
                                loc=o.loc))
        elif b in used:
            out.append(ctx.diag("C8.buffer", f"outputs {used[b]} and {o.name} share the out buffer name {b}",
                                loc=o.loc))
        used.setdefault(b, o.name)
    return out


def _mutated(ctx: SpecContext) -> list[Diagnostic]:
    return [ctx.diag("C8.mutated", f"input {t.name} is mutated but construction-time: it is copied to the calling "
                     "device and cast at each call, so what the op writes never reaches the caller's tensor",
                     loc=t.loc) for t in ctx.spec.inputs.values() if t.mutated and t.construction]


def _roofline_sets(ctx: SpecContext) -> list[Diagnostic]:
    spec = ctx.spec
    roof = spec.roofline
    if roof is None or ctx.broken("roofline"):
        return []
    out = []
    aliases = {o.name: o.alias for o in spec.outputs.values() if o.alias}
    written = {o.name for o in spec.outputs.values() if not o.alias} | {t.name for t in spec.inputs.values()
                                                                         if t.mutated}
    tensors = set(spec.inputs) | set(spec.outputs)
    loc = roof.loc
    for what, names in (("reads", roof.reads), ("writes", roof.writes)):
        if names is None:
            continue
        for n in names:
            if n not in tensors:
                out.append(ctx.diag("C8.roofline", f"roofline {what} names {n!r}, which is not a tensor", loc=loc,
                                    field=f"roofline.{what}", key=f"{what}:{n}"))
        if len(set(names)) != len(names):
            out.append(ctx.diag("C8.roofline", f"roofline {what} lists a tensor twice", loc=loc,
                                field=f"roofline.{what}"))
    if roof.writes is not None:
        declared = {aliases.get(n, n) for n in roof.writes if n in tensors}
        missing, extra = sorted(written - declared), sorted(declared - written)
        if missing:
            out.append(ctx.diag("C8.roofline", f"roofline writes omits {', '.join(missing)}, which the call writes "
                                "(outputs and mutated inputs)", loc=loc, field="roofline.writes",
                                fix=f"writes: [{', '.join(sorted(written))}]"))
        if extra:
            out.append(ctx.diag("C8.roofline", f"roofline writes lists {', '.join(extra)}, which the call does not "
                                "write (not an output, not mutated)", loc=loc, field="roofline.writes",
                                fix=f"writes: [{', '.join(sorted(written))}]"))
    if roof.reads is not None:
        outputs = sorted(n for n in roof.reads if n in spec.outputs and n not in aliases)
        if outputs:
            out.append(ctx.diag("C8.roofline", f"roofline reads lists output(s) {', '.join(outputs)}; a call reads "
                                "its inputs", loc=loc, field="roofline.reads"))
        read = {aliases.get(n, n) for n in roof.reads}
        unread = sorted(t.name for t in spec.inputs.values() if not t.mutated and t.name not in read)
        if unread:
            out.append(ctx.diag("C8.roofline", f"roofline reads omits input(s) {', '.join(unread)}", loc=loc,
                                field="roofline.reads"))
    return out
