"""The CUDA backend's launch glue without a GPU: every build function ``registered`` and
``registered_model`` call, replaced by one whose compiled functions are a stand-in.

Why: a launcher is host code around compiled functions (views, workspaces, the schedule, the
launch order). Run with the compiled functions stood in for, it can be checked against its
interface (``tests/test_cuda_launch_contract.py``, a stand-in that raises if called) and timed on
a CPU (``benchmarks/model_host_path.py``, a stand-in that does nothing), the same launchers the
GPU runs, nothing compiled. tilelang is never imported; torch loads with the launchers.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any, Callable, Iterator, cast

from . import registered, registered_model
from .kernels import attention_decode, attention_prefill, chunk_gdr, conv1d, moe_grouped_experts, moe_permute
from .kernels import linear, moe_shared_expert, moe_topk_routing, moe_unpermute, qk_norm_rope, rgdr, sigmoid_gate_mul
from .kernels import skinny_linear

__all__ = ["on_cpu", "stand_in_builds", "stood_in"]


def on_cpu(impl: type) -> type:
    """``impl`` declared for the CPU under its own name (block shapes are looked up by it), refusing
    nothing (its refusals name the GPU archs): what a host-time run registers in a fresh registry."""
    return type(impl.__name__, (impl,), {"devices": ("cpu",), "supported_archs": ("*",), "__module__": __name__,
                                         "refusal": classmethod(lambda cls, call: None)})


def stand_in_builds(compiled: Callable[..., Any], sm_count: int = 132) -> dict[str, Callable[..., Any]]:
    """Each build function's name, and a replacement returning what the build returns with every
    compiled function ``compiled`` (RGDR's schedule split for ``sm_count`` SMs)."""
    c = compiled

    def fn(key: Any) -> SimpleNamespace:
        return SimpleNamespace(fn=c)

    def rgdr_build(key: rgdr.RGDRBuildKey, schedule: rgdr.RGDRSchedule | None = None) -> SimpleNamespace:
        schedule = schedule or rgdr.default_schedule(key)
        return SimpleNamespace(run=rgdr._make_run(key, schedule, {t: c for t in schedule.tilings()}, sm_count))

    return {
        "build_rmsnorm": fn, "build_softmax": fn, "build_silu_and_mul": fn, "build_group_norm": fn,
        "build_gemm": fn, "build_zero_centred_rmsnorm": fn, "build_gated_rmsnorm": fn, "build_gdn_gating": fn,
        "build_linear_kernels": lambda key: linear.LinearPrograms(*(cast(Any, SimpleNamespace(fn=c)),) * 3,
                                                                  skinny_linear.rows_for(key)),
        "build_rgdr": rgdr_build,
        "build_conv_update": lambda key: SimpleNamespace(run=conv1d._make_update_run(key, c)),
        "build_qk_norm_rope": lambda key: SimpleNamespace(run=qk_norm_rope._make_run(key, c)),
        "build_sigmoid_gate_mul": lambda key: SimpleNamespace(run=sigmoid_gate_mul._make_run(key, c)),
        "build_moe_topk_routing": lambda key: SimpleNamespace(run=moe_topk_routing._make_run(key, c)),
        "build_moe_unpermute": lambda key: SimpleNamespace(run=moe_unpermute._make_run(key, c)),
        "build_moe_permute": lambda key: SimpleNamespace(run=moe_permute._make_run(
            key, c, c, c, c if key.one_launch_copies else None)),
        "build_moe_grouped_experts": lambda key: SimpleNamespace(run=moe_grouped_experts._make_run(
            key, (c,) * (6 if key.skinny_max_rows else 3), (c,) * 3)),  # the skinny programs follow the decode ones
        "build_moe_shared_expert": lambda key: SimpleNamespace(run=moe_shared_expert._make_run(key, (c,) * 3,
                                                                                               (c,) * 2)),
        "build_chunk_gdr": lambda key: SimpleNamespace(run=chunk_gdr._make_run(key, c, c, c, c)),
        "build_conv_varlen": lambda key: SimpleNamespace(run=conv1d._make_varlen_run(key, c)),
        "build_attention_decode": lambda key: SimpleNamespace(
            run=attention_decode._make_run(key, lambda block_size, schedule: c, lambda kind: c)),
        "build_attention_prefill": lambda key: SimpleNamespace(run=attention_prefill._make_run(key, c, c)),
    }


@contextlib.contextmanager
def stood_in(compiled: Callable[..., Any], sm_count: int = 132) -> Iterator[None]:
    """Within: every build function replaced (:func:`stand_in_builds`) where the classes that call
    it look it up; put back on exit."""
    saved = []
    try:
        for name, build in stand_in_builds(compiled, sm_count).items():
            module = registered if hasattr(registered, name) else registered_model
            saved.append((module, name, getattr(module, name)))
            setattr(module, name, build)
        yield
    finally:
        for module, name, build in reversed(saved):
            setattr(module, name, build)
