"""The chunked gated delta rule (ChunkGatedDeltaRuleFwdOp) on NVIDIA GPUs: the host side.

What gets compiled (:class:`ChunkGDRBuildKey`: dtypes, metadata dtypes, head counts and sizes, the arch;
never B, T or the pool size, and not the presence of ``has_initial_state`` nor the l2 norm,
which are runtime flags), what the kernels were not written for (:func:`chunk_gdr_refusal`),
and how a call is launched. The programs are :mod:`tileops_cuda.kernels.chunk_gdr_program`.

A launch never synchronises with the host (it captures into a CUDA graph): the chunk table
``cc`` (prefix sums of each sequence's chunk count) is made on the device from
``cu_seqlens`` by the first of four kernels, which also converts the metadata to int32 (the
prefix sums as the spec reads them: ``cummax(clip(cu_seqlens))``, clipped into ``[0, T]``, so
unchecked metadata lays the sequences end to end inside the tokens) and zeroes the outputs of
tokens no sequence covers, and the grids are sized by the bound ``(T + 63 B) // 64`` on the
number of chunks (which the clipped lengths, summing to at most T, never pass). (Five torch
launches did that before, about 200 us of host time a call on the H200's host, during which
the GPU waited: backends/cuda/NOTES.md, tenth session.) Per call it allocates the work
buffers (through torch's caching allocator, in two allocations carved into views): ``W``,
``U``, ``D`` (``[NC, 64, NV, D]`` bf16), the per-chunk states ``h`` (``[NC, NV, DK, DV]`` bf16),
the keys scaled for the state walk (``[NC, 64, NV, DK]`` bf16) in one; the int32 metadata and
the cumulative decays and key scales (``[NV, NC, 64]`` float32) in the other.

Precision (the tolerance the GPU tests use, and why): the state recurrence, the decays, the
triangular inverse and every sum are float32; like flash-linear-attention's kernels, the
tensor-core operands are bf16 (the inputs themselves, and W, U, D, the decayed keys, the
per-chunk states and the masked Q Kᵀ rounded to bf16). A float32 emulation of exactly these
roundings puts the final state 2.3e-3..3e-3 (relative, Frobenius, over the written slots)
from float64 and the output ~3e-3 (its own bf16 rounding is ~2e-3); U, D and the decayed
keys dominate (each alone ~1.6e-3). The GPU tests allow 8e-3 and 1.6e-2.
"""

# No `from __future__ import annotations`: dataclass field types stay plain classes here.

from dataclasses import dataclass
from typing import Any, Callable

from ._common import arch_refusal, cached_build, compile_prim_func, direct_entry
from ._row_views import packed
from .chunk_gdr_program import (
    CHUNK, chunk_gdr_meta_program, chunk_gdr_output_program, chunk_gdr_state_program, chunk_gdr_wy_program,
)

__all__ = ["ChunkGDRBuildKey", "ChunkGDRLauncher", "build_chunk_gdr", "chunk_gdr_refusal"]

_STATE_DTYPES = ("float16", "bfloat16", "float32")
_INDEX_DTYPES = ("int32", "int64")
_HEAD_K_DIMS = (64, 128)
_HEAD_V_DIMS = (64, 128)
_INT32_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class ChunkGDRBuildKey:
    """The four kernels' build identity. ``cu_dtype`` and ``slot_dtype`` are those of
    ``cu_seqlens`` and ``ssm_state_indices`` (the metadata kernel reads them as they are).
    ``stages``: the state walk's software pipeline depth (``T.Pipelined``; 0 loads each chunk
    only when it is reached)."""

    input_dtype: str
    state_dtype: str
    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    arch: str = "sm_90"
    stages: int = 2
    cu_dtype: str = "int32"
    slot_dtype: str = "int32"


