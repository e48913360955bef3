"""Step 7 (the output check), the empty-call rule, mutated inputs and ``out`` buffers.

Each test registers the one kernel it needs (a correct one, or one that breaks exactly the
property under test) for an in-test interface of a seed-001 example op; a small test-only
spec adds two outputs, an alias output and a contiguous output.
"""

from __future__ import annotations

import gc
import random
import weakref

import pytest
import torch
import torch.nn.functional as F

from example_ops import (REFERENCE_KERNELS, BmmFwdOp, BmmKernel, GroupNormFwdOp, GroupNormKernel, ReciprocalKernel,
                         RMSNormFwdOp, RMSNormKernel, SSDDecodeKernel, at, failure, probe_specs, rand,
                         reciprocal_reference, recording, ssd_args, ssd_reference)
from tileops_core.kernels import KernelInterface, launch_signature
from tileops_core.op import Op


class ContiguousSSDDecodeKernel(KernelInterface):
    op = "SSDDecodeFwdOp"
    needs_contiguous = True


class SSDDecodeFwdOp(Op):  # its own: a second interface, that needs contiguous tensors
    interfaces = (SSDDecodeKernel, ContiguousSSDDecodeKernel)

    def __init__(self, contiguous_kernel=False):
        super().__init__()
        self.kernel = ContiguousSSDDecodeKernel if contiguous_kernel else SSDDecodeKernel

    def forward(self, A, dt, x, B_in, C_in, state):
        return self.launch(self.kernel, A, dt, x, B_in, C_in, state)


class ReciprocalFwdOp(Op):  # its own: passes the out buffer to the kernel by keyword
    interfaces = (ReciprocalKernel,)

    def forward(self, input, out=None):
        return self.launch(ReciprocalKernel, input, out=out)


RUNS: list[str] = []

ssd = recording(RUNS, "ssd", ssd_reference)
reciprocal = recording(RUNS, "reciprocal", reciprocal_reference)
rms = recording(RUNS, "rms", REFERENCE_KERNELS[RMSNormKernel])
group_norm = recording(RUNS, "gn", REFERENCE_KERNELS[GroupNormKernel])
bmm = recording(RUNS, "bmm", REFERENCE_KERNELS[BmmKernel])


def by(interface):
    """How step 7's refusal ends: the kernel that produced the outputs (``use`` registers it under "fake")."""
    return f"\n  kernel: conftest:Test{interface.__name__} [fake]"


@pytest.fixture
def use(fake_backend):
    """``use(interface, fn)``: the kernel this test runs."""
    RUNS.clear()
    return fake_backend.kernel


# -- step 7: count, None-ness, shape, dtype, device, layout --------------------------------------------

def test_output_of_the_wrong_shape_names_the_output_declaration(use):
    use(BmmKernel, lambda a, b: torch.bmm(a, b)[:, :-1])
    op = BmmFwdOp()
    assert failure(lambda: op(rand(2, 3, 4), rand(2, 4, 5))) == (
        "BmmFwdOp: output d has shape [2, 2, 5], the spec gives [2, 3, 5]" + at(op.op_spec().outputs["d"])
        + by(BmmKernel))


def test_output_of_the_wrong_dtype(use):
    use(BmmKernel, lambda a, b: torch.bmm(a, b).double())
    op = BmmFwdOp()
    assert failure(lambda: op(rand(2, 3, 4), rand(2, 4, 5))) == (
        "BmmFwdOp: output d has dtype float64, the spec gives float32" + at(op.op_spec().outputs["d"]) + by(BmmKernel))


def test_output_on_another_device(use):
    use(BmmKernel, lambda a, b: torch.empty(2, 3, 5, device="meta"))
    op = BmmFwdOp()
    assert failure(lambda: op(rand(2, 3, 4), rand(2, 4, 5))) == (
        "BmmFwdOp: output d is on meta, the call is on cpu" + at(op.op_spec().outputs["d"]) + by(BmmKernel))


def test_output_with_a_sparse_layout(use):
    use(BmmKernel, lambda a, b: torch.bmm(a, b).to_sparse())
    op = BmmFwdOp()
    assert failure(lambda: op(rand(2, 3, 4), rand(2, 4, 5))) == (
        "BmmFwdOp: output d has layout torch.sparse_coo, expected strided" + at(op.op_spec().outputs["d"])
        + by(BmmKernel))


