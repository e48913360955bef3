"""The compile boundary: one ``torch.library`` op per op class, made from the spec.

For each seed-001 example: the schema holds the call-time tensors and every param,
``mutates_args`` is exactly the ``mutated`` inputs, ``torch.library.opcheck`` passes, and
an op with ``torch_compile_fullgraph: true`` compiles cold with ``fullgraph=True`` (no graph
break), runs twice on the same shapes without recompiling, and agrees with eager. One
compile per op, with the ``aot_eager`` backend (functionalisation and the fake
implementation are exercised; Inductor's C++ build would add half a minute to CI).
"""

from __future__ import annotations

import re

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounterWithBackend

from example_ops import (REFERENCE_KERNELS, BmmFwdOp, BmmKernel, GemmFwdOp, GroupNormFwdOp, ReciprocalFwdOp,
                         RMSNormFwdOp, SSDDecodeFwdOp)
from example_ops import rand as r
from tileops_core.op import Op


@pytest.fixture(autouse=True)
def kernels(fake_backend):
    for interface, fn in REFERENCE_KERNELS.items():
        fake_backend.kernel(interface, fn)


def cases():
    """(id, op factory, argument factory): each example op, optional inputs both ways."""
    return [
        ("bmm", BmmFwdOp, lambda: (r(2, 3, 4), r(2, 4, 5))),
        ("gemm-nt", lambda: GemmFwdOp(False, True), lambda: (r(3, 4), r(5, 4))),
        ("gemm-tn", lambda: GemmFwdOp(True, False), lambda: (r(4, 3), r(4, 5))),
        ("rmsnorm", lambda: RMSNormFwdOp([16], eps=1e-6), lambda: (r(4, 16), r(16))),
        ("rmsnorm-no-weight", lambda: RMSNormFwdOp([4, 8]), lambda: (r(2, 4, 8), None)),
        ("groupnorm-affine", lambda: GroupNormFwdOp(2), lambda: (r(2, 4, 3, 3), r(4), r(4))),
        ("groupnorm", lambda: GroupNormFwdOp(4), lambda: (r(2, 8, 5), None, None)),
        ("ssd-decode", SSDDecodeFwdOp, lambda: (r(4, 3, 5), r(2, 4, 3).abs(), r(2, 4, 3, dtype=torch.float16),
                                                r(2, 2, 5, dtype=torch.float16), r(2, 2, 5, dtype=torch.float16),
                                                r(2, 4, 3, 5))),
        ("reciprocal", ReciprocalFwdOp, lambda: (r(3, 4) + 3,)),
        ("reciprocal-int", ReciprocalFwdOp, lambda: (torch.randint(1, 9, (5,), dtype=torch.int32),)),
    ]


CASES = [pytest.param(make_op, make_args, id=name) for name, make_op, make_args in cases()]


