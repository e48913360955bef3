"""Third review of the op layer on the CPU: behaviours a demanding PyTorch user met, each a spec."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from tileops_core.errors import CheckError
from tileops_core.ops.gemm import BmmFwdOp
from tileops_core.ops.normalization import RMSNormFwdOp


def _eager_message(op, *args):
    with pytest.raises(CheckError) as err:
        op(*args)
    return str(err.value)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_compiled_refusal_traced_with_dynamic_shapes_gives_eager_message_with_the_callers_sizes(backend):
    # Traced with symbolic sizes, the checks saw [s0, s1]: the refusal named sizes the caller never wrote.
    op = BmmFwdOp()
    a, b = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
    expected = _eager_message(op, a, b)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, y: op(x, y), backend=backend, fullgraph=True, dynamic=True)
    with pytest.raises(Exception) as err:
        compiled(a, b)
    assert expected in str(err.value)


def test_a_compiled_refusal_after_a_recompile_for_a_new_shape_gives_eager_message():
    # Automatic dynamic shapes: the second shape recompiles symbolically; a bad third call is refused as eagerly.
    op = RMSNormFwdOp([8])
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: op(x, w), backend="aot_eager", fullgraph=True)
    w = torch.randn(8)
    compiled(torch.randn(3, 8), w)
    compiled(torch.randn(5, 8), w)
    bad = torch.randn(7, 8, 2)
    expected = _eager_message(op, bad, w)
    with pytest.raises(Exception) as err:
        compiled(bad, w)
    assert expected in str(err.value)


def test_a_param_cannot_be_deleted_to_get_round_its_construction_check():
    # del then set was taken: eager computed with the new eps, unchecked, while params kept the old one.
    op = RMSNormFwdOp([8], eps=1e-6)
    with pytest.raises(AttributeError, match=r"^RMSNormFwdOp.eps is set at construction only: make a new op with "
                                             r"RMSNormFwdOp\(eps=...\)$"):
        del op.eps
    assert op.eps == 1e-6
    x = torch.randn(3, 8)
    torch.testing.assert_close(op(x), torch.nn.functional.rms_norm(x, [8], eps=1e-6), rtol=0, atol=0)


@pytest.mark.parametrize("setting", ["no", 0, "off"])
def test_the_checks_contents_setter_refuses_what_the_constructor_refuses(setting):
    # The setter read any value as a truth value: "no" turned contents checking on.
    from tileops_core.errors import TileOpsError

    op = RMSNormFwdOp([8], check_contents=False)
    with pytest.raises(TileOpsError, match=rf"^RMSNormFwdOp: checks_contents takes True, False or None, not "
                                           rf"{setting!r}$"):
        op.checks_contents = setting
    assert op.checks_contents is False


def test_the_checks_contents_setter_takes_none_as_the_process_default(monkeypatch):
    monkeypatch.setenv("TILEOPS_CHECK_CONTENTS", "1")
    op = RMSNormFwdOp([8], check_contents=False)
    op.checks_contents = None
    assert op.checks_contents is True


def test_a_warm_op_given_a_nested_tensor_refuses_it_instead_of_aborting_the_process():
    # The same-call matcher handed it to torch's C++ guard, whose error on a nested tensor's sizes
    # terminated the interpreter (no traceback, no cleanup); in a subprocess so that cannot take pytest down.
    import subprocess
    import sys

    script = """
import warnings; warnings.simplefilter("ignore")
import torch
from tileops_core.errors import CheckError
from tileops_core.ops.normalization import RMSNormFwdOp
op = RMSNormFwdOp([8])
op(torch.randn(2, 8))
try:
    op(torch.nested.nested_tensor([torch.randn(2, 8), torch.randn(3, 8)]))
except CheckError as e:
    print(e)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ("RMSNormFwdOp: input x is a nested tensor, expected strided "
                                   "(manifest/normalization.yaml:14)")


@pytest.mark.parametrize("where", ["input", "out"])
def test_a_nested_tensor_is_refused_as_not_strided_naming_the_argument(where):
    # Its sizes cannot be read: the shape checks failed with torch's "Internal error ... please file an issue".
    from tileops_core.ops.elementwise import ReciprocalFwdOp

    nested = torch.nested.nested_tensor([torch.rand(2) + 1, torch.rand(3) + 1])
    op = ReciprocalFwdOp()
    with pytest.raises(CheckError) as err:
        op(nested) if where == "input" else op(torch.rand(5) + 1, out=nested)
    name = "input input" if where == "input" else "out buffer out"
    assert str(err.value) == f"ReciprocalFwdOp: {name} is a nested tensor, expected strided (manifest/elementwise.yaml:" \
                             f"{11 if where == 'input' else 13})"


# -- step 7 names the kernel that broke its contract ---------------------------------------------------------

