"""Seed 000's seven call steps, each failing with its message on a crafted bad call.

The six worked examples of seed 001 are bound here to trivial in-test kernels (torch
functions registered under a fake backend); a few features the six do not use (an affine
axis, a DType index, a type family without a case) come from a small test-only spec.
Every message is asserted whole, ending with the ``file:line`` of the declaration that
failed (read from the loaded spec; ``test_manifest_load`` checks those lines against the
YAML text).
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from example_ops import (REFERENCE_KERNELS, BmmFwdOp, BmmKernel, GemmFwdOp, GemmKernel, GroupNormFwdOp,
                         GroupNormKernel, ReciprocalFwdOp, ReciprocalKernel, RMSNormFwdOp, RMSNormKernel,
                         SSDDecodeFwdOp, SSDDecodeKernel, at, failure, probe_specs, rand, recording, ssd_args)
from tileops_core.errors import CheckError, SelectionError
from tileops_core.kernels import KernelInterface
from tileops_core.op import Op

# -- the six examples (example_ops), with kernels that record that they ran ---------------------------

RUNS: list[str] = []

LABELS = {BmmKernel: "bmm", GemmKernel: "gemm", RMSNormKernel: "rms", GroupNormKernel: "gn",
          SSDDecodeKernel: "ssd", ReciprocalKernel: "reciprocal"}

KERNELS = {interface: recording(RUNS, LABELS[interface], fn) for interface, fn in REFERENCE_KERNELS.items()}


@pytest.fixture(autouse=True)
def kernels(fake_backend):
    for interface, fn in KERNELS.items():
        fake_backend.kernel(interface, fn)
    RUNS.clear()
    yield


# -- the test-only spec: features the six examples do not use ---------------------------------------

PROBES = probe_specs(
    ProbeAffineFwdOp="""
    inputs:
      x: {dtype: "float32 | float16", shape: "[M, 2 * N]"}
    outputs:
      y: {dtype: "same_as(x)", shape: "[M, N]"}
""",
    ProbeDTypeIndexFwdOp="""
    inputs:
      x: {dtype: T, shape: "[*S]"}
      y: {dtype: T, shape: "[*S]"}
      w: {dtype: float64, shape: "[*S]", optional: true}
    outputs:
      z: {dtype: "float64 if present(w) else T", shape: "[*S]"}
""",
    ProbeFamilyFwdOp="""
    inputs:
      x:
        dtype: float32
        shape: {match: layout, cases: {nlc: "[B, L, C]", ncl: "[B, C, L]"}}
    outputs:
      y: {dtype: float32, shape: "[B, C]"}
    params:
      layout: {type: '"nlc" | "ncl" | "lnc"', default: nlc}
