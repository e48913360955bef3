"""Seed 000 table 3 rows 4-5 in every expression field, not only in ``shape_rules``.

``x is None`` / ``x is not None`` is rejected wherever an expression is written: ``requires``,
``let``, a family's ``match``, the roofline's vars and formulas, a conditional dtype and an
ADT invariant. Each is reported with its file, line, field and the ``present()`` rewrite
(T3.4 for a tensor, T3.5 for a value), still evaluates (a lenient load keeps working), and
``tileops validate --fix`` rewrites it in place.
"""

from __future__ import annotations

import pytest

from test_manifest_load import load_dirs, write
from tileops_core.validate.fix import fix_file
from tileops_core.validate.runner import validate

BASE = """\
ProbeFwdOp:
  family: probe
  ref_api: "none"
  status: spec-only
  signature:
    inputs:
      x: {dtype: "float16 | float32", shape: "[M, N]"}
      weight: {dtype: "same_as(x)", shape: "[N]", optional: true}
    outputs:
      y: {dtype: "same_as(x)", shape: "[M, N]"}
    params:
      eps: {type: "float | None", default: null}
      pad: {type: "Pad | None", default: null}
    types:
      Pad: {variants: {none: {}, some: {fields: {width: "int | None"}, invariant: "width is not None"}}}
    let:
      scale: "2 if eps is None else 3"
    requires:
      - "weight is None or eps is not None"
    families:
      Out: {match: "eps is None", cases: {true: float32, false: float16}}
  workloads:
    - {M: 4, N: 8, dtypes: [float32], label: small}
  roofline:
    vars:
      extra: "0 if eps is None else M"
    flops: "M * N * scale"
    bytes: "M * N * 4 if eps is not None else M * N * 2"
  source: {}
"""

#: (field, line, rule, the present() rewrite, the text after --fix)
CASES = [
    ("signature.types.Pad.variants.some.invariant", 15, "T3.5", "present(width)", '"present(width)"'),
    ("signature.let.scale", 17, "T3.5", "2 if not present(eps) else 3", '"2 if not present(eps) else 3"'),
    ("signature.requires[0]", 19, "T3.4", "not present(weight) or present(eps)",
     '"not present(weight) or present(eps)"'),
    ("signature.families.Out.match", 21, "T3.5", "not present(eps)", '"not present(eps)"'),
    ("roofline.vars.extra", 26, "T3.5", "0 if not present(eps) else M", '"0 if not present(eps) else M"'),
    ("roofline.bytes", 28, "T3.5", "M * N * 4 if present(eps) else M * N * 2",
     '"M * N * 4 if present(eps) else M * N * 2"'),
]


@pytest.fixture
def probe(tmp_path):
    path = write(tmp_path / "one", "probe.yaml", BASE)
    return path, load_dirs(tmp_path, "one")["ProbeFwdOp"]


@pytest.mark.parametrize("field, line, rule, rewrite, _", CASES, ids=[c[0] for c in CASES])
def test_is_none_in_any_expression_field_is_reported_with_its_present_rewrite(probe, field, line, rule, rewrite, _):
    _, spec = probe
    (problem,) = [p for p in spec.problems if p.location.field == field]
    assert (problem.rule, problem.location.line, problem.fix) == (rule, line, rewrite)
    assert str(problem).startswith(f"one/probe.yaml:{line}: ProbeFwdOp.{field}: '")
    assert "tests presence with 'is None'" in str(problem)


def test_is_none_in_a_conditional_dtype_is_reported_on_the_tensor_as_t3_4(tmp_path):
    text = BASE.replace('y: {dtype: "same_as(x)"', 'y: {dtype: "float32 if weight is None else float16"')
    write(tmp_path / "one", "probe.yaml", text)
    spec = load_dirs(tmp_path, "one")["ProbeFwdOp"]
    (problem,) = [p for p in spec.problems if p.location.field == "signature.outputs.y.dtype"]
    assert str(problem) == ("one/probe.yaml:10: ProbeFwdOp.signature.outputs.y.dtype: 'weight is None' tests "
                            "presence with 'is None' (in 'float32 if weight is None else float16'); write instead: "
                            "not present(weight)")


def test_a_presence_form_still_evaluates_so_the_lenient_load_keeps_the_spec_usable(probe):
    _, spec = probe
    assert spec.usable
    assert {p.rule for p in spec.problems} == {"T3.4", "T3.5"}


def test_a_shape_rule_with_is_none_is_reported_once_by_the_table_3_check(tmp_path):
    text = BASE.replace('      - "weight is None or eps is not None"\n', "").replace(
        "    requires:\n", '    shape_rules:\n      - "weight is None or N > 0"\n')
    write(tmp_path / "one", "probe.yaml", text)
    spec = load_dirs(tmp_path, "one")["ProbeFwdOp"]
    assert [p.location.field for p in spec.problems if p.rule == "T3.4"] == ["signature.shape_rules[0]"]


def test_fix_rewrites_is_none_in_every_expression_field_and_the_spec_then_validates(tmp_path):
    path = write(tmp_path, "probe.yaml", BASE)
    result = fix_file(path, "probe.yaml")
    fixed = path.read_text()
    for field, _, rule, rewrite, written in CASES:
        assert f"ProbeFwdOp {field} ({rule}): " in "\n".join(result.applied)
        assert written in fixed
    assert " is None" not in fixed and " is not None" not in fixed
    assert not [d for d in validate([path], conformance=False).errors if d.rule.startswith("T3.")]
