"""The catalogue of rule ids: what each one means and how severe it is.

Rule ids name where a rule comes from, so that a finding can be looked up in the seeds:
``L0``..``L4`` are seed 001's validator levels, ``C1``..``C8`` seed 000 §6's eight checks
(``C0`` the enumeration itself), ``T3.1``..``T3.7`` the rows of seed 000's table 3 of
rejected forms. Ids with a dotted suffix refine one rule; a bare ``C1``/``C5``/``L0`` is
what the spec compiler records when it has nothing more specific to say.
"""

from __future__ import annotations

__all__ = ["RULES", "severity_of", "describe"]

#: rule id -> one-line meaning, one table per severity (errors are most rules; a few only warn or advise).
_ERRORS: dict[str, str] = {
    # L0: structure (recorded by the spec compiler at load).
    "L0": "a field has the wrong structure or type (pydantic model of seed 001's fields)",
    "L0.yaml": "the file is not valid YAML",
    "L0.file": "the file cannot be read or is not a mapping of op names to specs",
    "L0.limit": "the file passes a bound on what reading it may cost (bytes, nesting, nodes counted through aliases, "
                "scalar length, ops per file)",
    "L0.duplicate-key": "a YAML mapping repeats a key",
    "L0.duplicate-op": "an op is defined in two files",
    "L0.unknown-field": "a field that the spec format does not have",
    "L0.missing-field": "a required field is missing",
    "L0.expr": "check 5: an expression does not parse in the closed language (syntax or primitive)",
    # Seed 000 §6: the eight checks, on every discriminant combination.
    "C1": "check 1: a name used as a kind it is not (tensor, param, index, let, static dim)",
    "C1.param-usage": "check 1: a param's type does not fit where it is used",
    "C1.guard": "check 1: an expression reads an absent optional input, Maybe param or unbound index without a "
                "present() guard, or is false whenever it is absent",
    "C1.requires": "check 1: a requires entry (domain restriction) reads something that is not a discriminant",
    "C2.missing": "check 2: a type family has no case for a value its match can take",
    "C2.unreachable": "check 2: a type family case can never be selected",
    "C2.overlap": "check 2: two cases of a type family cover the same value",
    "C2.cycle": "check 2: type families refer to each other in a cycle",
    "C2.kind": "check 2: a family of shapes used as a dtype, or of dtypes as a shape",
    "C2.empty-domain": "check 2: requires excludes every discriminant combination",
    "C3.unsolved": "check 3: an index used on a branch cannot be solved from the inputs (no or several solutions)",
    "C3.output-only": "check 3: an index appears only in outputs and is not a param or let",
    "C4.cycle": "check 4: let entries depend on each other in a cycle",
    "C5": "check 5: a name or attribute the language does not know here",
    "C6.unify": "check 6: a workload row does not unify with the declared shapes or static dims",
    "C6.requires": "check 6: a workload row's discriminants are excluded by requires",
    "C6.rule": "check 6: a workload row violates a refinement (shape_rules)",
    "C6.dtype": "check 6: a workload row's dtypes are not accepted by the declaration or dtype_combos",
    "C7.instantiate": "check 7: a workload row cannot be instantiated (a shape or dtype does not resolve)",
    "C7.roofline": "check 7: the roofline cannot be evaluated on a workload row",
    "C8.alias": "check 8: an alias output does not point at a mutated input",
    "C8.buffer": "check 8: an out buffer declaration is inconsistent",
    "C8.mutated": "check 8: a mutated input that cannot be written back (construction-time input)",
    "C8.roofline": "check 8: roofline reads/writes disagree with the inputs, outputs and mutated inputs",
    "C8.schema": "check 8: the torch.library boundary's mutates_args (or its existence) disagrees with the spec",
    # Seed 000 table 3: rejected shape_rules forms (with their rewrite).
    "T3.1": "table 3 row 1: a shape rule reads x.shape; declare the shape on the tensor",
    "T3.2": "table 3 row 2: two tensors' shapes compared; give them the same shape items",
    "T3.3": "table 3 row 3: '==' defines a new name; write a let entry",
    "T3.4": "table 3 row 4: 'x is None' on a tensor; write not present(x)",
    "T3.5": "table 3 row 5: 'v is None' on a value; write not present(v)",
    "T3.6": "table 3 row 6: isinstance; write per_axis(s, i, n)",
    "T3.7": "table 3 row 7: a set comprehension; write unique_axes(dim, n)",
    # Seed 001's levels beyond L0.
    "L1.name": "L1: the op name is not a valid Python class name",
    "L1.plugin": "L1: an installed plugin failed to load, so its op classes and kernels were not checked (the specs it "
                 "declares in package metadata get the lint alone)",
    "L1.import": "L1: the op module named by source.op cannot be imported",
    "L1.class": "L1: no Op class in source.op named exactly as the manifest key",
    "L1.init": "L1: __init__ does not take the spec's params in order with the spec's defaults, and its static dims "
               "as required keyword-only arguments",
    "L1.forward": "L1: forward does not take the call-time inputs in order (optional ones defaulting to None) and the "
                  "out buffers by keyword",
    "L2.output-shape": "L2: an output does not declare its shape",
    "L2.static-dims": "L2: a static dim is not one axis of one input (<tensor>.shape[<int or param>])",
    "L2.rule-false": "L2: a refinement is false on every call of a legal combination",
    "L2.inference": "L2: the op's generated checks disagree with the spec on a workload row",
    "L3.dtype-name": "L3: a dtype name that does not exist",
    "L3.same-as": "L3: same_as/promote_int_to_float refers to something that is not an input",
    "L3.same-as-optional": "L3: same_as refers to an optional input",
    "L3.promote": "L3: promote_int_to_float outside outputs",
    "L3.dtype-combos": "L3: dtype_combos names something that is not a tensor",
    "L3.dtype-combos-optional": "L3: dtype_combos names an optional input",
    "L3.output-dtype": "L3: an output does not declare its dtype",
    "L3.output-dtype-choice": "L3: an output dtype is a choice the inputs and params do not settle",
    "L3.inference": "L3: the op's generated dtype checks disagree with the spec",
    "L4.keys": "L4: a workload key that is not <input>_shape, <input>_dtype, a param, static dim, index, dtypes, "
               "label or generator",
    "L4.empty": "L4: an op with no workload rows",
    "L4.value": "L4: a workload value of the wrong type (param value, shape list, dtypes list)",
    "L4.optional-coverage": "L4: an optional input lacks a workload row where it is present, or one where it is "
                            "absent (rule 7)",
    "L4.generator": "L4: a workload generator that is not registered",
    "L4.bench": "L4: the benchmark module does not obtain its shapes through load_workloads",
}
_WARNINGS: dict[str, str] = {
    "L1.orphan": "L1: an Op class in an op module has no manifest entry of its name",
    "L2.domain-rule": "L2: a shape rule reads only discriminants; it is a domain restriction and belongs in requires",
    "L4.label": "L4: two workload rows share a label",
}
_ADVISORIES: dict[str, str] = {
    "L0.undeclared-specs": "a loaded plugin's spec directory is not declared in the entry-point group "
                           "tileops.manifests, so the lint alone (without torch) does not read it",
    "C0.combinations": "more discriminant combinations than the configured cap (all still checked)",
    "C0.sampled": "too many discriminant combinations to check each: the per-combination checks ran on a stated "
                  "sample only",
}

#: rule id -> (severity, one-line meaning)
RULES: dict[str, tuple[str, str]] = {
    rule: (severity, meaning)
    for severity, table in (("error", _ERRORS), ("warning", _WARNINGS), ("advisory", _ADVISORIES))
    for rule, meaning in table.items()
}


def severity_of(rule: str) -> str:
    """The severity of ``rule`` (its own entry, else its prefix's, else error)."""
    entry = RULES.get(rule) or RULES.get(rule.split(".")[0])
    return entry[0] if entry else "error"


def describe(rule: str) -> str:
    """The one-line meaning of ``rule``."""
    entry = RULES.get(rule) or RULES.get(rule.split(".")[0])
    return entry[1] if entry else ""
