"""A spec's expressions failing at call time: a CheckError naming the declaration, never a bare Python error.

A manifest (a plugin's too) is untrusted input, and a shape rule, a solved axis or an output shape can fail
to evaluate on some call (found in review: ZeroDivisionError, TypeError, a float axis, an always-true rule,
memory without bound from doubled tuples).
"""

from __future__ import annotations

import pytest
import torch

from example_ops import probe_specs
from tileops_core.errors import CheckError, ExprError, SpecError
from tileops_core.kernels.interface import KernelInterface
from tileops_core.lang.evaluate import MAX_SEQUENCE, compile_node
from tileops_core.lang.parse import parse_expr
from tileops_core.op import Op

#: name -> (x's shape, y's shape, shape rules): each fails to evaluate, or holds nothing, on the call below.
_SIGNATURES = {
    "ProbeOutDivFwdOp": ("[N, D]", "[N // D]", ()),
    "ProbeAxisDivFwdOp": ("[N, M, N // M]", "[N]", ()),
    "ProbeHalfFwdOp": ("[N]", "[N / 2]", ()),
    "ProbeTupleRuleFwdOp": ("[N, M]", "[N, M]", ("N > 2, M > 2",)),
    "ProbeStringRuleFwdOp": ("[N, M]", "[N, M]", ("'N > 2'",)),
}
PROBES = probe_specs(**{
    name: (f'inputs:\n  x: {{dtype: float32, shape: "{x}"}}\noutputs:\n  y: {{dtype: float32, shape: "{y}"}}\n'
           + ("shape_rules:\n" + "".join(f'  - "{r}"\n' for r in rules) if rules else ""))
    for name, (x, y, rules) in _SIGNATURES.items()})


def _op(name: str) -> type[Op]:
    kernel = type(name.replace("FwdOp", "Kernel"), (KernelInterface,), {"op": name})

    def forward(self, x):
        return self.launch(kernel, x)

    return type(name, (Op,), {"interfaces": (kernel,), "forward": forward, "__module__": __name__})


@pytest.fixture
def probes(extra_manifest, fake_backend):
    extra_manifest(PROBES, file="evaluation.yaml")
    ops = {}
    for name in _SIGNATURES:
        ops[name] = _op(name)
        fake_backend.kernel(ops[name].interfaces[0], lambda x: x.clone())
    return ops


@pytest.mark.parametrize("name, shape, message", [
    ("ProbeOutDivFwdOp", (4, 0), "output y shape [N // D] cannot be evaluated: ZeroDivisionError"),
    ("ProbeAxisDivFwdOp", (4, 0, 1), "the input shapes x=[4, 0, 1] cannot be solved against the signature"),
    ("ProbeHalfFwdOp", (4,), "output y shape [N / 2] = [2.0] has an axis that is not an integer"),
])
def test_an_expression_that_fails_on_a_call_is_a_check_error_naming_its_file(probes, name, shape, message):
    with pytest.raises(CheckError, match="extra/evaluation.yaml") as info:
        probes[name]()(torch.randn(shape))
    assert message in str(info.value)


def test_a_concatenation_is_bounded_as_a_repetition_is():
    doubled = compile_node(parse_expr("s + s"))
    assert len(doubled({"s": (1,) * (MAX_SEQUENCE // 2)})) == MAX_SEQUENCE
    with pytest.raises(ExprError, match=f"longer than {MAX_SEQUENCE}"):
        doubled({"s": (1,) * MAX_SEQUENCE})


def test_a_declaration_that_cannot_make_an_op_fails_its_construction_not_its_class_statement(extra_manifest):
    """(Found in review: an alias to no input, and a param named as a Python keyword, failed the class
    statement with a bare KeyError / ValueError.)"""
    extra_manifest(probe_specs(
        ProbeAliasNowhereFwdOp='inputs:\n  x: {dtype: float32, shape: "[N]"}\n'
                               'outputs:\n  y: {dtype: float32, shape: "[N]", alias: nope}\n',
        ProbeKeywordFwdOp='inputs:\n  x: {dtype: float32, shape: "[N]"}\noutputs:\n  y: {dtype: float32, shape: "[N]"}\n'
                          'params:\n  lambda: {type: int, default: 1}\n'), file="names.yaml")
    for name in ("ProbeAliasNowhereFwdOp", "ProbeKeywordFwdOp"):
        op_cls = _op(name)  # the class statement binds nothing it cannot
        with pytest.raises(SpecError, match=f"the spec of {name} cannot"):
            op_cls()


@pytest.mark.parametrize("name, what", [("ProbeTupleRuleFwdOp", "tuple"), ("ProbeStringRuleFwdOp", "str")])
def test_a_shape_rule_that_is_no_condition_makes_its_spec_unusable(probes, name, what):
    """A tuple or a constant holds always: the rule would never be enforced (found in review)."""
    with pytest.raises(SpecError, match=f"a shape rule is a condition, and .* is a {what} \\(always true\\)"):
        probes[name]()