@pytest.mark.parametrize("result, shown", [(None, "NoneType"), ((torch.empty(2, 3, 5),), "tuple"), (3.0, "float")])
def test_output_that_is_not_a_tensor(use, result, shown):
    use(BmmKernel, lambda a, b: result)
    op = BmmFwdOp()
    assert failure(lambda: op(rand(2, 3, 4), rand(2, 4, 5))) == (
        f"BmmFwdOp: output d is {shown}, expected a tensor" + at(op.op_spec().outputs["d"]) + by(BmmKernel))


def test_output_is_checked_on_every_call_not_only_the_first(use):
    results = iter([lambda a, b: torch.bmm(a, b), lambda a, b: torch.bmm(a, b).half()])
    use(BmmKernel, lambda a, b: next(results)(a, b))
    op = BmmFwdOp()
    a, b = rand(2, 3, 4), rand(2, 4, 5)
    op(a, b)
    assert failure(lambda: op(a, b)).startswith("BmmFwdOp: output d has dtype float16")


def test_output_that_is_a_view_of_an_input_shares_storage(use):
    use(RMSNormKernel, lambda x, w, shape, eps: x.view_as(x))
    op = RMSNormFwdOp([8])
    assert failure(lambda: op(rand(4, 8))) == (
        "RMSNormFwdOp: output output shares storage with an input" + at(op.op_spec().outputs["output"])
        + by(RMSNormKernel))


@pytest.mark.parametrize("alias", [
    lambda x: x,
    lambda x: x.detach(),  # no _base, same data pointer
    lambda x: torch.empty(0).set_(x.untyped_storage(), 0, x.shape, x.stride()),  # no _base, no view relation at all
], ids=["itself", "detached", "set_to_its_storage"])
def test_output_sharing_the_input_storage_in_any_disguise_is_rejected(use, alias):
    use(ReciprocalKernel, lambda input, out=None: alias(input.reciprocal_()))
    op = ReciprocalFwdOp()
    assert failure(lambda: op(rand(3, 4))) == (
        "ReciprocalFwdOp: output output shares storage with an input" + at(op.op_spec().outputs["output"])
        + by(ReciprocalKernel))


def test_output_sharing_the_storage_of_the_weight_is_rejected(use):
    use(RMSNormKernel, lambda x, w, shape, eps: w.expand(x.shape))
    op = RMSNormFwdOp([8])
    assert failure(lambda: op(rand(4, 8), rand(8))).startswith("RMSNormFwdOp: output output shares storage with an input")


def test_fresh_output_passes_step_7(use):
    use(RMSNormKernel, rms)
    x, w = rand(4, 8), rand(8)
    torch.testing.assert_close(RMSNormFwdOp([8], eps=1e-6)(x, w), F.rms_norm(x, [8], w, 1e-6))


# -- out buffers: the very object, on every call ---------------------------------------------------

def test_out_buffer_is_returned_as_the_very_object_written(use):
    use(ReciprocalKernel, reciprocal)
    x, out = rand(3, 4), torch.empty(3, 4)
    assert ReciprocalFwdOp()(x, out=out) is out
    torch.testing.assert_close(out, 1 / x)


def test_out_buffer_given_by_position(use):
    use(ReciprocalKernel, reciprocal)
    x, out = torch.randint(1, 9, (5,)), torch.empty(5)
    assert ReciprocalFwdOp()(x, out) is out


def test_forward_taking_the_out_buffer_by_keyword_only_gets_it_by_keyword(use):
    use(ReciprocalKernel, reciprocal)

    class ReciprocalFwdOp(Op):  # noqa: F811  (forward(input, *, out=None))
        interfaces = (ReciprocalKernel,)

        def forward(self, input, *, out=None):
            return self.launch(ReciprocalKernel, input, out=out)

    x, out = rand(4), torch.empty(4)
    assert ReciprocalFwdOp()(x, out=out) is out
    torch.testing.assert_close(ReciprocalFwdOp()(x), 1 / x)


