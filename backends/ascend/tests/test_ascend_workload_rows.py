"""The CPU schedule model on the RGDR workload rows of the manifest that a 310P can take.

Each row is instantiated with fresh random inputs (``tileops_core.bench.workloads``), its
five fp16 tensors cast to fp16 (the rows are written for CUDA: bf16 inputs, fp32 or bf16
states), and run through the built kernel's launcher with the CPU stand-in binding, so
the launch-time checks, the tiling for the row's T, B and pool, the packed struct and the
schedule model all run; the result must match the float64 reference to fp16 tolerance.
Rows whose state pool is large run only with ``-m all_workloads``, like the catalogue.
"""

from __future__ import annotations

import pytest
import torch

from binding_stand_in import SEED_INPUT_ORDER, STAND_IN, reference
from simulated_calls import SPEC, fresh_seed, instance, meta_instance, simulated_call
from tileops_ascend.kernel import AscendRGDR310P
from tileops_ascend.launcher import Rgdr310PLauncher
from tileops_ascend.platform import ASCEND_310P
from tileops_ascend.refusal import token_refusal_reason

OUT_TOL = dict(rtol=4e-3, atol=1e-3)
STATE_TOL = dict(rtol=2e-3, atol=1e-3)
#: Rows this test runs by default (small pools); the others need ``-m all_workloads``.
SMALL_ROWS = ("tiny-fp32", "tiny-fp16-scalar-gk", "qwen3.5-b1-t1-fp32state", "qwen3.5-b8-t2-bf16state")
#: What the 310P takes once the five tensors are fp16: every row but the one asking for in-kernel l2 norm.
ELIGIBLE = SMALL_ROWS + ("qwen3.5-b32-t4-mtp", "qwen3.5-b128-t1-fp32state", "qwen3.5-b128-t2-bf16state",
                         "qwen3.5-tp2-b256-t8-bf16state")


def _limits_refusal(label: str) -> str | None:
    """The call-spec refusal, then the launch-time token limit (contents are checked by the launcher itself)."""
    meta = meta_instance(label, fp16=True)
    reason = AscendRGDR310P.refusal(simulated_call(meta))
    return reason or token_refusal_reason(meta.indices["T"], meta.indices["B"])


def test_the_eligible_rows_are_exactly_those_the_310p_limits_let_through():
    reasons = {row.label: _limits_refusal(row.label) for row in SPEC.workloads}
    assert sorted(label for label, reason in reasons.items() if reason is None) == sorted(ELIGIBLE)
    assert reasons["tiny-gates-mtp"] == (
        "use_qk_l2norm_in_kernel=True: the 310P kernel has no q/k l2 normalisation (normalise before the call)"
    )


@pytest.mark.parametrize(
    "label", [pytest.param(label, marks=[] if label in SMALL_ROWS else [pytest.mark.all_workloads])
              for label in ELIGIBLE])
def test_the_schedule_model_matches_the_reference_on_the_row(label):
    seed = fresh_seed()
    inst = instance(label, seed=seed, fp16=True)
    case = {name: inst.inputs.get(name) for name in SEED_INPUT_ORDER}
    params = {"scale": None, "seq_lens_style": "lengths", "use_qk_l2norm_in_kernel": False, **inst.op_kwargs}
    want_out, want_state = reference(case, params["seq_lens_style"], scale=params["scale"])
    before = case["state"].clone()
    launcher = Rgdr310PLauncher(STAND_IN, lambda device: ASCEND_310P)
    out = launcher(*case.values(), params["scale"], params["seq_lens_style"], params["use_qk_l2norm_in_kernel"])
    where = f"{label} seed={seed}"
    torch.testing.assert_close(out.double(), want_out, **OUT_TOL, msg=lambda m: f"{where}: out: {m}")
    torch.testing.assert_close(case["state"], want_state, **STATE_TOL, msg=lambda m: f"{where}: state: {m}")
    untouched = torch.ones(before.shape[0], dtype=torch.bool)
    untouched[case["ssm_state_indices"].long()] = False
    assert untouched.any(), where
    assert torch.equal(case["state"][untouched], before[untouched]), f"{where}: a slot no token writes changed"
