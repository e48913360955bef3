"""The TileLang RGDR kernel under fuzzed metadata (issue 19), through the op on the GPU.

The metadata strategy and tensors are the CPU test's (``tests/test_rgdr_metadata_fuzz.py``),
at head sizes the TileLang kernel serves. With contents checks off the kernel may compute
anything for garbage, but it writes every output element and leaves every slot no index
names bit-identical; or the call fails before writing. Unwritten output is found by running
each case twice with the caching allocator's block for the output filled first with NaN and
then with 7.0: an element the kernel never writes keeps the fill, so the runs differ.
"""

from __future__ import annotations

import pathlib
import sys

import pytest
from hypothesis import given, settings

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests"))
from test_rgdr_metadata_fuzz import rgdr_metadata, rgdr_tensors, unnamed_slots  # noqa: E402

DIMS = (2, 4, 128, 32)  # NK, NV, DK, DV: a shape the TileLang kernel serves


@settings(max_examples=60, deadline=None)
@given(m=rgdr_metadata())
def test_unchecked_garbage_metadata_writes_every_output_element_and_no_unnamed_slot_on_the_gpu(m, cuda_device):
    import torch

    from tileops_core import TileOpsError
    from tileops_core.ops.linear_attention import RecurrentGatedDeltaRuleFwdOp

    device = cuda_device[0]
    args = rgdr_tensors(m, DIMS, torch.bfloat16, device)
    before = args["state"].clone()
    op = RecurrentGatedDeltaRuleFwdOp(seq_lens_style=m["style"], check_contents=False)
    runs = []
    for fill in (float("nan"), 7.0):
        state = before.clone()
        junk = torch.full(args["value"].shape, fill, dtype=args["value"].dtype, device=device)
        del junk  # the output's allocation reuses this block
        try:
            out = op(**{**args, "state": state})
            torch.cuda.synchronize()
        except TileOpsError:
            assert torch.equal(state.view(torch.uint8), before.view(torch.uint8)), "failed after writing"
            return
        runs.append((out.clone(), state))
    (out_a, state_a), (out_b, state_b) = runs
    assert not torch.isnan(out_a).any() and torch.equal(out_a, out_b), "an output element was left unwritten"
    keep = torch.as_tensor(unnamed_slots(m), device=device)
    assert torch.equal(state_a[keep].view(torch.uint8), before[keep].view(torch.uint8))
    plan = op.last_plan
    assert plan is not None
    served = [impl.qualname() for bound in plan.bound.values() for impl in bound.kernels.values()]
    assert any(name.endswith(":TileLangRGDR") for name in served), served  # not the reference
