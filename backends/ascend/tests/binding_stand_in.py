"""A CPU stand-in for the kernel package's binding, and the seed's input order, shared by the tests.

The stand-in is registered with the binding's exact schema (``BINDING_SCHEMA``) in a test
namespace. Its parameters are transcribed from the kernel entry of seed 003 §6.1 and
mapped onto ``KernelInputs`` by keyword; then the schedule model plays the kernel from the
packed tiling bytes it was handed. So a tensor passed in the wrong slot shows up in the
numbers, as it would on the NPU.
"""

from __future__ import annotations

import torch

from tileops_ascend.launch import BINDING_SCHEMA, KernelInputs
from tileops_ascend.schedule_model import run_schedule
from tileops_ascend.tiling_struct import RecurrentGatedDeltaRuleTilingData
from tileops_cpu_ref.rgdr import recurrent_gated_delta_rule

__all__ = ["SEED_INPUT_ORDER", "SEEN", "STAND_IN", "reference"]

# Seed 003 §2, the def.cpp inputs #0..#9.
SEED_INPUT_ORDER = (
    "query", "key", "value", "beta", "state", "actual_seq_lengths", "ssm_state_indices", "g", "gk",
    "num_accepted_tokens",
)

_LIB = torch.library.Library("tileops_ascend_test", "DEF")
_LIB.define(BINDING_SCHEMA)
#: What the last stand-in call received besides the tensors: the unpacked struct, block dim, workspace.
SEEN: dict = {}


def _stand_in(query, key, value, beta, state, cu_seqlens, ssm_state_indices, g, gk, num_accepted_tokens, tiling,
              block_dim, workspace_bytes):
    data = RecurrentGatedDeltaRuleTilingData.unpack(tiling.numpy().tobytes())
    SEEN.update(block_dim=block_dim, workspace_bytes=workspace_bytes, data=data)
    inputs = KernelInputs(
        query=query, key=key, value=value, beta=beta, state=state, actual_seq_lengths=cu_seqlens,
        ssm_state_indices=ssm_state_indices, g=g, gk=gk, num_accepted_tokens=num_accepted_tokens,
    )
    return run_schedule(inputs, data)


_LIB.impl("recurrent_gated_delta_rule", _stand_in, "CPU")
STAND_IN = torch.ops.tileops_ascend_test.recurrent_gated_delta_rule


def reference(case, seq_lens_style="lengths", scale=None):
    """The float64 reference on a copy of ``case``'s state: ``(out float64, state in its dtype)``."""
    state = case["state"].clone()
    out = torch.empty(case["value"].shape, dtype=torch.float64)
    recurrent_gated_delta_rule(
        case["query"], case["key"], case["value"], case["beta"], state, case["actual_seq_lengths"],
        case["ssm_state_indices"], case.get("g"), case.get("gk"), case.get("num_accepted_tokens"),
        scale=scale, seq_lens_style=seq_lens_style, compute_dtype=torch.float64, out=out,
    )
    return out, state
