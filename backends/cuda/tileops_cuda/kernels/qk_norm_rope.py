"""QKNormRope as a TileLang kernel: per-head zero-centred RMSNorm of q and k, then the rotary
embedding of their first ``rotary_dim`` channels, in one pass (``manifest/attention.yaml``).

Per head (a row of D): ``n = round(x · rsqrt(mean(x²) + eps) · (1 + w))`` in float32, then for
``j < rotary_dim``, with ``h = rotary_dim / 2`` and ``f = j mod h``:
``out[j] = round(round(n[j] · c[f]) + round(r[j] · s[f]))``, ``r[j] = -n[j + h]`` below h and
``n[j - h]`` above (HF's ``rotate_half``), ``c``/``s`` the cosine and sine of the angle rounded to
the input dtype: HF's roundings, all exact no-ops in float32. Channels from rotary_dim on pass
through normalised.

Angles are ``float(positions[row(f), t]) · inv_freq[f]`` in float32, ``inv_freq`` made on the host
exactly as HF makes it (``1 / theta ** (2f / rotary_dim)``, float32, once per (theta, rotary_dim)
and device). ``row(f)`` is the interleaved-MRoPE rule with the sections as runtime scalars; NeoX
is the same program with positions viewed as one row and both sections 0 (every f reads row 0).
cos and sin use the accurate CUDA functions (no fast math: angles reach tens of thousands of
radians at long context).

A program holds BM heads of one token: the rows in registers for the sum of squares, the
normalised heads in shared memory (a channel's rotation partner lives in another thread), and
the token's cos/sin table in shared memory. BM divides both head counts, so q and k programs
never straddle. q and k are ``[T, heads, D]`` strided views (the query half of q_proj's output
is read in place); the outputs are contiguous. Specialised on dtype, positions dtype, head
counts and D; tokens, strides, rotary_dim, the sections, eps and theta are runtime values.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

import math
import threading
from dataclasses import dataclass
from typing import Any, Sequence

from ._common import ELEM_BYTES, arch_refusal, inverse_rms_macro
from ._launcher import RunLauncher, build_run_launcher

__all__ = ["QKNormRopeBuildKey", "build_qk_norm_rope", "qk_norm_rope_refusal", "inv_freq_table"]

_DTYPES = ("float16", "bfloat16", "float32")
_POSITION_DTYPES = ("int32", "int64")
_NAME = "QKNormRope TileLang kernel"


@dataclass(frozen=True)
class QKNormRopeBuildKey:
    """Build identity: element dtype (q, k, weights, outputs), positions dtype, head counts, D."""

    dtype: str
    positions_dtype: str
    q_heads: int
    k_heads: int
    head_dim: int
    arch: str = "sm_90"


def _vec(dtype: str) -> int:
    return 16 // ELEM_BYTES[dtype]


def _heads_per_program(key: QKNormRopeBuildKey) -> int:
    """The largest power of two up to 4 dividing both head counts (1 when they share none)."""
    g = math.gcd(key.q_heads, key.k_heads)
    bm = 1
    while bm < 4 and g % (bm * 2) == 0:
        bm *= 2
    return bm


def _plan(key: QKNormRopeBuildKey) -> tuple[int, int, int] | None:
    """``(threads, padded D, heads per program)``: each head's threads own whole 16-byte vectors,
    least padding first, then about 8 values per thread (many small programs keep enough loads
    in flight); None when a head does not fit (more than 32 values per thread at 256 threads)."""
    vec, bm, d = _vec(key.dtype), _heads_per_program(key), key.head_dim
    best = None
    for threads in (64, 128, 256):
        if threads % bm:
            continue
        unit = (threads // bm) * vec  # one sweep of a head's threads over its row
        padded = -(-d // unit) * unit
        per = bm * padded // threads
        if per <= 32:
            score = (padded - d, abs(per - 8))
            if best is None or score < best[0]:
                best = (score, threads, padded)
    if best is None:
        return None
    return best[1], best[2], bm


def qk_norm_rope_refusal(key: QKNormRopeBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    if key.dtype not in _DTYPES:
        return f"{_NAME}: dtype {key.dtype} is not one of {_DTYPES}; use the reference"
    if key.positions_dtype not in _POSITION_DTYPES:
        return f"{_NAME}: positions dtype {key.positions_dtype} is not one of {_POSITION_DTYPES}; use the reference"
    if key.head_dim % _vec(key.dtype):
        return (f"{_NAME}: D={key.head_dim} must be a multiple of {_vec(key.dtype)} (16-byte vectors); "
                "use the reference")
    if _plan(key) is None:
        return f"{_NAME}: D={key.head_dim} does not fit the registers of one program (at most 32 values per thread)"
    return arch_refusal(_NAME, key.arch)


def _program(key: QKNormRopeBuildKey):
    import tilelang.language as T

    D, dt, f32, vec = key.head_dim, key.dtype, "float32", _vec(key.dtype)
    NQ, NKV, pdt = key.q_heads, key.k_heads, key.positions_dtype
    plan = _plan(key)
    assert plan is not None  # the refusal turned away every head no program holds
    threads, DP, BM = plan
    HALF = D // 2  # the largest rotary half: rotary_dim <= D
    QB, KB = NQ // BM, NKV // BM
    Tn = T.dynamic("T")
    P = T.dynamic("P")  # position rows: 1 (NeoX) or 3 (MRoPE)
    SQT, SQH, SKT, SKH = T.dynamic("SQT"), T.dynamic("SQH"), T.dynamic("SKT"), T.dynamic("SKH")
    inverse_rms = inverse_rms_macro(BM, DP, D)

    @T.macro
    def norm_rope(X, W, Y, t, h0, xr, sq, rs, nsh, cs, sn, rotary_dim, eps):
        for i, j in T.Parallel(BM, DP):
            xr[i, j] = T.if_then_else(j < D, X[t, h0 + i, j], T.cast(0, dt))
        inverse_rms(xr, sq, rs, eps)
        for i, j in T.Parallel(BM, DP):
            if j < D:
                nsh[i, j] = T.cast((T.cast(xr[i, j], f32) * rs[i]) * (T.float32(1) + T.cast(W[j], f32)), dt)
        half = rotary_dim // 2
        for i, j in T.Parallel(BM, DP):
            if j < D:
                if j < rotary_dim:
                    low = j < half
                    f = T.if_then_else(low, j, j - half)
                    partner = T.cast(nsh[i, T.if_then_else(low, j + half, j - half)], f32)
                    rot = T.cast(T.if_then_else(low, -partner, partner), dt)
                    a = T.cast(T.cast(nsh[i, j], f32) * T.cast(cs[f], f32), dt)
                    b = T.cast(T.cast(rot, f32) * T.cast(sn[f], f32), dt)
                    Y[t, h0 + i, j] = T.cast(T.cast(a, f32) + T.cast(b, f32), dt)
                else:  # past rotary_dim: the normalised value passes through, no table read
                    Y[t, h0 + i, j] = nsh[i, j]

    @T.prim_func
    def qk_norm_rope(query: T.StridedTensor((Tn, NQ, D), (SQT, SQH, 1), dt),
                     key: T.StridedTensor((Tn, NKV, D), (SKT, SKH, 1), dt),
                     q_weight: T.Tensor((D,), dt), k_weight: T.Tensor((D,), dt),
                     positions: T.Tensor((P, Tn), pdt), inv_freq: T.Tensor((HALF,), f32),
                     query_out: T.Tensor((Tn, NQ, D), dt), key_out: T.Tensor((Tn, NKV, D), dt),
                     rotary_dim: T.int32, section_h: T.int32, section_w: T.int32, eps: T.float32):
        # The launcher passes only strides that are whole vectors (_row_views.readable).
        T.assume(SQT % vec == 0)
        T.assume(SQH % vec == 0)
        T.assume(SKT % vec == 0)
        T.assume(SKH % vec == 0)
        with T.Kernel(Tn, QB + KB, threads=threads) as (bx, by):
            xr = T.alloc_fragment((BM, DP), dt)
            sq = T.alloc_fragment((BM, DP), f32)
            rs = T.alloc_fragment((BM,), f32)
            nsh = T.alloc_shared((BM, DP), dt)
            cs = T.alloc_shared((HALF,), dt)
            sn = T.alloc_shared((HALF,), dt)
            for f in T.Parallel(HALF):
                # Only the rotary_dim / 2 frequencies in use: the accurate sine and cosine are
                # the costliest arithmetic here. HF's interleaved MRoPE rule picks the position
                # row; with both sections 0 (NeoX) every f reads row 0.
                if f < rotary_dim // 2:
                    row = T.if_then_else(f % 3 == 1, T.if_then_else(f < 3 * section_h, 1, 0),
                                         T.if_then_else(f % 3 == 2, T.if_then_else(f < 3 * section_w, 2, 0), 0))
                    angle = T.cast(positions[row, bx], f32) * inv_freq[f]
                    cs[f] = T.cast(T.cos(angle), dt)
                    sn[f] = T.cast(T.sin(angle), dt)
            if by < QB:
                norm_rope(query, q_weight, query_out, bx, by * BM, xr, sq, rs, nsh, cs, sn, rotary_dim, eps)
            else:
                norm_rope(key, k_weight, key_out, bx, (by - QB) * BM, xr, sq, rs, nsh, cs, sn, rotary_dim, eps)

    return qk_norm_rope


_INV_FREQ: dict[tuple[float, int, int, str], Any] = {}
_INV_FREQ_LOCK = threading.Lock()


def inv_freq_table(theta: float, rotary_dim: int, head_dim: int, device: Any) -> Any:
    """HF's float32 ``inv_freq`` (``1 / theta ** (arange(0, R, 2) / R)``, made on the CPU as HF
    makes it), zero-padded to ``head_dim // 2`` entries, on ``device``; made once per key."""
    import torch

    key = (float(theta), int(rotary_dim), int(head_dim), str(device))
    table = _INV_FREQ.get(key)
    if table is None:
        inv = 1.0 / (float(theta) ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))
        padded = torch.zeros(head_dim // 2, dtype=torch.float32)
        padded[: inv.numel()] = inv
        table = padded.to(device)
        with _INV_FREQ_LOCK:
            table = _INV_FREQ.setdefault(key, table)
    return table


def _make_run(key: QKNormRopeBuildKey, fn: Any) -> Any:
    """The interface-shaped launch function around the compiled ``fn`` (see ``registered``)."""
    import torch

    from ._row_views import readable

    D = key.head_dim

    def heads(t: Any) -> Any:
        return t if readable(t) else t.contiguous()

    def qk_norm_rope(query: Any, key: Any, q_weight: Any, k_weight: Any, positions: Any, rotary_dim: int,
                     theta: float, eps: float, rope_style: str, mrope_section: Sequence[int],
                     query_out: Any = None, key_out: Any = None) -> Any:
        if query_out is None:
            query_out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
        if key_out is None:
            key_out = torch.empty(key.shape, dtype=key.dtype, device=key.device)
        if query.shape[0] == 0:
            return query_out, key_out
        if rope_style == "neox":
            rows, section_h, section_w = positions.view(1, -1), 0, 0
        else:
            rows, section_h, section_w = positions, int(mrope_section[1]), int(mrope_section[2])
        fn(heads(query), heads(key), q_weight.contiguous(), k_weight.contiguous(), rows.contiguous(),
           inv_freq_table(theta, rotary_dim, D, query.device), query_out, key_out, int(rotary_dim), section_h,
           section_w, float(eps))
        return query_out, key_out

    return qk_norm_rope


def build_qk_norm_rope(key: QKNormRopeBuildKey) -> RunLauncher:
    """Compile once per process and return the launcher; ValueError with the refusal reason."""
    return build_run_launcher("qk_norm_rope", key, qk_norm_rope_refusal, _program, _make_run)