def test_kernel_that_returns_a_new_tensor_instead_of_the_out_buffer(use):
    use(ReciprocalKernel, lambda input, out=None: torch.reciprocal(input))
    op = ReciprocalFwdOp()
    assert failure(lambda: op(rand(3, 4), out=torch.empty(3, 4))) == (
        "ReciprocalFwdOp: output output must be the out buffer passed by the caller" + at(op.op_spec().outputs["output"])
        + by(ReciprocalKernel))


def test_out_buffer_sharing_storage_is_caught_on_a_call_with_known_shapes(use):
    use(ReciprocalKernel, reciprocal)
    op = ReciprocalFwdOp()
    x = rand(2, 3)
    op(x[0], out=torch.empty(3))  # the plan of this key exists now
    before = x.clone()
    assert failure(lambda: op(x[0], out=x[1])).startswith("ReciprocalFwdOp: out buffer out shares storage with an input")
    assert torch.equal(x, before)


def test_no_out_buffer_gives_a_fresh_output(use):
    use(ReciprocalKernel, reciprocal)
    x = rand(6)
    y = ReciprocalFwdOp()(x)
    assert y.untyped_storage()._cdata != x.untyped_storage()._cdata


# -- the empty-call rule -----------------------------------------------------------------------------

def test_empty_call_runs_no_kernel_and_returns_a_fresh_output_of_the_checked_shape_and_dtype(use):
    use(ReciprocalKernel, reciprocal)
    x = torch.randint(1, 9, (0, random.randint(1, 5)), dtype=torch.int16)
    y = ReciprocalFwdOp()(x)
    assert RUNS == []
    assert (y.shape, y.dtype, y.device) == (x.shape, torch.float32, torch.device("cpu"))


def test_empty_call_returns_the_out_buffer_untouched(use):
    use(ReciprocalKernel, reciprocal)
    out = torch.empty(4, 0)
    assert ReciprocalFwdOp()(rand(4, 0), out=out) is out
    assert RUNS == []


def test_empty_call_still_checks_the_out_buffer(use):
    use(ReciprocalKernel, reciprocal)
    op = ReciprocalFwdOp()
    assert failure(lambda: op(rand(4, 0), out=torch.empty(0, 4))) == (
        "ReciprocalFwdOp: out buffer out has shape [0, 4], output output [*S] is [4, 0]" + at(op.op_spec().outputs["output"]))


def test_empty_call_still_checks_the_inputs(use):
    use(BmmKernel, bmm)
    op = BmmFwdOp()
    assert failure(lambda: op(rand(0, 3, 4), rand(0, 5, 6))).startswith("BmmFwdOp: b shape [B, K, N]")


def test_empty_call_leaves_a_mutated_input_untouched_and_returns_only_the_outputs(use):
    use(SSDDecodeKernel, ssd)
    args = ssd_args(b=0)
    state = args[-1]
    y = SSDDecodeFwdOp()(*args)
    assert RUNS == [] and y.shape == (0, 4, 3) and y.dtype == torch.float32
    assert args[-1] is state and state.shape == (0, 4, 3, 5)


def test_call_whose_written_tensors_are_all_empty_runs_nothing_even_with_non_empty_inputs(use):
    use(SSDDecodeKernel, ssd)
    A, dt, x, B_in, C_in, state = ssd_args(p=0)
    assert A.numel() == 0 and B_in.numel() > 0
    assert SSDDecodeFwdOp()(A, dt, x, B_in, C_in, state).shape == (2, 4, 0)
    assert RUNS == []


def test_empty_inputs_with_a_non_empty_output_run_the_kernel(use):
    use(BmmKernel, bmm)
    d = BmmFwdOp()(rand(2, 3, 0), rand(2, 0, 5))
    assert RUNS == ["bmm"]
    torch.testing.assert_close(d, torch.zeros(2, 3, 5))


def test_empty_normalisation_input_runs_nothing(use):
    use(RMSNormKernel, rms)
    use(GroupNormKernel, group_norm)
    assert RMSNormFwdOp([8])(rand(0, 8)).shape == (0, 8)
    assert GroupNormFwdOp(2)(rand(3, 4, 0), rand(4), rand(4)).shape == (3, 4, 0)
    assert RUNS == []


