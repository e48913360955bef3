"""The validator on manifests that break its own evaluation: diagnostics at file:line, never a traceback
(found in review: a zero divisor on a workload row, a huge roofline, a list where a dtype name goes, a long
chain of lets each ended `tileops validate` in a Python traceback)."""

from __future__ import annotations

import textwrap

from tileops_core.validate.cycles import find_cycles
from tileops_core.validate.runner import validate

_SPEC = """\
ProbeUntrustedFwdOp:
  family: probe
  ref_api: "none"
  status: spec-only
  signature:
    inputs:
      x: {{dtype: float32, shape: "[N, D]"}}
    outputs:
      y: {{dtype: float32, shape: "[N]"}}
    let:
      R: "N // D"
  workloads:
    - {{x_shape: {shape}, {extra}dtypes: [float32], label: "a"}}
  roofline: {{flops: "{flops}", bytes: "1"}}
  source: {{}}
"""


def _rules(tmp_path, **fields) -> set[tuple[str, int]]:
    path = tmp_path / "untrusted.yaml"
    path.write_text(_SPEC.format(**{"extra": "", "flops": "N", "shape": "[4, 0]", **fields}))
    return {(d.rule, d.line) for d in validate([str(path)]).diagnostics}


def test_a_zero_divisor_on_a_row_is_a_diagnostic(tmp_path):
    assert ("C7.instantiate", 13) in _rules(tmp_path)


def test_a_roofline_that_overflows_is_a_diagnostic(tmp_path):
    assert ("C7.roofline", 13) in _rules(tmp_path, flops="1e300 ** 2", shape="[4, 2]")


def test_a_list_where_a_dtype_name_goes_is_a_diagnostic(tmp_path):
    assert ("L3.dtype-name", 13) in _rules(tmp_path, extra="x_dtype: [float32], ")


def test_a_long_chain_of_references_is_searched_without_recursion():
    chain = {f"s{i}": [f"s{i + 1}"] for i in range(5000)} | {"s5000": ["s0"]}
    assert [len(c) for c in find_cycles(chain)] == [5002]
    assert find_cycles({"a": ["b"], "b": ["c", "a"], "c": ["a"], "d": ["d"]}) == [
        ["a", "b", "c", "a"], ["a", "b", "a"], ["d", "d"]]