""")


class ProbeKernel(KernelInterface):
    op = "ProbeAffineFwdOp"


class ProbeAffineFwdOp(Op):
    interfaces = (ProbeKernel,)

    def forward(self, x):
        return self.launch(ProbeKernel, x)


class ProbeDTypeIndexKernel(KernelInterface):
    op = "ProbeDTypeIndexFwdOp"


class ProbeDTypeIndexFwdOp(Op):
    interfaces = (ProbeDTypeIndexKernel,)

    def forward(self, x, y, w=None):
        return self.launch(ProbeDTypeIndexKernel, x, y, w)


class ProbeFamilyKernel(KernelInterface):
    op = "ProbeFamilyFwdOp"


class ProbeFamilyFwdOp(Op):
    interfaces = (ProbeFamilyKernel,)

    def __init__(self, layout="nlc"):
        super().__init__(layout=layout)

    def forward(self, x):
        return self.launch(ProbeFamilyKernel, x, self.layout)


@pytest.fixture
def probes(extra_manifest, fake_backend):
    extra_manifest(PROBES)
    fake_backend.kernel(ProbeKernel, lambda x: x[:, : x.shape[1] // 2] * 2)
    fake_backend.kernel(ProbeDTypeIndexKernel, lambda x, y, w: x + y if w is None else (x + y).double() + w)
    fake_backend.kernel(ProbeFamilyKernel, lambda x, layout: x.sum(1 if layout == "nlc" else 2))


# -- step 1: which call-time tensors are present -----------------------------------------------------

def test_required_input_omitted_names_its_declaration():
    op = RMSNormFwdOp([16])
    assert failure(lambda: op()) == "RMSNormFwdOp: input x is required but was not given" + at(op.op_spec().inputs["x"])


def test_required_input_passed_as_none_is_the_same_as_omitted():
    op = RMSNormFwdOp([16])
    assert failure(lambda: op(None, rand(16))) == failure(lambda: op(weight=rand(16)))


def test_input_that_is_not_a_tensor_is_named():
    op = RMSNormFwdOp([4])
    assert failure(lambda: op([1.0, 2.0, 3.0, 4.0])) == \
        "RMSNormFwdOp: input x must be a tensor, got list" + at(op.op_spec().inputs["x"])


def test_unexpected_keyword_argument_lists_the_forward_arguments():
    op = RMSNormFwdOp([16])
    assert failure(lambda: op(rand(2, 16), bias=rand(16))) == \
        f"RMSNormFwdOp: unexpected argument 'bias' (forward takes x, weight) ({op.op_spec().location.where()})"


def test_too_many_positional_arguments():
    op = RMSNormFwdOp([16])
    x = rand(2, 16)
    assert failure(lambda: op(x, rand(16), rand(16))) == \
        f"RMSNormFwdOp: takes at most 2 tensor arguments (x, weight), got 3 ({op.op_spec().location.where()})"


def test_argument_given_by_position_and_keyword():
    op = RMSNormFwdOp([16])
    x = rand(2, 16)
    assert failure(lambda: op(x, x=x)) == f"RMSNormFwdOp: argument 'x' given twice ({op.op_spec().location.where()})"


# -- step 2: the domain restriction ---------------------------------------------------------------

def test_weight_without_bias_breaks_the_domain_restriction():
    op = GroupNormFwdOp(2)
    spec = op.op_spec()
    assert failure(lambda: op(rand(2, 4, 3), rand(4))) == (
        "GroupNormFwdOp: requires present(weight) == present(bias): not satisfied with bias absent, weight present"
        + at(spec.requires[0]))


def test_bias_without_weight_breaks_the_domain_restriction():
    op = GroupNormFwdOp(2)
    assert failure(lambda: op(rand(2, 4, 3), bias=rand(4))) == (
        "GroupNormFwdOp: requires present(weight) == present(bias): not satisfied with bias present, weight absent"
        + at(op.op_spec().requires[0]))


def test_presence_is_checked_before_the_domain_restriction():
    op = GroupNormFwdOp(2)
    assert failure(lambda: op(None, rand(4))) == "GroupNormFwdOp: input x is required but was not given" \
        + at(op.op_spec().inputs["x"])


def test_domain_restriction_is_checked_before_shapes_and_dtypes():
    op = GroupNormFwdOp(2)
    message = failure(lambda: op(rand(2, 5, 3, dtype=torch.int32), rand(4)))
    assert message.startswith("GroupNormFwdOp: requires present(weight) == present(bias)")


# -- step 3: the type-family branch ---------------------------------------------------------------

@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_gemm_flags_choose_which_axes_are_m_n_and_k(trans_a, trans_b):
    m, n, k = (random.randint(1, 6) for _ in range(3))
    a = rand(k, m) if trans_a else rand(m, k)
    b = rand(n, k) if trans_b else rand(k, n)
    d = GemmFwdOp(trans_a, trans_b)(a, b)
    assert d.shape == (m, n)
    torch.testing.assert_close(d, (a.T if trans_a else a) @ (b.T if trans_b else b))


def test_gemm_branch_decides_which_declaration_a_mismatch_names():
    op = GemmFwdOp(trans_a=False, trans_b=False)
    assert failure(lambda: op(rand(3, 4), rand(5, 4))) == (
        "GemmFwdOp: b shape [K, N] with K=5 does not match a shape [M, K] with K=4" + at(op.op_spec().inputs["b"]))


def test_family_value_without_a_case_names_the_family(probes):
    op = ProbeFamilyFwdOp(layout="lnc")
    family = op.op_spec().families["inputs.x.shape"]
    assert failure(lambda: op(rand(2, 3, 4))) == \
        "ProbeFamilyFwdOp: x: match layout = 'lnc' has no case (cases: 'nlc', 'ncl')" + at(family)


def test_family_case_in_force_binds_its_names(probes):
    x = rand(2, 3, 4)
    assert ProbeFamilyFwdOp(layout="nlc")(x).shape == (2, 4)
    assert ProbeFamilyFwdOp(layout="ncl")(x).shape == (2, 3)


# -- step 4: index inference and the remaining refinements --------------------------------------------

def test_shared_name_that_disagrees_between_inputs():
    op = BmmFwdOp()
    assert failure(lambda: op(rand(2, 3, 4), rand(3, 4, 5))) == (
        "BmmFwdOp: b shape [B, K, N] with B=3, K=4 does not match a shape [B, M, K] with B=2" + at(op.op_spec().inputs["b"]))


def test_rank_that_does_not_fit_the_declaration():
    op = BmmFwdOp()
    assert failure(lambda: op(rand(3, 4), rand(2, 4, 5))) == (
        "BmmFwdOp: a shape [3, 4] does not fit [B, M, K]: rank 3, got rank 2" + at(op.op_spec().inputs["a"]))


def test_dtype_outside_the_declared_set():
    op = BmmFwdOp()
    assert failure(lambda: op(rand(2, 3, 4, dtype=torch.int32), rand(2, 4, 5, dtype=torch.int32))) == (
        "BmmFwdOp: input a has dtype int32, expected float16 | bfloat16 | float32" + at(op.op_spec().inputs["a"]))


def test_same_as_dtype_that_differs():
    op = BmmFwdOp()
    assert failure(lambda: op(rand(2, 3, 4), rand(2, 4, 5, dtype=torch.float16))) == (
        "BmmFwdOp: input b has dtype float16, but same_as(a) is float32" + at(op.op_spec().inputs["b"]))


def test_refinement_over_inferred_indices():
    op = SSDDecodeFwdOp()
    assert failure(lambda: op(*ssd_args(h=4, g=3))) == (
        "SSDDecodeFwdOp: H % G == 0 does not hold with G=3, H=4" + at(op.op_spec().shape_rules[0]))


def test_refinement_over_an_index_and_a_param():
    op = GroupNormFwdOp(3)
    assert failure(lambda: op(rand(2, 4, 5))) == (
        "GroupNormFwdOp: C % num_groups == 0 does not hold with C=4, num_groups=3" + at(op.op_spec().shape_rules[1]))


def test_variadic_part_known_from_a_param_is_checked():
    op = RMSNormFwdOp([16])
    assert failure(lambda: op(rand(4, 8))) == (
        "RMSNormFwdOp: x shape [*S, *N] with N=(8,), S=(4,) does not match let N = normalized_shape with N=(16,)"
        + at(op.op_spec().inputs["x"]))


def test_optional_input_shape_is_checked_when_present():
    op = RMSNormFwdOp([16])
    assert failure(lambda: op(rand(4, 16), rand(8))) == (
        "RMSNormFwdOp: weight shape [*N] with N=(8,) does not match let N = normalized_shape with N=(16,)"
        + at(op.op_spec().inputs["weight"]))


def test_affine_axis_that_is_odd(probes):
    op = ProbeAffineFwdOp()
    assert failure(lambda: op(rand(3, 7))) == (
        "ProbeAffineFwdOp: x shape [3, 7] does not fit [M, 2 * N]: axis 1 is 7, so N = (7 - 0) / 2 is not divisible "
        "by 2" + at(op.op_spec().inputs["x"]))


def test_affine_axis_solves_the_output_shape(probes):
    m, n = random.randint(1, 5), random.randint(0, 5)
    assert ProbeAffineFwdOp()(rand(m, 2 * n)).shape == (m, n)


def test_dtype_index_binds_to_the_first_dtype_and_checks_the_rest(probes):
    op = ProbeDTypeIndexFwdOp()
    assert op(rand(3), rand(3)).dtype == torch.float32
    assert op(rand(3, dtype=torch.float16), rand(3, dtype=torch.float16)).dtype == torch.float16
    assert failure(lambda: op(rand(3, dtype=torch.bfloat16), rand(3))) == (
        "ProbeDTypeIndexFwdOp: input y has dtype float32, but T is bfloat16" + at(op.op_spec().inputs["y"]))


def test_conditional_output_dtype_follows_the_presence_of_an_input(probes):
    op = ProbeDTypeIndexFwdOp()
    assert op(rand(3, dtype=torch.float16), rand(3, dtype=torch.float16), rand(3, dtype=torch.float64)).dtype \
        == torch.float64


def test_promoted_output_dtype_of_an_integer_input():
    out = ReciprocalFwdOp()(torch.randint(1, 9, (3, 4), dtype=torch.int32))
    assert out.dtype == torch.float32


def test_dtype_check_comes_before_the_shape_check():
    op = BmmFwdOp()
    assert failure(lambda: op(rand(2, 3, 4), rand(9, 9, 9, dtype=torch.float16))).startswith(
        "BmmFwdOp: input b has dtype float16")


# -- step 5: out-buffer preconditions ---------------------------------------------------------------

def test_out_buffer_with_the_wrong_shape():
    op = ReciprocalFwdOp()
    assert failure(lambda: op(rand(3, 4), out=torch.empty(3))) == (
        "ReciprocalFwdOp: out buffer out has shape [3], output output [*S] is [3, 4]" + at(op.op_spec().outputs["output"]))


def test_out_buffer_with_the_wrong_dtype_names_the_promotion():
    op = ReciprocalFwdOp()
    x = torch.randint(1, 9, (3, 4), dtype=torch.int64)
    assert failure(lambda: op(x, out=torch.empty(3, 4, dtype=torch.float16))) == (
        "ReciprocalFwdOp: out buffer out has dtype float16, output output promote_int_to_float(input) is float32"
        + at(op.op_spec().outputs["output"]))


def test_out_buffer_on_another_device():
    op = ReciprocalFwdOp()
    assert failure(lambda: op(rand(3, 4), out=torch.empty(3, 4, device="meta"))) == (
        "ReciprocalFwdOp: out buffer out is on meta, the call is on cpu" + at(op.op_spec().outputs["output"]))


def test_out_buffer_sharing_storage_with_the_input():
    op = ReciprocalFwdOp()
    x = rand(2, 3, 4)
    assert failure(lambda: op(x[0], out=x[1])) == (
        "ReciprocalFwdOp: out buffer out shares storage with an input" + at(op.op_spec().outputs["output"]))


def test_out_buffer_that_is_not_a_tensor():
    op = ReciprocalFwdOp()
    assert failure(lambda: op(rand(3), out=[0.0, 0.0, 0.0])) == (
        "ReciprocalFwdOp: out buffer out must be a tensor, got list" + at(op.op_spec().outputs["output"]))


# -- step 6: running the implementation ---------------------------------------------------------------

def test_no_kernel_runs_when_a_check_fails():
    with pytest.raises(CheckError):
        BmmFwdOp()(rand(2, 3, 4), rand(2, 5, 5))
    assert RUNS == []


def test_call_without_an_implementation_is_a_selection_error(fake_backend):
    class OrphanKernel(KernelInterface):
        op = "ReciprocalFwdOp"

    class ReciprocalFwdOp(Op):  # noqa: F811  (a second class for the same spec, with its own interface)
        interfaces = (OrphanKernel,)

        def forward(self, input, out=None):
            return self.launch(OrphanKernel, input, out)

    with pytest.raises(SelectionError) as info:
        ReciprocalFwdOp()(rand(3))
    assert str(info.value).startswith("ReciprocalFwdOp: no implementation can serve this call\n")


def test_valid_call_runs_its_kernel_once_and_returns_its_result():
    a, b = rand(2, 3, 4), rand(2, 4, 5)
    torch.testing.assert_close(BmmFwdOp()(a, b), torch.bmm(a, b))
    assert RUNS == ["bmm"]


def test_checks_that_passed_once_are_not_rerun_for_the_same_shapes(monkeypatch):
    op = BmmFwdOp()
    op(rand(2, 3, 4), rand(2, 4, 5))
    monkeypatch.setattr(type(op).definition().checks, "plan_call", lambda *a, **k: pytest.fail("planned again"))
    assert op(rand(2, 3, 4), rand(2, 4, 5)).shape == (2, 3, 5)


def test_new_shapes_are_checked_again():
    op = BmmFwdOp()
    op(rand(2, 3, 4), rand(2, 4, 5))
    assert failure(lambda: op(rand(2, 3, 4), rand(2, 3, 5))).startswith("BmmFwdOp: b shape [B, K, N]")


# -- optional inputs (seed 001 rules 1-10, as far as a call sees them) ------------------------------------

OPTIONAL_PROBE = probe_specs(
    ProbeOptionalFwdOp="""
    inputs:
      x: {dtype: float32, shape: "[M]"}
      w: {dtype: "same_as(x)", shape: "[W]", optional: true}
    outputs:
      y: {dtype: float32, shape: "[M]"}
    shape_rules:
      - "not present(w) or W == M"
      - "W > 0"
