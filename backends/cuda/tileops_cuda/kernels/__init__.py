"""The TileLang kernels, one module each; each has a build key, a ``*_refusal`` predicate
that names what it was not written for, and a ``build_*`` function (tilelang loads there).
"""

from . import (
    gated_rmsnorm, gdn_gating, gemm, group_norm, reduce_sum, rgdr, rmsnorm, silu_and_mul, softmax,
    zero_centred_rmsnorm,
)
from ._common import compile_many

__all__ = [
    "compile_many", "gated_rmsnorm", "gdn_gating", "gemm", "group_norm", "reduce_sum", "rgdr", "rmsnorm",
    "silu_and_mul", "softmax", "zero_centred_rmsnorm",
]
