"""An op whose forward is one launch of its own arguments is called without running forward.

``tileops_core.op.one_launch`` recognises ``return self.launch(I, *forward_args, self.p, ...)``
once per op class; a call whose kernel writes the outputs the plan allocates then calls that
kernel itself (``BoundKernels.direct``). What it must keep: the kernel gets exactly what
forward would pass, the params read from the op on each call, a kernel's exception named as
before, and every forward that does anything more runs as written.
"""

from __future__ import annotations

import pytest
import torch

from tileops_core.bench.baselines import capture_launches
from tileops_core.errors import CheckError, KernelError
from tileops_core.ops.activation import SiluAndMulFwdOp, SiluAndMulKernel
from tileops_core.ops.attention import QKNormRopeFwdOp
from tileops_core.ops.moe import MoETopKRoutingFwdOp
from tileops_core.ops.linear_attention import RecurrentGatedDeltaRuleFwdOp, RGDRKernel
from tileops_core.ops.normalization import RMSNormFwdOp, RMSNormKernel
from tileops_core.ops.normalization import RMSNormFwdOp as CatalogueRMSNormFwdOp
from tileops_core.ops.reduction import SumFwdOp
from tileops_core.op import current_call
from tileops_core.op.one_launch import OneLaunch, one_launch_of


def test_a_forward_of_one_launch_is_read_as_its_interface_and_params():
    assert RMSNormFwdOp.definition().one_launch == OneLaunch(RMSNormKernel, ("normalized_shape", "eps"))
    assert SiluAndMulFwdOp.definition().one_launch == OneLaunch(SiluAndMulKernel, ())
    assert RecurrentGatedDeltaRuleFwdOp.definition().one_launch == OneLaunch(
        RGDRKernel, ("scale", "seq_lens_style", "use_qk_l2norm_in_kernel"))


def test_a_forward_that_converts_a_param_or_computes_keeps_the_general_path():
    assert MoETopKRoutingFwdOp.definition().one_launch is None  # to_torch(self.ids_dtype)


def test_sum_and_softmax_pass_their_dtype_by_name_and_are_one_launch():
    """Their kernels take the dtype param as the name it is kept as, so the call skips forward (a CPU call of
    a small sum paid two to three more Python frames before)."""
    from tileops_core.ops.reduction import SoftmaxFwdOp

    assert SumFwdOp.definition().one_launch.params == ("dim", "keepdim", "dtype")
    assert SoftmaxFwdOp.definition().one_launch.params == ("dim", "dtype")


def test_an_op_that_stores_a_param_in_the_form_its_kernel_takes_is_one_launch():
    """QKNormRopeFwdOp keeps ``mrope_section`` as a tuple from construction (a list passed in included), so
    its forward passes every param as it is."""
    assert QKNormRopeFwdOp.definition().one_launch.params[-1] == "mrope_section"
    assert QKNormRopeFwdOp(rotary_dim=64, mrope_section=[11, 11, 10]).mrope_section == (11, 11, 10)


@pytest.fixture
def seen(fake_backend) -> list:
    """What a ``writes_outputs`` RMSNorm kernel (doubling x) was given: (normalized_shape, eps) per call."""
    calls: list = []

    def into(x, weight, normalized_shape, eps, out=None):
        calls.append((tuple(normalized_shape), eps))
        out.copy_(x * 2)

    fake_backend.kernel(RMSNormKernel, into, general=False, writes_outputs=True)
    return calls


def test_a_writes_outputs_kernel_is_called_directly_with_what_forward_would_pass(seen, monkeypatch):
    op = RMSNormFwdOp(normalized_shape=[8], eps=1e-3)
    monkeypatch.setattr(RMSNormFwdOp, "forward", lambda self, *a: pytest.fail("forward ran"))
    x = torch.randn(3, 8)
    y = op(x, None)
    assert op.last_plan.bound[None].direct is not None
    assert torch.equal(y, x * 2) and seen == [((8,), 1e-3)]


def test_the_direct_call_passes_the_params_the_op_was_made_with(seen):
    """A param cannot change after construction (an assignment is refused: it would bypass the checks and
    the compiled path's values), so forward's ``self.eps`` and the direct call's agree on every call."""
    op = RMSNormFwdOp(normalized_shape=[8], eps=1e-3)
    x = torch.randn(3, 8)
    op(x, None)
    with pytest.raises(AttributeError, match="set at construction only"):
        op.eps = 1e-2
    op(x, None)
    assert [eps for _, eps in seen] == [1e-3, 1e-3]


