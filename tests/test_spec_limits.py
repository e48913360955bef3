"""Numbers a spec may not hold: limits of the closed language, checked when the spec is read.

A constant exponent beyond the language's bound (``2 ** 10 ** 10`` in a shape) is a spec
problem with file and line at load, not an arithmetic error at the first call; a YAML number
Python cannot even read (5000 digits) is a problem of that file, not a traceback.
"""

from __future__ import annotations

import pytest

from test_manifest_load import GOOD, load_dirs, write
from tileops_core.errors import ExprError
from tileops_core.lang.parse import parse_expr


@pytest.mark.parametrize("text, shown", [("x ** 100", 100), ("2 ** 10 ** 10", 10**10), ("N ** (8 ** 3)", 512)])
def test_a_constant_exponent_beyond_the_bound_is_refused_when_parsed(text, shown):
    with pytest.raises(ExprError) as info:
        parse_expr(text)
    assert str(info.value) == f"exponent {shown} is larger than 64 (in {text!r})"


def test_small_constant_exponents_and_exponents_known_at_a_call_still_parse():
    for text in ("x ** 2", "N ** (2 ** 3)", "x ** y", "2 ** -1"):
        parse_expr(text)


def test_an_exponent_tower_in_a_shape_is_a_problem_of_the_spec_with_its_file_and_line(tmp_path):
    text = GOOD.replace('shape: "[M, 2 * N]"', 'shape: "[M, 2 ** 10 ** 10 * N]"', 1)
    assert text != GOOD
    write(tmp_path / "one", "probe.yaml", text)
    spec = load_dirs(tmp_path, "one")["ProbeFwdOp"]
    assert not spec.usable
    (problem,) = [p for p in spec.problems if "exponent" in str(p)]
    assert str(problem).startswith("one/probe.yaml:7: ")
    assert "exponent 10000000000 is larger than 64" in str(problem)


def test_a_5000_digit_number_is_a_problem_of_its_file_not_a_traceback(tmp_path):
    write(tmp_path / "one", "probe.yaml", GOOD + "# and a number Python cannot read:\nBig: " + "1" * 5000 + "\n")
    manifest = load_dirs(tmp_path, "one")
    (problem,) = manifest.problems
    assert str(problem).startswith("one/probe.yaml")
    assert "YAML value cannot be read: ValueError: Exceeds the limit (4300 digits)" in str(problem)
