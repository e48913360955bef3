"""How the validator enumerates discriminant combinations (seed 000 §6), without torch."""

from __future__ import annotations

import textwrap

from hypothesis import given, settings
from hypothesis import strategies as st

from tileops_core.spec.compile import compile_op
from tileops_core.spec.discriminants import Discriminants
from tileops_core.spec.nodes import OpSpec
from tileops_core.spec.symbolic import OTHER, UNKNOWN
from tileops_core.spec.yamlload import load_yaml_text
from tileops_core.validate.coverage import plan_coverage
from tileops_core.validate.lint import lint_spec


def make_spec(signature: str, workloads: str = '[{M: 4, K: 8, dtypes: [float32], label: "tiny"}]') -> OpSpec:
    """Compile one spec whose ``signature`` block is given (indented freely)."""
    body = textwrap.indent(textwrap.dedent(signature).strip("\n"), "    ")
    text = ("TestFwdOp:\n  family: test\n  ref_api: \"none\"\n  status: spec-only\n  signature:\n" + body
            + f"\n  workloads: {workloads}\n  roofline: {{func: none}}\n  source: {{}}\n")
    raw = load_yaml_text(text, "test.yaml")
    return compile_op("TestFwdOp", raw["TestFwdOp"], "test.yaml", raw.key_lines["TestFwdOp"])


def axes(spec: OpSpec) -> list[tuple[str, str, tuple[object, ...]]]:
    return [(a.kind, a.name, a.values) for a in Discriminants(spec).axes]


def test_optional_inputs_buffers_and_enumerable_params_are_axes_in_declaration_order() -> None:
    spec = make_spec("""
        inputs:
          x: {dtype: float32, shape: "[M, K]"}
          w: {dtype: float32, shape: "[K]", optional: true}
        outputs:
          y: {dtype: float32, shape: "[M, K]", buffer: out}
        params:
          trans: {type: bool, default: false}
          style: {type: '"a" | "b"', default: a}
          eps: {type: "float | None", default: null}
          mode: {type: '"x" | "y" | None', default: null}
          n: {type: int, default: 1}
        """)
    assert axes(spec) == [
        ("input", "w", (True, False)),
        ("buffer", "out", (False, True)),
        ("param", "trans", (False, True)),
        ("param", "style", ("a", "b")),
        ("param", "eps", (None, UNKNOWN)),
        ("param", "mode", (None, "x", "y")),
    ]
    assert Discriminants(spec).count == 2 * 2 * 2 * 2 * 2 * 3


def test_requires_excludes_combinations_without_removing_them_from_the_count() -> None:
    spec = make_spec("""
        inputs:
          x: {dtype: float32, shape: "[M, K]"}
          w: {dtype: float32, shape: "[K]", optional: true}
          b: {dtype: float32, shape: "[K]", optional: true}
        outputs:
          y: {dtype: float32, shape: "[M, K]"}
        requires: ["present(w) == present(b)"]
        """)
    combos = list(Discriminants(spec).combinations())
    assert [(c.describe(), c.excluded) for c in combos] == [
        ("w present, b present", False), ("w present, b absent", True),
        ("w absent, b present", True), ("w absent, b absent", False)]
    result = lint_spec(spec)
    assert (result.combinations, result.excluded) == (4, 2)


def test_a_match_on_an_int_param_is_an_axis_of_its_case_keys_and_any_other_value() -> None:
    spec = make_spec("""
        inputs:
          x: {dtype: float32, shape: {match: groups, cases: {1: "[M, K]", 2: "[M, K, 2]"}}}
        outputs:
          y: {dtype: float32, shape: "[M, K]"}
        params:
          groups: {type: int, default: 1}
        """)
    assert axes(spec) == [("match", "groups", (1, 2, OTHER))]
    missing = [d for d in lint_spec(spec).diagnostics if d.rule == "C2.missing"]
    assert len(missing) == 1 and "values other than 1, 2" in missing[0].message


def test_a_match_on_presence_is_decided_by_the_input_axis_not_a_new_axis() -> None:
    spec = make_spec("""
        inputs:
          x: {dtype: float32, shape: "[M, K]"}
          w: {dtype: float32, shape: {match: "present(w)", cases: {true: "[K]", false: "[K]"}}, optional: true}
        outputs:
          y: {dtype: float32, shape: "[M, K]"}
        """, '[{M: 4, K: 8, dtypes: [float32], label: "a"}, {M: 4, K: 8, w_shape: [8], dtypes: [float32], label: "b"}]')
    assert axes(spec) == [("input", "w", (True, False))]
    assert [d.rule for d in lint_spec(spec).diagnostics] == ["C2.unreachable"]  # false: w is absent there


def test_adt_params_enumerate_their_variant_tags() -> None:
    spec = make_spec("""
        inputs:
          x: {dtype: float32, shape: {match: "pad.tag", cases: {same: "[M, K]", explicit: "[M, K, 1]"}}}
        outputs:
          y: {dtype: float32, shape: "[M, K]"}
        params:
          pad: {type: "Pad | None", default: null}
        types:
          Pad: {variants: {same: {}, explicit: {fields: {l: int}}}}
        """)
    (axis,) = Discriminants(spec).axes
    assert axis.name == "pad" and [getattr(v, "tag", v) for v in axis.values] == [None, "same", "explicit"]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(min_value=0, max_value=9), cap=st.integers(min_value=1, max_value=600))