def test_a_kernel_raising_on_the_direct_call_is_named_with_its_backend_and_call_spec(fake_backend):
    def broken(x, weight, normalized_shape, eps, out=None):
        raise ZeroDivisionError("tile size 0")

    impl = fake_backend.kernel(RMSNormKernel, broken, general=False, writes_outputs=True)
    op = RMSNormFwdOp(normalized_shape=[8])
    with pytest.raises(KernelError) as info:
        op(torch.randn(2, 8), None)
    assert str(info.value).startswith(f"RMSNormFwdOp: kernel {impl.qualname()} [fake] raised ZeroDivisionError: "
                                      "tile size 0\n  call spec: CallSpec(RMSNormFwdOp.RMSNormKernel on cpu/cpu")
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_a_kernel_returning_its_result_is_called_directly_and_its_result_goes_through_step_7(fake_backend):
    fake_backend.kernel(RMSNormKernel, lambda x, weight, normalized_shape, eps: x, general=False)
    op = RMSNormFwdOp(normalized_shape=[8])
    with pytest.raises(CheckError, match="RMSNormFwdOp: output output shares storage with an input"):
        op(torch.randn(2, 8), None)
    assert op.last_plan.bound[None].direct is not None
    with pytest.raises(CheckError, match="RMSNormFwdOp: output output shares storage with an input"):
        op(torch.randn(2, 8), None)  # the direct call: the same step 7


def test_a_kernel_returning_a_right_result_returns_it_from_the_direct_call(fake_backend):
    got = []
    fake_backend.kernel(RMSNormKernel, lambda x, weight, normalized_shape, eps: got.append(eps) or x * 2,
                        general=False)
    op = RMSNormFwdOp(normalized_shape=[8], eps=1e-3)
    x = torch.randn(2, 8)
    op(x, None)
    assert op.last_plan.bound[None].direct is not None
    assert torch.equal(op(x, None), x * 2) and got == [1e-3, 1e-3]


def test_an_argument_that_requires_grad_takes_the_direct_call_only_under_no_grad(seen):
    """A model's weights are parameters: inference calls them under no_grad, and those calls go
    straight to the kernel; with grad mode on, forward runs under no_grad (no output requires grad)."""
    op = RMSNormFwdOp(normalized_shape=[8])
    x = torch.randn(3, 8, requires_grad=True)
    op(x, None)
    bound = op.last_plan.bound[None]
    assert bound.direct is not None
    direct_calls: list = []
    direct = bound.direct
    bound.direct = lambda values, o: direct_calls.append(values) or direct(values, o)
    y = op(x, None)
    assert direct_calls == [] and not y.requires_grad and torch.equal(y, x.detach() * 2)
    with torch.no_grad():
        z = op(x, None)
    assert len(direct_calls) == 1 and not z.requires_grad and torch.equal(z, x.detach() * 2)


def test_capturing_the_launch_of_a_direct_call_records_what_forward_passes(seen):
    op = RMSNormFwdOp(normalized_shape=[8], eps=1e-3)
    x = torch.randn(3, 8)
    op(x, None)
    launches = capture_launches(op, (x, None))
    assert len(launches) == 1 and launches[0].args[0] is x and launches[0].args[3] == 1e-3
    assert op.last_plan.bound[None].direct is not None  # put back after the capture


def _reordered(self, x, weight=None):
    return self.launch(RMSNormKernel, weight, x, self.normalized_shape, self.eps)


def _by_keyword(self, x, weight=None):
    return self.launch(RMSNormKernel, x, weight, self.normalized_shape, eps=self.eps)


def _two_statements(self, x, weight=None):
    x = x.contiguous()
    return self.launch(RMSNormKernel, x, weight, self.normalized_shape, self.eps)


def _not_a_param(self, x, weight=None):
    return self.launch(RMSNormKernel, x, weight, self.normalized_shape, self.tolerance)


def _renamed(self, input, weight=None):
    return self.launch(RMSNormKernel, input, weight, self.normalized_shape, self.eps)


def _decorated(fn):
    return fn


@_decorated
def _wrapped(self, x, weight=None):
    return self.launch(RMSNormKernel, x, weight, self.normalized_shape, self.eps)


def _as_written(self, x, weight=None):
    """A docstring is not a statement that does anything."""
    return self.launch(RMSNormKernel, x, weight, self.normalized_shape, self.eps)


@pytest.mark.parametrize("forward", [_reordered, _by_keyword, _two_statements, _not_a_param, _renamed, _wrapped])
def test_a_forward_that_is_not_exactly_one_launch_of_its_arguments_is_not_read_as_one(forward):
    d = RMSNormFwdOp.definition()
    assert one_launch_of(forward, d.arg_names, d.interfaces, frozenset({"normalized_shape", "eps"})) is None