""")


class ProbeOptionalKernel(KernelInterface):
    op = "ProbeOptionalFwdOp"


class ProbeOptionalFwdOp(Op):
    interfaces = (ProbeOptionalKernel,)

    def forward(self, x, w=None):
        return self.launch(ProbeOptionalKernel, x, w)


@pytest.fixture
def optional_probe(extra_manifest, fake_backend):
    extra_manifest(OPTIONAL_PROBE, file="optional.yaml")
    fake_backend.kernel(ProbeOptionalKernel, lambda x, w: x * 2 if w is None else x * w)


def test_omitted_and_explicit_none_are_one_state_with_one_plan():
    op = RMSNormFwdOp([8])
    x = rand(3, 8)
    outs = [op(x), op(x, None), op(x, weight=None), op(weight=None, x=x)]
    assert all(torch.equal(o, outs[0]) for o in outs)
    assert len(op._plans) == 1


def test_presence_of_an_optional_input_enters_the_call_spec():
    op = RMSNormFwdOp([8])
    op(rand(3, 8))
    absent = op.last_plan.call_specs[RMSNormKernel]
    op(rand(3, 8), rand(8))
    present = op.last_plan.call_specs[RMSNormKernel]
    assert (absent.flags["has_weight"], present.flags["has_weight"]) == (False, True)
    assert absent != present


def test_absent_optional_input_binds_and_checks_nothing():
    x = rand(2, 6, 5)
    torch.testing.assert_close(GroupNormFwdOp(3)(x), F.group_norm(x, 3, None, None, 1e-5))


def test_both_halves_of_a_switch_present():
    x, w, b = rand(2, 6, 5), rand(6), rand(6)
    torch.testing.assert_close(GroupNormFwdOp(3)(x, w, b), F.group_norm(x, 3, w, b, 1e-5))


def test_output_arity_does_not_change_with_presence():
    op = GroupNormFwdOp(2)
    assert isinstance(op(rand(2, 4, 3)), torch.Tensor)
    assert isinstance(op(rand(2, 4, 3), rand(4), rand(4)), torch.Tensor)


def test_guarded_rule_on_an_optional_input_holds_when_it_is_absent(optional_probe):
    op = ProbeOptionalFwdOp()
    m = random.randint(1, 6)
    with pytest.raises(CheckError):  # the unguarded rule W > 0 has no W when w is absent
        op(rand(m))
    assert op(rand(m), rand(m)).shape == (m,)


def test_unguarded_rule_over_an_absent_input_names_the_rule(optional_probe):
    op = ProbeOptionalFwdOp()
    rule = op.op_spec().shape_rules[1]
    assert failure(lambda: op(rand(3))) == (
        "ProbeOptionalFwdOp: shape rule 'W > 0' refers to W, which has no value on this call (guard it with "
        "present(...))" + at(rule))


def test_guarded_rule_is_checked_when_the_input_is_present(optional_probe):
    op = ProbeOptionalFwdOp()
    assert failure(lambda: op(rand(3), rand(4))) == (
        "ProbeOptionalFwdOp: not present(w) or W == M does not hold with M=3, W=4, w=tensor[4]" + at(op.op_spec().shape_rules[0]))


def test_optional_output_is_not_in_the_spec_language(tmp_path):
    from tileops_core.spec.compile import compile_op

    raw = {"family": "t", "ref_api": "none", "status": "spec-only",
           "signature": {"inputs": {"x": {"dtype": "float32"}},
                         "outputs": {"y": {"dtype": "float32", "shape": "[]", "optional": True}}},
           "workloads": [], "roofline": {"flops": "1", "bytes": "1"}, "source": {}}
    spec = compile_op("ProbeFwdOp", raw, "probe.yaml", 1)
    assert [(p.location.field, p.message) for p in spec.problems] == [
        ("signature.outputs.y.optional", "Extra inputs are not permitted")]


def test_a_sparse_tensor_with_the_shape_of_a_cached_call_is_rejected_as_on_a_fresh_instance():
    x = rand(2, 3, 4)
    warm = BmmFwdOp()
    warm(x, rand(2, 4, 5))  # the dense call's plan is cached
    sparse = rand(2, 3, 4).to_sparse()
    with pytest.raises(CheckError) as fresh_error:
        BmmFwdOp()(sparse, rand(2, 4, 5))
    with pytest.raises(CheckError) as warm_error:
        warm(sparse, rand(2, 4, 5))
    assert str(warm_error.value) == str(fresh_error.value)
    assert "layout" in str(warm_error.value)