def chunk_gdr_refusal(key: ChunkGDRBuildKey) -> str | None:
    """Why the chunked kernels cannot serve ``key`` (a sentence naming the fix), or None."""
    name = "chunked gated delta rule TileLang kernel"
    if key.input_dtype != "bfloat16":
        return (f"{name}: q/k/v dtype {key.input_dtype} is not bfloat16 (its tensor-core operands are bf16, "
                "whose exponent range the chunk decays need); use the reference")
    if key.state_dtype not in _STATE_DTYPES:
        return f"{name}: state dtype {key.state_dtype} is not one of {_STATE_DTYPES}; use the reference"
    if key.num_k_heads <= 0 or key.num_v_heads % key.num_k_heads:
        return f"{name}: NV={key.num_v_heads} is not a multiple of NK={key.num_k_heads}; use the reference"
    if key.head_k_dim not in _HEAD_K_DIMS:
        return f"{name}: DK={key.head_k_dim} is not one of {_HEAD_K_DIMS} (tile sizes); use the reference"
    if key.head_v_dim not in _HEAD_V_DIMS:
        return f"{name}: DV={key.head_v_dim} is not one of {_HEAD_V_DIMS} (tile sizes); use the reference"
    for field in ("cu_dtype", "slot_dtype"):
        if getattr(key, field) not in _INDEX_DTYPES:
            return f"{name}: {field} {getattr(key, field)} is not one of {_INDEX_DTYPES}; use the reference"
    if key.stages not in (0, 1, 2, 3):
        return f"{name}: stages={key.stages} is not one of 0..3; use the reference"
    return arch_refusal(name, key.arch)


def _check_int32(T: int, B: int, S: int, key: ChunkGDRBuildKey) -> int:
    """The chunk bound ``NC``; ValueError where an index of a buffer would pass int32."""
    NC = (T + (CHUNK - 1) * B) // CHUNK
    DK, DV, NV = key.head_k_dim, key.head_v_dim, key.num_v_heads
    largest = max(NC * CHUNK * NV * max(DK, DV), NC * NV * DK * DV, S * NV * DV * DK)
    if largest > _INT32_LIMIT:
        raise ValueError(f"chunked gated delta rule TileLang kernel: T={T} tokens in B={B} sequences (pool {S}) "
                         f"need {largest} elements in one buffer, past int32 indexing; split the prefill")
    return NC


_ALIGN_BYTES = 256  # where a fresh allocation starts: what the kernels' vector accesses may assume


def _work_shapes(NC: int, NV: int, DK: int, DV: int) -> tuple[tuple[int, ...], ...]:
    """W, the decayed keys, U, D (``[NC, 64, NV, D]``) and the per-chunk states ``h``."""
    return ((NC, CHUNK, NV, DK), (NC, CHUNK, NV, DK), (NC, CHUNK, NV, DV), (NC, CHUNK, NV, DV), (NC, NV, DK, DV))


def _float32_work_shapes(B: int, NC: int, NV: int) -> tuple[tuple[int, ...], ...]:
    """The int32 metadata (cu_seqlens, chunk table, slots: ``3 B + 2``, float32-sized), the
    cumulative decays and the key scales (``[NV, NC, 64]``)."""
    return ((3 * B + 2,), (NV, NC, CHUNK), (NV, NC, CHUNK))