def test_the_interface_is_resolved_where_forward_resolves_it():
    d = RMSNormFwdOp.definition()
    names = frozenset({"normalized_shape", "eps"})
    assert one_launch_of(_as_written, d.arg_names, d.interfaces, names) == OneLaunch(RMSNormKernel, ("normalized_shape",
                                                                                                    "eps"))
    assert one_launch_of(_as_written, d.arg_names, (SiluAndMulKernel,), names) is None  # not one of the op's


def test_a_kernel_returning_its_result_finds_the_call_it_serves_recorded_on_the_direct_call(fake_backend):
    seen = []
    fake_backend.kernel(RMSNormKernel, lambda x, weight, normalized_shape, eps: seen.append(current_call()[0]) or x * 2,
                        general=False)
    op = RMSNormFwdOp(normalized_shape=[8])
    x = torch.randn(2, 8)
    op(x, None)
    op(x, None)
    assert op.last_plan.bound[None].direct is not None and seen == [op, op]


def _unrecorded(x, weight, normalized_shape, eps):
    with pytest.raises(RuntimeError, match=r"only valid inside an op's forward\(\)"):
        current_call()
    return x * 2


def test_a_kernel_declaring_it_never_reads_the_current_call_runs_with_none_recorded(fake_backend):
    """``reads_current_call = False`` (the CPU references): the direct call records nothing for it."""
    fake_backend.kernel(RMSNormKernel, _unrecorded, general=False, reads_current_call=False)
    op = RMSNormFwdOp(normalized_shape=[8])
    x = torch.randn(2, 8)
    assert torch.equal(op(x, None), x * 2) and torch.equal(op(x, None), x * 2)
    assert op.last_plan.bound[None].direct is not None


def test_an_op_called_inside_a_kernel_that_records_nothing_records_its_own_call_and_clears_it(fake_backend):
    inner = SiluAndMulFwdOp()
    served = []
    fake_backend.kernel(SiluAndMulKernel, lambda x: served.append(current_call()[0]) or x[..., :4] * 2, general=False)

    def outer(x, weight, normalized_shape, eps):
        y = inner(x)
        return _unrecorded(x, weight, normalized_shape, eps) + y.repeat(1, 2)

    fake_backend.kernel(RMSNormKernel, outer, general=False, reads_current_call=False)
    x = torch.randn(2, 8)
    assert torch.equal(RMSNormFwdOp(normalized_shape=[8])(x, None), x * 2 + (x[..., :4] * 2).repeat(1, 2))
    assert served == [inner]
    with pytest.raises(RuntimeError, match=r"only valid inside an op's forward\(\)"):
        current_call()


def test_an_op_whose_class_defines_a_param_reads_it_on_every_call(fake_backend):
    """A param the op's class itself defines (here a property) is not fixed at construction: the
    direct call, which passes the params read when its kernel is bound, is not made for such an
    op, and forward reads the param on every call."""
    got = []
    fake_backend.kernel(RMSNormKernel, lambda x, weight, normalized_shape, eps: got.append(eps) or x * 2, general=False)

    class RMSNormFwdOp(CatalogueRMSNormFwdOp):
        eps_now = 1e-3
        eps = property(lambda self: self.eps_now)

    op = RMSNormFwdOp(normalized_shape=[8], eps=1e-3)
    x = torch.randn(2, 8)
    op(x, None)
    op.eps_now = 1e-2
    op(x, None)
    assert got == [1e-3, 1e-2] and op.last_plan.bound[None].direct is None


def test_the_source_read_of_every_catalogue_forward_is_what_inspect_reads():
    """``_source_of`` slices a forward's lines by its code positions instead of tokenising like
    ``inspect.getsource``; both must give the same function, multi-line launches included."""
    import ast
    import importlib
    import inspect
    import pkgutil
    import textwrap

    import tileops_core.ops
    from tileops_core.op.base import Op
    from tileops_core.op.one_launch import _source_of

    for info in pkgutil.iter_modules(tileops_core.ops.__path__):
        importlib.import_module(f"tileops_core.ops.{info.name}")

    def forwards(cls):
        for sub in cls.__subclasses__():
            if "forward" in sub.__dict__ and sub.__module__.startswith("tileops_core.ops."):
                yield sub.__dict__["forward"]
            yield from forwards(sub)

    found = list(dict.fromkeys(forwards(Op)))
    assert len(found) >= 20
    multi_line = 0
    for forward in found:
        mine, theirs = (ast.dump(ast.parse(textwrap.dedent(src))) for src in (_source_of(forward),
                                                                              inspect.getsource(forward)))
        assert mine == theirs, forward.__qualname__
        multi_line += _source_of(forward).count("\n") > 3
    assert multi_line  # a launch over several lines is among them