# -- mutated inputs -------------------------------------------------------------------------------

def test_mutated_input_is_written_in_place_and_only_the_outputs_are_returned(use):
    use(SSDDecodeKernel, ssd)
    args = ssd_args()
    expected_state = args[-1].clone()
    expected_y = ssd(*args[:-1], expected_state)
    y = SSDDecodeFwdOp()(*args)
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, expected_y)
    torch.testing.assert_close(args[-1], expected_state)


@pytest.mark.parametrize("breakage, message", [
    (dict(g=3), "H % G == 0 does not hold"),
    (dict(p=2), "does not match"),
])
def test_mutated_input_is_untouched_when_a_check_fails(use, breakage, message):
    use(SSDDecodeKernel, ssd)
    args = list(ssd_args())
    if "g" in breakage:
        args[3], args[4] = rand(2, 3, 5, dtype=torch.float16), rand(2, 3, 5, dtype=torch.float16)
    else:
        args[1] = rand(2, 4, 2)
    before = args[-1].clone()
    assert message in failure(lambda: SSDDecodeFwdOp()(*args))
    assert torch.equal(args[-1], before) and RUNS == []


def test_mutated_input_of_the_wrong_dtype_is_untouched(use):
    use(SSDDecodeKernel, ssd)
    args = list(ssd_args())
    args[-1] = args[-1].double()
    before = args[-1].clone()
    assert failure(lambda: SSDDecodeFwdOp()(*args)).startswith("SSDDecodeFwdOp: input state has dtype float64")
    assert torch.equal(args[-1], before)


def test_non_contiguous_mutated_input_gets_the_result_copied_back(use):
    seen = []

    def kernel(*args):
        seen.append(args[-1].is_contiguous())
        return ssd(*args)

    use(ContiguousSSDDecodeKernel, kernel)
    A, dt, x, B_in, C_in, _ = ssd_args()
    state = rand(5, 3, 4, 2).permute(3, 2, 1, 0)  # [B, H, P, N], not contiguous
    expected = state.clone()
    expected_y = ssd(A, dt, x, B_in, C_in, expected)
    y = SSDDecodeFwdOp(contiguous_kernel=True)(A, dt, x, B_in, C_in, state)
    assert seen == [True] and not state.is_contiguous()
    torch.testing.assert_close(state, expected)
    torch.testing.assert_close(y, expected_y)


def test_catalogue_rmsnorm_kernels_receive_contiguous_x_and_weight(use):
    from tileops_core.ops import normalization

    seen = []

    def kernel(x, weight, normalized_shape, eps):
        seen.append((x.is_contiguous(), weight.is_contiguous()))
        return F.rms_norm(x, normalized_shape, weight, eps)

    use(normalization.RMSNormKernel, kernel)
    x, w = rand(6, 4).t(), rand(12)[::2]  # both strided views
    y = normalization.RMSNormFwdOp((6,), eps=1e-6)(x, w)
    assert seen == [(True, True)]
    torch.testing.assert_close(y, F.rms_norm(x, (6,), w, 1e-6))


# -- plans keep no tensor alive ----------------------------------------------------------------------

def test_a_cached_plan_keeps_no_reference_to_the_call_tensors(use):
    use(ReciprocalKernel, reciprocal)
    op = ReciprocalFwdOp()
    x = rand(64)
    ref = weakref.ref(x)
    op(x)
    del x
    gc.collect()
    assert ref() is None
    assert op.last_call_env["S"] == (64,) and op.last_call_env["input"].shape == (64,)


# -- two outputs, an alias output, a contiguous output (test-only spec) ---------------------------------

PROBES = probe_specs(
    ProbeOutputsFwdOp="""
    inputs:
      x: {dtype: float32, shape: "[M, N]", mutated: true}
    outputs:
      total: {dtype: float32, shape: "[M]", contiguous: true}
      x_out: {alias: x}
""")


class ProbeOutputsKernel(KernelInterface):
    op = "ProbeOutputsFwdOp"