def clone(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


# -- the schema ---------------------------------------------------------------------------------

@pytest.mark.parametrize("cls, name, schema", [
    (BmmFwdOp, "bmm_fwd_op", "(Tensor a, Tensor b, str? tileops_target, bool tileops_check_contents, str tileops_compile_key=\"\") -> Tensor"),
    (GemmFwdOp, "gemm_fwd_op", "(Tensor a, Tensor b, bool trans_a, bool trans_b, str? tileops_target, bool tileops_check_contents, str tileops_compile_key=\"\") -> Tensor"),
    (RMSNormFwdOp, "rms_norm_fwd_op", "(Tensor x, Tensor? weight, SymInt[] normalized_shape, float? eps, str? tileops_target, bool tileops_check_contents, str tileops_compile_key=\"\") -> Tensor"),
    (GroupNormFwdOp, "group_norm_fwd_op",
     "(Tensor x, Tensor? weight, Tensor? bias, SymInt num_groups, float eps, str? tileops_target, bool tileops_check_contents, str tileops_compile_key=\"\") -> Tensor"),
    (SSDDecodeFwdOp, "ssd_decode_fwd_op",
     "(Tensor A, Tensor dt, Tensor x, Tensor B_in, Tensor C_in, Tensor(a5!) state, str? tileops_target, bool tileops_check_contents, str tileops_compile_key=\"\") -> Tensor"),
    (ReciprocalFwdOp, "reciprocal_fwd_op", "(Tensor input, Tensor? out, str? tileops_target, bool tileops_check_contents, str tileops_compile_key=\"\") -> Tensor"),
])
def test_schema_holds_the_call_tensors_params_and_target_and_marks_only_mutated_inputs(cls, name, schema):
    # (an out buffer is a call tensor the op never writes: it takes it to refuse shared storage)
    # (a suffix _2, _3, ... when another class of the same name registered first in this process)
    qualname = cls.definition().boundary.qualname
    assert re.fullmatch(rf"tileops::{name}(_\d+)?", qualname), qualname
    assert str(cls.definition().boundary.opoverload._schema) == f"{qualname}{schema}"


def test_boundary_exists_from_class_definition():
    assert all(cls.definition().boundary is not None and cls.definition().boundary_reason is None
               for cls in (BmmFwdOp, GemmFwdOp, RMSNormFwdOp, GroupNormFwdOp, SSDDecodeFwdOp, ReciprocalFwdOp))


def test_redefining_an_op_class_registers_a_second_custom_op_under_a_new_name():
    class BmmFwdOp(Op):  # noqa: F811
        interfaces = (BmmKernel,)

    assert BmmFwdOp.definition().boundary.qualname != globals()["BmmFwdOp"].definition().boundary.qualname


# -- opcheck ------------------------------------------------------------------------------------

@pytest.mark.parametrize("make_op, make_args", CASES)
def test_opcheck_passes(make_op, make_args):
    op = make_op()
    boundary = type(op).definition().boundary
    args = make_args()
    args = args + (None,) * (boundary.n_tensors - len(args))
    torch.library.opcheck(boundary.opoverload, (*args, *boundary.encode(op)))


def test_opcheck_passes_with_an_out_buffer():
    op = ReciprocalFwdOp()
    boundary = type(op).definition().boundary
    torch.library.opcheck(boundary.opoverload, (r(3, 4) + 3, torch.empty(3, 4), *boundary.encode(op)))


def test_eager_calls_do_not_go_through_the_dispatcher(monkeypatch):
    op = BmmFwdOp()

    def dispatched(*args):
        raise AssertionError("the custom op was called in eager mode")

    monkeypatch.setattr(type(op).definition().boundary, "fn", dispatched)
    assert op(r(2, 3, 4), r(2, 4, 5)).shape == (2, 3, 5)


# -- torch.compile(fullgraph=True) ----------------------------------------------------------------------

@pytest.mark.parametrize("make_op, make_args", CASES[::2] + [CASES[-1]])
def test_cold_fullgraph_compile_runs_twice_without_recompiling_and_matches_eager(make_op, make_args):
    op = make_op()
    assert op.op_spec().torch_compile_fullgraph
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(lambda *a: op(*a), fullgraph=True, backend=counter)
    args = make_args()
    expected_args = clone(args)
    expected = op(*expected_args)
    first = compiled(*clone(args))
    again_args = clone(args)
    second = compiled(*again_args)
    assert counter.frame_count == 1
    torch.testing.assert_close(first, expected)
    torch.testing.assert_close(second, expected)
    for given, eager in zip(again_args, expected_args):  # mutated inputs are written as in eager mode
        if isinstance(given, torch.Tensor):
            torch.testing.assert_close(given, eager)


def test_out_buffer_under_compile_is_written_and_returned():
    op = ReciprocalFwdOp()
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, o: op(x, out=o), fullgraph=True, backend="aot_eager")
    x, out = r(3, 4) + 3, torch.empty(3, 4)
    assert compiled(x, out) is out
    torch.testing.assert_close(out, 1 / x)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_compiled_call_gives_outputs_that_require_no_grad_as_an_eager_one(backend):
    """The ops record no gradients; without an autograd kernel a compiled call's outputs required grad and
    backward() left the input's .grad silently None (found in review)."""
    op = BmmFwdOp()
    a, b = r(2, 3, 4).requires_grad_(), r(2, 4, 5)
    torch._dynamo.reset()
    out = torch.compile(lambda a, b: op(a, b), fullgraph=True, backend=backend)(a, b)
    assert not out.requires_grad and not op(a, b).requires_grad
    torch.testing.assert_close(out, torch.bmm(a, b).detach())


@pytest.mark.parametrize("buffer, fact", [(torch.empty(3, 4, dtype=torch.int32), "dtype int32"),
                                          (torch.empty(4), "shape [4]")], ids=["dtype", "shape"])
def test_a_compiled_call_refuses_an_out_buffer_its_output_does_not_fit(buffer, fact):
    """copy_ would cast or broadcast into it (found in review: an int32 buffer took zeros silently)."""
    op = ReciprocalFwdOp()
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, o: op(x, out=o), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match=re.escape(f"ReciprocalFwdOp: out buffer out has {fact}, output output is")):
        compiled(r(3, 4) + 3, buffer)


def test_check_failure_under_compile_names_the_declaration_at_trace_time():
    op = BmmFwdOp()
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: op(a, b), fullgraph=True, backend="eager")
    with pytest.raises(Exception) as info:
        compiled(r(2, 3, 4), r(2, 5, 5))
    expected = ("BmmFwdOp: b shape [B, K, N] with B=2, K=5 does not match a shape [B, M, K] with K=4 "
                f"({op.op_spec().inputs['b'].loc.where()})")
    # Dynamo wraps what the fake implementation raised (TorchRuntimeError): the text survives.
    assert f"CheckError({expected!r})" in str(info.value)


@pytest.mark.parametrize("checks", [False, True])
def test_a_compiled_call_checks_contents_exactly_when_its_instance_does(monkeypatch, checks):
    # The implementation's own instance inherits check_contents= from the traced one: a step
    # made with it off never reads contents (a sync no CUDA graph can hold), whatever
    # TILEOPS_CHECK_CONTENTS (on in this suite) says; one made with it on still checks.
    seen = []
    monkeypatch.setattr(BmmFwdOp, "check_contents", lambda self, **tensors: seen.append(sorted(tensors)))
    op = BmmFwdOp()
    op.checks_contents = checks
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: op(a, b), fullgraph=True, backend="aot_eager")
    a, b = r(2, 3, 4), r(2, 4, 5)
    torch.testing.assert_close(compiled(a, b), torch.bmm(a, b))
    assert seen == ([["a", "b"]] if checks else [])