@pytest.mark.parametrize("path", ["direct", "forward"])
def test_a_refused_output_names_the_kernel_and_backend_that_returned_it(fake_backend, path):
    # Step 7 named the op, the output and its declaration, but not which kernel (of which plugin) returned it.
    # "direct": forward is one launch, so the call runs the kernel itself; "forward": an argument requires grad,
    # so forward runs (under no_grad) and step 7 follows it.
    from tileops_core.ops.normalization import RMSNormKernel

    fake_backend.kernel(RMSNormKernel, lambda x, weight, normalized_shape, eps: x[:, :-1] * 2)
    op = RMSNormFwdOp([8])
    x = torch.randn(4, 8, requires_grad=path == "forward")
    assert _eager_message(op, x) == ("RMSNormFwdOp: output output has shape [4, 7], the spec gives [4, 8] "
                                     "(manifest/normalization.yaml:17)\n  kernel: conftest:TestRMSNormKernel [fake]")


def test_a_warm_call_whose_output_shares_an_inputs_storage_names_the_kernel(fake_backend):
    # The fast check of a warm call refuses shared storage itself (not through the full check): named there too.
    from tileops_core.ops.normalization import RMSNormKernel

    calls = []

    def kernel(x, weight, normalized_shape, eps):
        calls.append(1)
        return torch.nn.functional.rms_norm(x, normalized_shape, weight, eps) if len(calls) == 1 else x.view_as(x)
    fake_backend.kernel(RMSNormKernel, kernel)
    op = RMSNormFwdOp([8])
    x = torch.randn(4, 8)
    op(x)
    assert _eager_message(op, x) == ("RMSNormFwdOp: output output shares storage with an input "
                                     "(manifest/normalization.yaml:17)\n  kernel: conftest:TestRMSNormKernel [fake]")


# -- RMSNorm's normalized_shape: an int as torch takes it, sizes checked at construction ---------------------

def test_rms_norm_takes_an_int_normalized_shape_as_the_one_element_shape_like_nn_rms_norm():
    # RMSNormFwdOp(8) was refused ("not a list[int] | tuple[int, ...]") where torch.nn.RMSNorm(8) is (8,).
    op = RMSNormFwdOp(8, eps=1e-6)
    assert op.normalized_shape == (8,) == torch.nn.RMSNorm(8).normalized_shape
    assert op.params == {"normalized_shape": (8,), "eps": 1e-6}
    x, w = torch.randn(3, 8), torch.randn(8)
    torch.testing.assert_close(op(x, w), torch.nn.functional.rms_norm(x, (8,), w, 1e-6), rtol=0, atol=0)


def test_rms_norm_still_refuses_a_bool_normalized_shape():
    # A bool is an int to Python, not a size: it is refused as the spec's type check refuses it, not taken as (1,).
    with pytest.raises(CheckError, match=r"^RMSNormFwdOp: param normalized_shape=True is not a list\[int\] \| "
                                         r"tuple\[int, \.\.\.\] \(manifest/normalization.yaml:19\)$"):
        RMSNormFwdOp(True)


@pytest.mark.parametrize("shape, shown", [([-8], "(-8,)"), (-8, "(-8,)"), ([0], "(0,)"), ((8, -1), "(8, -1)")])
def test_a_non_positive_normalized_size_is_refused_at_construction_naming_the_rule(shape, shown):
    # RMSNormFwdOp([-8]) was made, then every call refused ("does not match let N = normalized_shape").
    with pytest.raises(CheckError) as err:
        RMSNormFwdOp(shape)
    assert str(err.value) == f"RMSNormFwdOp: min(N) > 0 does not hold with N={shown} (manifest/normalization.yaml:26)"


# -- a compiled call's out buffer that does not fit: refused with the caller's sizes -----------------------

@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_compiled_call_traced_with_dynamic_shapes_refuses_a_misfit_out_buffer_naming_real_sizes(backend):
    # The check ran in dynamo's trace of the wrapper: "out buffer out has shape [s45], output output is [s77]".
    from tileops_core.ops.elementwise import ReciprocalFwdOp

    op = ReciprocalFwdOp()
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, o: op(x, out=o), backend=backend, fullgraph=True, dynamic=True)
    with pytest.raises(Exception) as err:
        compiled(torch.rand(3) + 1, torch.empty(4))
    assert "ReciprocalFwdOp: out buffer out has shape [4], output output is [3] (manifest/elementwise.yaml:13)" in str(
        err.value)


def test_a_graph_compiled_for_a_fitting_out_buffer_refuses_a_misfit_one_on_a_later_call():
    # The fit is checked where the trace builds the op's outputs; its comparison of symbolic sizes still guards the
    # graph, so a later call with another buffer size is traced again and refused, never copied with broadcasting.
    from tileops_core.ops.elementwise import ReciprocalFwdOp

    op = ReciprocalFwdOp()
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, o: op(x, out=o), backend="aot_eager", fullgraph=True, dynamic=True)
    x, out = torch.rand(5) + 1, torch.empty(5)
    assert compiled(x, out) is out
    torch.testing.assert_close(out, 1 / x)
    with pytest.raises(Exception) as err:
        compiled(torch.rand(6) + 1, torch.empty(1))
    assert "ReciprocalFwdOp: out buffer out has shape [1], output output is [6] (manifest/elementwise.yaml:13)" in str(
        err.value)