class ProbeOutputsFwdOp(Op):
    interfaces = (ProbeOutputsKernel,)

    def forward(self, x):
        return self.launch(ProbeOutputsKernel, x)


@pytest.fixture
def probes(extra_manifest):
    extra_manifest(PROBES)


def test_alias_output_is_the_very_input(use, probes):
    use(ProbeOutputsKernel, lambda x: (x.sum(1), x.mul_(2)))
    x = rand(3, 4)
    expected = x.sum(1)
    total, x_out = ProbeOutputsFwdOp()(x)
    assert x_out is x
    torch.testing.assert_close(total, expected)


def test_alias_output_that_is_a_copy(use, probes):
    use(ProbeOutputsKernel, lambda x: (x.sum(1), x.clone()))
    op = ProbeOutputsFwdOp()
    assert failure(lambda: op(rand(3, 4))) == (
        "ProbeOutputsFwdOp: output x_out must be the very input it aliases" + at(op.op_spec().outputs["x_out"])
        + by(ProbeOutputsKernel))


@pytest.mark.parametrize("result, shown", [(None, "NoneType"), ((torch.empty(3),), "tuple")])
def test_wrong_number_of_outputs(use, probes, result, shown):
    use(ProbeOutputsKernel, lambda x: result)
    op = ProbeOutputsFwdOp()
    assert failure(lambda: op(rand(3, 4))) == (
        f"ProbeOutputsFwdOp: the implementation returned {shown}, expected 2 outputs (total, x_out) "
        f"({op.op_spec().location.where()})" + by(ProbeOutputsKernel))


def test_none_among_the_outputs(use, probes):
    use(ProbeOutputsKernel, lambda x: (None, x))
    op = ProbeOutputsFwdOp()
    assert failure(lambda: op(rand(3, 4))) == (
        "ProbeOutputsFwdOp: output total is NoneType, expected a tensor" + at(op.op_spec().outputs["total"])
        + by(ProbeOutputsKernel))


def test_output_declared_contiguous_must_be(use, probes):
    use(ProbeOutputsKernel, lambda x: (torch.empty(6)[::2], x))
    op = ProbeOutputsFwdOp()
    assert failure(lambda: op(rand(3, 4))) == (
        "ProbeOutputsFwdOp: output total must be contiguous" + at(op.op_spec().outputs["total"])
        + by(ProbeOutputsKernel))


@pytest.mark.parametrize("make_out, why", [
    (lambda: torch.empty(1, 4).expand(3, 4), "is expanded (stride 0 on an axis of size > 1): its elements overlap, "
                                             "strides [0, 1]; pass a buffer of its own memory"),
    (lambda: torch.empty(3, 4, requires_grad=True), "requires grad: torch writes no op's result into a tensor that "
                                                    "autograd tracks; pass one with requires_grad=False"),
])
def test_an_out_buffer_that_cannot_be_written_is_named_on_a_fresh_and_a_warm_call(use, make_out, why):
    use(ReciprocalKernel, reciprocal)
    op = ReciprocalFwdOp()
    op(rand(3, 4), out=torch.empty(3, 4))  # warm: the buffer's plan is cached
    expected = f"ReciprocalFwdOp: out buffer out {why}" + at(op.op_spec().outputs["output"])
    assert failure(lambda: op(rand(3, 4), out=make_out())) == expected
    assert failure(lambda: ReciprocalFwdOp()(rand(3, 4), out=make_out())) == expected


# -- step 7 on a warm call: one guard of the output's metadata, its storage by identity --------------------

def _right_then(wrong):
    """A Bmm kernel whose first call returns the right result and every later one ``wrong(result)``."""
    calls = []

    def kernel(a, b):
        calls.append(1)
        d = torch.bmm(a, b)
        return d if len(calls) == 1 else wrong(d)
    return kernel