def _carve(shapes: tuple[tuple[int, ...], ...], dtype: Any, device: Any) -> list[Any]:
    """Contiguous tensors of ``shapes`` carved from one allocation, each starting on an
    ``_ALIGN_BYTES`` boundary: one allocation for a call's work buffers instead of one each (an
    allocation of these sizes cost the H200's host ~7 us; ``as_strided`` is one call a view,
    where a slice and a ``view`` are two). The strides are computed here, not by the core's
    ``contiguous_strides``: on this per-call path its import and generality cost more than the
    loop (every size here is positive)."""
    import torch

    step, at, layout = _ALIGN_BYTES // dtype.itemsize, 0, []
    for shape in shapes:
        stride, n = [], 1
        for size in reversed(shape):
            stride.append(n)
            n *= size
        layout.append((shape, stride[::-1], at))
        at += -(-n // step) * step
    buffer = torch.empty(at, dtype=dtype, device=device)
    return [buffer.as_strided(shape, stride, offset) for shape, stride, offset in layout]


def _make_run(build_key: ChunkGDRBuildKey, meta_fn: Callable[..., Any], wy: Callable[..., Any],
              state_fn: Callable[..., Any], out_fn: Callable[..., Any]) -> Callable[..., Any]:
    """The launch path; ``run``'s ``key`` is the op's key tensor (the interface's name), so the
    build key goes by another name here."""
    import torch

    NV, DK, DV = build_key.num_v_heads, build_key.head_k_dim, build_key.head_v_dim
    dt = getattr(torch, build_key.input_dtype)
    f32, i32 = torch.float32, torch.int32
    default_scale = DK**-0.5
    dummies: dict[Any, Any] = {}

    def no_init(device: Any) -> Any:
        d = dummies.get(device)
        if d is None:
            d = dummies[device] = torch.zeros(1, dtype=torch.uint8, device=device)
        return d

    def run(query: Any, key: Any, value: Any, g: Any, beta: Any, state: Any, cu_seqlens: Any, ssm_state_indices: Any,
            has_initial_state: Any = None, scale: Any = None, use_qk_l2norm_in_kernel: Any = False,
            out: Any = None) -> Any:
        if out is None:
            out = torch.empty(value.shape, dtype=value.dtype, device=value.device)
        T, B = value.shape[0], ssm_state_indices.shape[0]
        if T == 0 or B == 0:  # a zero-sized grid is not launchable
            return out.zero_() if T else out  # no sequence: every token is uncovered (zeros), no state written
        NC = _check_int32(T, B, state.shape[0], build_key)
        dev = value.device
        w, kf, u, d, h = _carve(_work_shapes(NC, NV, DK, DV), dt, dev)
        meta, gcum, kscale = _carve(_float32_work_shapes(B, NC, NV), f32, dev)
        meta = meta.view(i32)  # int32 clipped cu_seqlens, chunk table, slots
        cu, chunks, slots = meta[:B + 1], meta[B + 1:2 * B + 2], meta[2 * B + 2:]
        # The core passes every tensor contiguous (the interface's needs_contiguous), not 16-byte aligned: the rows
        # and the pool are read (the pool written) in vectors, so one at a misaligned start is packed (the pool
        # written back after).
        query, key, value = [t if t.data_ptr() % 16 == 0 else packed(t) for t in (query, key, value)]
        pool = packed(state) if state.data_ptr() % 16 else state
        meta_fn(cu_seqlens, ssm_state_indices, cu, slots, chunks, out)  # also zeroes uncovered tokens' rows
        top = 1 << (B.bit_length() - 1)
        l2 = int(bool(use_qk_l2norm_in_kernel))
        has = no_init(dev) if has_initial_state is None else has_initial_state.view(torch.uint8)
        wy(key, value, g, beta, cu, chunks, w, u, kf, gcum, kscale, top, top.bit_length(), l2)
        state_fn(w, u, kf, gcum, cu, chunks, slots, has, pool, h, d,
                 int(has_initial_state is not None))
        out_fn(query, key, gcum, kscale, h, d, cu, chunks, out, top, top.bit_length(), l2,
               float(default_scale if scale is None else scale))
        if pool is not state:
            state.copy_(pool)
        return out

    return run


class ChunkGDRLauncher:
    """The four compiled kernels of one build key and ``run``, the launch path: the op
    interface's arguments followed by ``out`` (allocated when None); writes ``out`` and the
    pool in place on the current CUDA stream and returns ``out``."""

    def __init__(self, key: ChunkGDRBuildKey, kernels: tuple[Any, ...], run: Callable[..., Any]) -> None:
        self.key = key
        self.kernels = kernels
        self.run = run

    def source(self, index: int = 0) -> str:
        """The generated CUDA source of one kernel (0: metadata, 1: W/U, 2: states, 3: outputs)."""
        return self.kernels[index].get_kernel_source()


def build_chunk_gdr(key: ChunkGDRBuildKey) -> ChunkGDRLauncher:
    """Compile the four kernels (once per process) and return their launcher; ValueError with the
    refusal reason if they were not written for ``key``."""
    reason = chunk_gdr_refusal(key)
    if reason is not None:
        raise ValueError(reason)

    def make() -> ChunkGDRLauncher:
        # The kernels' T.gemm lowers to wgmma on Hopper, which needs the sm_90a feature set (an
        # sm_90 build traps in cute's wgmma fence); the pipelined state walk is warp-specialised
        # too (sm_90a's register reconfiguration). Every H100/H200 runs sm_90a code.
        arch = "sm_90a" if key.arch == "sm_90" else key.arch
        kernels = tuple(compile_prim_func(program(key), arch) for program in
                        (chunk_gdr_meta_program, chunk_gdr_wy_program, chunk_gdr_state_program,
                         chunk_gdr_output_program))
        run = _make_run(key, *(direct_entry(k) for k in kernels))
        return ChunkGDRLauncher(key, kernels, run)

    return cached_build(("chunk_gdr", key), make)

