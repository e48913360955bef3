"""SigmoidGateMul as a TileLang kernel: ``output = attn · round(sigmoid(gate))``, rounded once.

HF's order (``attn_output * torch.sigmoid(gate)`` in the input dtype): the sigmoid in float32
(``1 / (1 + exp(-g))`` with the accurate ``expf``, torch's own formula), rounded to the input
dtype, then the product in float32, rounded. Pure streaming: each input element read once,
each output written once, 16-byte accesses. attn and gate are ``[M, N]`` strided rows
(``_row_views.row_view``), so a gate sliced out of q_proj's output is read in place.
Specialised on dtype and N; M and the row strides are dynamic.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass
from typing import Any

from ._common import ELEM_BYTES, arch_refusal, dependent_launch, dependent_launch_refusal
from ._launcher import RunLauncher, build_run_launcher

__all__ = ["SigmoidGateMulBuildKey", "build_sigmoid_gate_mul", "sigmoid_gate_mul_refusal"]

_DTYPES = ("float16", "bfloat16", "float32")
_NAME = "SigmoidGateMul TileLang kernel"


@dataclass(frozen=True)
class SigmoidGateMulBuildKey:
    """Build identity: dtype (attn, gate and output share it) and the row width N."""

    dtype: str
    width: int
    arch: str = "sm_90"
    #: Launched as a programmatic dependent of the stream's previous kernel (``_common.dependent_launch``:
    #: the same bits); the registered keys set it (``launch_policy``).
    dependent_launch: bool = False


def _vec(dtype: str) -> int:
    return 16 // ELEM_BYTES[dtype]


def _plan(key: SigmoidGateMulBuildKey) -> tuple[int, int]:
    """``(threads, columns per program)``: two 16-byte vectors of each input per thread on wide
    rows (four loads in flight), narrower programs for rows shorter than that."""
    vec = _vec(key.dtype)
    for threads, per in ((128, 2), (64, 2), (64, 1)):
        if key.width >= threads * vec * per:
            return threads, threads * vec * per
    return 64, 64 * vec


def sigmoid_gate_mul_refusal(key: SigmoidGateMulBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    reason = dependent_launch_refusal(key.dependent_launch, _NAME, key.arch, "drop dependent_launch")
    if reason is not None:
        return reason
    if key.dtype not in _DTYPES:
        return f"{_NAME}: dtype {key.dtype} is not one of {_DTYPES}; use the reference"
    if key.width % _vec(key.dtype):
        return f"{_NAME}: N={key.width} must be a multiple of {_vec(key.dtype)} (16-byte vectors); use the reference"
    return arch_refusal(_NAME, key.arch)


def _program(key: SigmoidGateMulBuildKey):
    import tilelang.language as T

    N, dt, f32, vec = key.width, key.dtype, "float32", _vec(key.dtype)
    threads, BN = _plan(key)
    M = T.dynamic("M")
    SA, SG = T.dynamic("SA"), T.dynamic("SG")

    @T.prim_func
    def sigmoid_gate_mul(attn: T.StridedTensor((M, N), (SA, 1), dt), gate: T.StridedTensor((M, N), (SG, 1), dt),
                         output: T.Tensor((M, N), dt)):
        # The launcher passes only strides that are whole vectors (_row_views.readable).
        T.assume(SA % vec == 0)
        T.assume(SG % vec == 0)
        # Rows along grid x (2^31 - 1 of them), column blocks along y.
        with T.Kernel(M, T.ceildiv(N, BN), threads=threads) as (bx, by):
            dependent_launch(key.dependent_launch)
            for j in T.Parallel(BN):
                if by * BN + j < N:
                    g = T.cast(gate[bx, by * BN + j], f32)
                    s = T.cast(T.float32(1) / (T.float32(1) + T.exp(-g)), dt)
                    output[bx, by * BN + j] = T.cast(T.cast(attn[bx, by * BN + j], f32) * T.cast(s, f32), dt)

    return sigmoid_gate_mul


def _make_run(key: SigmoidGateMulBuildKey, fn: Any) -> Any:
    """The interface-shaped launch function around the compiled ``fn`` (see ``registered``)."""
    import torch

    from ._row_views import row_view

    width = key.width

    def sigmoid_gate_mul(attn: Any, gate: Any, output: Any = None) -> Any:
        if output is None:
            output = torch.empty(attn.shape, dtype=attn.dtype, device=attn.device)
        if output.numel():
            fn(row_view(attn, width)[0], row_view(gate, width)[0], output.view(-1, width))
        return output

    return sigmoid_gate_mul


def build_sigmoid_gate_mul(key: SigmoidGateMulBuildKey) -> RunLauncher:
    """Compile once per process and return the launcher; ValueError with the refusal reason."""
    return build_run_launcher("sigmoid_gate_mul", key, sigmoid_gate_mul_refusal, _program, _make_run)
