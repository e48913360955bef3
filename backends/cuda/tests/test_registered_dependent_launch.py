"""The registered keys' programmatic dependent launch (``tileops_cuda.launch_policy``) over every spec row of
the ops a hybrid model's decode step calls, on the CPU: each call selects the same backend and class with the
launch as without it (the policy never turns a servable call into a refusal), and every build key that has
the field launches so on Hopper, but MoE routing's ``rounds`` program, which has no dependent form."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

pytest.importorskip("torch")

from tileops_core.kernels import CallSpec, select_kernel  # noqa: E402
from tileops_cuda.launch_policy import dependent_launches  # noqa: E402
from tileops_cuda.spec_rows import cuda_calls  # noqa: E402

#: The ops of a Qwen3-Next / Qwen3.5 decode step that the CUDA backend serves.
STEP_OPS = ("ZeroCentredRMSNormFwdOp", "FusedAddZeroCentredRMSNormFwdOp", "GatedRMSNormFwdOp", "GDNGatingFwdOp",
            "CausalConv1dUpdateFwdOp", "RecurrentGatedDeltaRuleFwdOp", "QKNormRopeFwdOp", "AttentionDecodeFwdOp",
            "SigmoidGateMulFwdOp", "MoETopKRoutingFwdOp", "MoEPermuteFwdOp", "MoEUnpermuteFwdOp",
            "MoEGroupedExpertsFwdOp", "MoESharedExpertFwdOp", "LinearFwdOp")


def _routing_past_a_warp(arch: str) -> CallSpec:
    """Routing that the candidates program cannot hold (E=1024 in float32): its key falls back to ``rounds``."""
    return CallSpec("MoETopKRoutingFwdOp", "moe_topk_routing", "cuda", arch,
                    {"router_logits": "float32", "topk_weights": "float32", "topk_ids": "int64"},
                    {"T": 4096, "E": 1024, "top_k": 8}, {"renormalize": True})


def _served(interface: Any, call: CallSpec) -> tuple[Any, Any]:
    """The class chosen for ``call`` and its build key (None for a class of no TileLang key)."""
    chosen = select_kernel(interface, call).chosen
    return chosen, chosen.entry_for(call).build_key[1] if hasattr(chosen, "program_key") else None


def _selections(arch: str) -> list[tuple[str, str, Any, Any]]:
    """``(op, row label, chosen class, build key or None)`` of every call of every row of ``STEP_OPS``,
    and of routing past a warp."""
    from tileops_core.ops.moe import MoETopKRoutingKernel

    found = [(name, label, *_served(interface, call)) for name, label, interface, call in cuda_calls(STEP_OPS, arch)]
    # after the rows: planning them loaded the plugins
    return found + [("MoETopKRoutingFwdOp", "E=1024 float32", *_served(MoETopKRoutingKernel, _routing_past_a_warp(arch)))]


def _dependent_fields(key: Any) -> list[bool]:
    """The ``dependent_launch`` values in ``key`` and its nested tilings."""
    if not dataclasses.is_dataclass(key) or isinstance(key, type):
        return []
    values = [key.dependent_launch] if hasattr(key, "dependent_launch") else []
    for f in dataclasses.fields(key):
        values += _dependent_fields(getattr(key, f.name))
    return values


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_the_dependent_launch_never_changes_which_kernel_serves_a_call(arch):
    with dependent_launches(False):
        plain = [(op, label, chosen) for op, label, chosen, _ in _selections(arch)]
    registered = [(op, label, chosen) for op, label, chosen, _ in _selections(arch)]
    assert registered == plain
    assert any(chosen.__module__.startswith("tileops_cuda") for _, _, chosen in registered)
    assert registered[-1][2].__module__.startswith("tileops_cuda")  # routing's rounds program serves it


def test_every_registered_key_with_the_field_launches_as_a_dependent_on_hopper():
    plain = []
    for op, label, _, key in _selections("sm_90a"):
        fields = _dependent_fields(key)
        if fields and not all(fields) and getattr(key, "program", None) != "rounds":
            plain.append(f"{op} {label}: {key}")
    assert plain == []
    assert sum(bool(_dependent_fields(key)) for *_, key in _selections("sm_90a")) >= len(STEP_OPS) - 2