def test_every_combination_is_checked_and_past_the_cap_an_advisory_says_so(n: int, cap: int) -> None:
    params = "".join(f"  f{i}: {{type: bool, default: false}}\n" for i in range(n))
    spec = make_spec('inputs:\n  x: {dtype: float32, shape: "[M, K]"}\noutputs:\n  y: {dtype: float32, shape: "[M, K]"}\n'
                     + ("params:\n" + params if n else ""))
    result = lint_spec(spec, max_combinations=cap)
    assert result.combinations == 2 ** n
    advisories = [d for d in result.diagnostics if d.rule == "C0.combinations"]
    assert len(advisories) == (1 if 2 ** n > cap else 0)
    assert all(d.severity == "advisory" for d in advisories)


def _flags(n: int, requires: str = "", shape: str = '"[M, K]"') -> OpSpec:
    params = "".join(f"  f{i}: {{type: bool, default: false}}\n" for i in range(n))
    return make_spec(f'inputs:\n  x: {{dtype: float32, shape: {shape}}}\noutputs:\n  y: {{dtype: float32, shape: "[M, K]"}}\n'
                     f"params:\n{params}" + (f'requires:\n  - "{requires}"\n' if requires else ""))


def test_up_to_the_limit_every_combination_of_read_params_is_checked_one_by_one() -> None:
    result = lint_spec(_flags(12, requires=" or ".join(f"not f{i}" for i in range(12))))
    assert (result.coverage, result.combinations, result.checked, result.excluded) == ("all", 4096, 4096, 1)


def test_past_the_limit_params_nothing_reads_are_projected_away_and_every_combination_is_still_covered() -> None:
    result = lint_spec(_flags(20, requires="not (f0 and f1)"))
    assert (result.coverage, result.combinations, result.checked) == ("projected", 2**20, 4)
    assert result.excluded == 2**18  # the one excluded branch stands for every value of the 18 unread flags
    (note,) = [d for d in result.diagnostics if d.rule == "C0.combinations"]
    assert note.message.startswith(f"{2**20} discriminant combinations, more than the cap of 256; all are covered by "
                                   "checking 4: the params f2, f3, ")


def test_past_the_limit_read_params_are_checked_on_a_seeded_sample_labelled_as_one() -> None:
    spec = _flags(20, requires=" or ".join(f"not f{i}" for i in range(20)))
    first, second = lint_spec(spec), lint_spec(spec)
    assert (first.coverage, first.combinations, first.checked) == ("sampled", 2**20, 4096)
    assert first.excluded == second.excluded  # the same sample each time: a report can be reproduced
    drawn = [c.index for c in plan_coverage(Discriminants(spec)).combinations()]
    assert len(set(drawn)) == len(drawn) == 4096 and drawn[0] == 0 and drawn[-1] == 2**20 - 1
    (note,) = [d for d in first.diagnostics if d.rule == "C0.sampled"]
    assert (note.severity, note.message.split(" (axes:")[0]) == (
        "advisory", f"SAMPLED: {2**20} discriminant combinations, more than the 4096 checked one by one; the "
        "per-combination checks ran on 4096 combinations drawn with seed 0, not on all: a problem on another "
        "combination may be missed")


def test_a_sampled_walk_still_finds_a_problem_of_a_family_on_the_combinations_it_checks() -> None:
    flags = " or ".join(f"not f{i}" for i in range(1, 20))
    result = lint_spec(_flags(20, requires=flags, shape='{match: f0, cases: {false: "[M, K]"}}'))
    assert result.coverage == "sampled"
    assert {d.rule for d in result.diagnostics if d.rule.startswith("C2")} == {"C2.missing"}


def test_the_printed_report_says_which_ops_were_checked_on_a_sample_only(tmp_path) -> None:
    from tileops_core.validate.report import render_text
    from tileops_core.validate.runner import validate

    flags = "".join(f"      f{i}: {{type: bool, default: false}}\n" for i in range(14))
    read = " or ".join(f"not f{i}" for i in range(14))
    path = tmp_path / "flags.yaml"
    path.write_text(f"""\
FlagsFwdOp:
  family: test
  ref_api: "none"
  status: spec-only
  signature:
    inputs:
      x: {{dtype: float32, shape: "[M, K]"}}
    outputs:
      y: {{dtype: float32, shape: "[M, K]"}}
    params:
{flags}    requires: ["{read}"]
  workloads: [{{M: 4, K: 8, dtypes: [float32], label: tiny}}]
  roofline: {{flops: "M * K", bytes: "8 * M * K"}}
  source: {{}}
""")
    report = validate([path], conformance=False)
    assert (report.ops["FlagsFwdOp"]["coverage"], report.ops["FlagsFwdOp"]["checked"]) == ("sampled", 4096)
    assert render_text(report).splitlines()[-1].startswith(
        "1 op(s), 1 file(s): 0 errors, 0 warnings, 1 advisory; SAMPLED, not every combination checked: FlagsFwdOp (")