@pytest.mark.parametrize("wrong, message", [
    (lambda d: d[:, :-1], "output d has shape [2, 2, 5], the spec gives [2, 3, 5]"),
    (lambda d: d[None], "output d has shape [1, 2, 3, 5], the spec gives [2, 3, 5]"),
    (lambda d: d.double(), "output d has dtype float64, the spec gives float32"),
    (lambda d: torch.empty(2, 3, 5, device="meta"), "output d is on meta, the call is on cpu"),
    (lambda d: d.to_sparse(), "output d has layout torch.sparse_coo, expected strided"),
    (lambda d: (d,), "output d is tuple, expected a tensor"),
], ids=["shape", "rank", "dtype", "device", "layout", "not_a_tensor"])
def test_a_warm_call_refuses_each_output_the_first_call_would_have(use, wrong, message):
    """A call whose plan and output guard exist (the first call made them) checks the output as fully."""
    use(BmmKernel, _right_then(wrong))
    op = BmmFwdOp()
    a, b = rand(2, 3, 4), rand(2, 4, 5)
    torch.testing.assert_close(op(a, b), torch.bmm(a, b))
    assert failure(lambda: op(a, b)) == f"BmmFwdOp: {message}" + at(op.op_spec().outputs["d"]) + by(BmmKernel)


def test_a_warm_call_accepts_an_output_of_any_strides_where_the_spec_asks_no_contiguity(use):
    use(BmmKernel, _right_then(lambda d: d.mT.contiguous().mT))
    op = BmmFwdOp()
    a, b = rand(2, 3, 4), rand(2, 4, 5)
    op(a, b)
    d = op(a, b)
    assert not d.is_contiguous()
    torch.testing.assert_close(d, torch.bmm(a, b))


class Tagged(torch.Tensor):
    """A tensor subclass a kernel may return: the output guard does not match it, the fields are read."""


def test_a_warm_call_accepts_a_tensor_subclass_and_still_checks_its_metadata(use):
    results = iter([lambda d: d.as_subclass(Tagged), lambda d: d.as_subclass(Tagged),
                    lambda d: d.double().as_subclass(Tagged)])
    use(BmmKernel, lambda a, b: next(results)(torch.bmm(a, b)))
    op = BmmFwdOp()
    a, b = rand(2, 3, 4), rand(2, 4, 5)
    assert type(op(a, b)) is Tagged and type(op(a, b)) is Tagged
    assert failure(lambda: op(a, b)).startswith("BmmFwdOp: output d has dtype float64")


def test_calls_in_and_out_of_inference_mode_have_their_outputs_checked_alike(use):
    """The output guard compares dispatch keys, which differ in inference mode: whichever state
    it was made in, a call in the other has its output checked as fully."""
    use(BmmKernel, _right_then(lambda d: d.double()))
    op = BmmFwdOp()
    a, b = rand(2, 3, 4), rand(2, 4, 5)
    torch.testing.assert_close(op(a, b), torch.bmm(a, b))
    with torch.inference_mode():
        assert failure(lambda: op(a, b)).startswith("BmmFwdOp: output d has dtype float64")
        assert failure(lambda: op(a.clone(), b.clone())).startswith("BmmFwdOp: output d has dtype float64")
    assert failure(lambda: op(a, b)).startswith("BmmFwdOp: output d has dtype float64")


def test_output_sharing_the_input_storage_without_overlapping_the_input_is_rejected(use):
    """The rule is one storage, not overlapping bytes: a result written to another part of the
    input's base shares its storage (a test of the input's own byte range would pass it)."""
    use(ReciprocalKernel, lambda input, out=None: input._base[1].copy_(input.reciprocal()))
    op = ReciprocalFwdOp()
    base = rand(2, 3, 4)
    assert failure(lambda: op(base[0])) == (
        "ReciprocalFwdOp: output output shares storage with an input" + at(op.op_spec().outputs["output"])
        + by(ReciprocalKernel))
    assert failure(lambda: op(base[0])) == (  # the warm call: the same step 7
        "ReciprocalFwdOp: output output shares storage with an input" + at(op.op_spec().outputs["output"])
        + by(ReciprocalKernel))


CONTIGUOUS_PROBE = probe_specs(
    ProbeContiguousOutputFwdOp="""
    inputs:
      x: {dtype: float32, shape: "[M, N]"}
    outputs:
      y: {dtype: float32, shape: "[N, M]", contiguous: true}
""")


