"""TileOPs for Hugging Face transformers: one call moves a Qwen3-Next / Qwen3.5 model onto TileOPs.

    from tileops_core.integrations.transformers import apply_tileops
    report = apply_tileops(model)      # in place; model.generate() works unchanged
    print(report)                      # which module went to which op, which kernel serves it
    build_kernels(report.kernel_calls) # optional: compile the model's kernels now, in parallel
    session = static_decode_session(model, max_batch, max_len, capture="cuda_graph")  # decode in a CUDA graph

Needs ``pip install tileops[transformers]`` (transformers >= 5.17; CI tests 5.24).
"""

from __future__ import annotations

from ._apply import SUPPORTED_MODEL_TYPES, apply_tileops
from ._compat import cache_kwargs, cache_of
from ._report import Route, TileOpsReport
from ._serving import build_kernels
from ._static_session import StaticDecodeSession, static_decode_session

__all__ = ["SUPPORTED_MODEL_TYPES", "Route", "StaticDecodeSession", "TileOpsReport", "apply_tileops", "build_kernels",
           "cache_kwargs", "cache_of", "static_decode_session"]