class ProbeContiguousOutputKernel(KernelInterface):
    op = "ProbeContiguousOutputFwdOp"

    @launch_signature
    def launch(x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError  # a declaration


class ProbeContiguousOutputFwdOp(Op):
    interfaces = (ProbeContiguousOutputKernel,)

    def forward(self, x):
        return self.launch(ProbeContiguousOutputKernel, x)


def test_a_warm_call_refuses_a_strided_result_for_an_output_declared_contiguous(use, extra_manifest):
    extra_manifest(CONTIGUOUS_PROBE)
    results = iter([lambda x: x.t().contiguous(), lambda x: x.t().clone()])  # the second keeps x.t()'s strides
    use(ProbeContiguousOutputKernel, lambda x: next(results)(x))
    op = ProbeContiguousOutputFwdOp()
    x = rand(3, 4)
    torch.testing.assert_close(op(x), x.t())
    assert failure(lambda: op(x)) == (
        "ProbeContiguousOutputFwdOp: output y must be contiguous" + at(op.op_spec().outputs["y"])
        + by(ProbeContiguousOutputKernel))


TWO_FRESH_PROBE = probe_specs(
    ProbeTwoFreshFwdOp="""
    inputs:
      x: {dtype: float32, shape: "[M, N]"}
    outputs:
      total: {dtype: float32, shape: "[M]"}
      peak: {dtype: float32, shape: "[M]"}
""")


class ProbeTwoFreshKernel(KernelInterface):
    op = "ProbeTwoFreshFwdOp"

    @launch_signature
    def launch(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError  # a declaration


class ProbeTwoFreshFwdOp(Op):
    interfaces = (ProbeTwoFreshKernel,)

    def forward(self, x):
        return self.launch(ProbeTwoFreshKernel, x)


def _sums_then(wrong):
    """The probe's kernel: (row sums, row maxima) on the first call, ``wrong(x, sums, maxima)`` after."""
    calls = []

    def kernel(x):
        calls.append(1)
        total, peak = x.sum(1), x.amax(1)
        return (total, peak) if len(calls) == 1 else wrong(x, total, peak)
    return kernel


@pytest.mark.parametrize("wrong, message", [
    (lambda x, t, p: (t, p.double()), "output peak has dtype float64, the spec gives float32"),
    (lambda x, t, p: (t[:-1], p), "output total has shape [2], the spec gives [3]"),
    (lambda x, t, p: (t, p.to_sparse()), "output peak has layout torch.sparse_coo, expected strided"),
    (lambda x, t, p: (t, None), "output peak is NoneType, expected a tensor"),
    (lambda x, t, p: (t, x[:, 0]), "output peak shares storage with an input"),
    (lambda x, t, p: (t, x.new_empty(0).set_(x.untyped_storage(), 0, (3,), (1,))), "output peak shares storage with an input"),
    (lambda x, t, p: (t, p, p), "the implementation returned tuple, expected 2 outputs (total, peak)"),
], ids=["dtype", "shape", "layout", "none", "view_of_the_input", "set_to_its_storage", "count"])
def test_a_warm_call_with_two_fresh_outputs_refuses_each_output_the_first_call_would_have(use, extra_manifest, wrong,
                                                                                          message):
    extra_manifest(TWO_FRESH_PROBE)
    use(ProbeTwoFreshKernel, _sums_then(wrong))
    op = ProbeTwoFreshFwdOp()
    x = rand(3, 4)
    total, peak = op(x)
    torch.testing.assert_close(peak, x.amax(1))
    where = op.op_spec().location if message.startswith("the") else op.op_spec().outputs[message.split()[1]].loc
    assert failure(lambda: op(x)) == f"ProbeTwoFreshFwdOp: {message} ({where.where()})" + by(ProbeTwoFreshKernel)


def test_a_warm_call_with_two_fresh_outputs_accepts_them_as_a_list(use, extra_manifest):
    extra_manifest(TWO_FRESH_PROBE)
    use(ProbeTwoFreshKernel, _sums_then(lambda x, t, p: [t, p]))
    op = ProbeTwoFreshFwdOp()
    x = rand(3, 4)
    op(x)
    total, peak = op(x)
    torch.testing.assert_close(total, x.sum(1))
    torch.testing.assert_close(peak, x.amax(1))
