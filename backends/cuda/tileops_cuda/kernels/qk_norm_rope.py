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

Two programs (the build key's ``program``; both stay buildable so one GPU run compares them):

* ``"rows"`` (the default): a program holds R rows of one tensor, a row being one (token, head)
  pair of q or of k, with R a multiple or a divisor of that tensor's head count, so a program
  covers whole tokens (or part of one): the 16 q heads of a token, or 8 tokens' 2 k heads. Each
  16-byte vector is loaded first; then each rotary channel's partner value ``x[j ± h]`` (and
  its weight) is read again by the thread that needs it (an L1/L2 hit: the same rows were just
  loaded), so the rotation runs in registers, with no shared-memory copy of the normalised
  heads and no barrier on them. While those loads are in flight the program forms its tokens'
  cos/sin table once per (token, f) in shared memory (every head of the token reads it); the
  outputs are assembled in registers and written in 16-byte vectors. Block shape: ``rows``
  and ``threads`` (0: the plan's choice, about 8 KB of rows a program), ``early_partners``
  (the partners loaded with the rows, or where the rotation reads them: fewer registers) and
  ``registers`` (a launch bound); the registered one comes from ``block_shapes.BLOCK_SHAPES``.
* ``"token_heads"`` (the first program, kept for comparison and as the fallback where no row
  count fits): a program holds BM heads of one token, the rows in registers for the sum of
  squares, the normalised heads in shared memory (a channel's rotation partner lives in
  another thread), and the token's cos/sin table in shared memory, formed before the rows are
  loaded; BM divides both head counts. It measured 43-48% of the copy ceiling on the H200:
  1 KB programs whose loads wait on the table's accurate sincos, element-wide stores.

q and k are ``[T, heads, D]`` strided views (the query half of q_proj's output is read in
place); the outputs are contiguous. Specialised on dtype, positions dtype, head counts and D;
tokens, strides, rotary_dim, the sections, eps and theta are runtime values.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

import dataclasses
import math
import threading
from dataclasses import dataclass
from typing import Any, Sequence

from ._common import ELEM_BYTES, arch_refusal, inverse_rms_macro
from ._launcher import RunLauncher, build_run_launcher

__all__ = ["QKNormRopeBuildKey", "build_qk_norm_rope", "with_fitting_program", "qk_norm_rope_refusal",
           "inv_freq_table"]

_DTYPES = ("float16", "bfloat16", "float32")
_POSITION_DTYPES = ("int32", "int64")
_NAME = "QKNormRope TileLang kernel"


_PROGRAMS = ("rows", "token_heads")
#: The bytes of rows the ``rows`` plan aims a program at (16 heads of 256 16-bit channels).
_PROGRAM_BYTES = 8192


@dataclass(frozen=True)
class QKNormRopeBuildKey:
    """Build identity: element dtype (q, k, weights, outputs), positions dtype, head counts, D;
    then the block shape (see the module docstring; 0 leaves a field to the plan)."""

    dtype: str
    positions_dtype: str
    q_heads: int
    k_heads: int
    head_dim: int
    arch: str = "sm_90"
    program: str = "rows"
    rows: int = 0
    threads: int = 0
    #: ``rows`` only: the partners loaded with the rows (registers held across the table and the
    #: reduction) or where the rotation reads them (fewer registers, an L1 hit on the chain).
    early_partners: bool = True
    #: ``rows`` only: registers per thread the launch bounds aim at (minimum programs an SM); 0 sets none.
    registers: int = 0


def _vec(dtype: str) -> int:
    return 16 // ELEM_BYTES[dtype]


def _heads_per_program(key: QKNormRopeBuildKey) -> int:
    """The largest power of two up to 4 dividing both head counts (1 when they share none)."""
    g = math.gcd(key.q_heads, key.k_heads)
    bm = 1
    while bm < 4 and g % (bm * 2) == 0:
        bm *= 2
    return bm


def _token_heads_plan(key: QKNormRopeBuildKey) -> tuple[int, int, int] | None:
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


def _rows_plan(key: QKNormRopeBuildKey) -> tuple[int, int, int] | None:
    """``(threads, padded D, rows per program)`` of the ``rows`` program, or None when no row
    count fits. Rows R: a power of two that is a multiple or a divisor of each head count (a
    program then covers whole tokens or part of one, and its table holds ``max(1, R // heads)``
    tokens); each row's threads own whole 16-byte vectors; at most 32 values a thread. Least
    padding first, then rows nearest ``_PROGRAM_BYTES``, then 16 values a thread."""
    vec, d = _vec(key.dtype), key.head_dim
    best = None
    for r in (1, 2, 4, 8, 16, 32, 64):
        if key.rows and r != key.rows:
            continue
        if any(r % n and n % r for n in (key.q_heads, key.k_heads)):
            continue
        for threads in (64, 128, 256):
            if key.threads and threads != key.threads or threads % r:
                continue
            unit = (threads // r) * vec
            padded = -(-d // unit) * unit
            per = r * padded // threads
            if per <= 32:
                score = (padded - d, abs(r * d * ELEM_BYTES[key.dtype] - _PROGRAM_BYTES), abs(per - 16))
                if best is None or score < best[0]:
                    best = (score, threads, padded, r)
    if best is None:
        return None
    return best[1], best[2], best[3]


def with_fitting_program(key: QKNormRopeBuildKey) -> QKNormRopeBuildKey:
    """``key`` itself, or with the ``token_heads`` program where its ``rows`` program has no
    block for these head counts and D (the registered kernel's rule: never a refusal that one
    of the two programs could serve)."""
    if key.program == "rows" and key.dtype in _DTYPES and _rows_plan(key) is None:
        return dataclasses.replace(key, program="token_heads")
    return key


def qk_norm_rope_refusal(key: QKNormRopeBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    if key.dtype not in _DTYPES:
        return f"{_NAME}: dtype {key.dtype} is not one of {_DTYPES}; use the reference"
    if key.positions_dtype not in _POSITION_DTYPES:
        return f"{_NAME}: positions dtype {key.positions_dtype} is not one of {_POSITION_DTYPES}; use the reference"
    if key.head_dim % _vec(key.dtype):
        return (f"{_NAME}: D={key.head_dim} must be a multiple of {_vec(key.dtype)} (16-byte vectors); "
                "use the reference")
    if key.program not in _PROGRAMS:
        return f"{_NAME}: program={key.program!r} is not one of {_PROGRAMS}"
    if key.registers < 0:
        return f"{_NAME}: registers={key.registers} must be at least 0"
    if key.program == "rows" and _rows_plan(key) is None:
        return (f"{_NAME}: no rows={key.rows or 'any'} x threads={key.threads or 'any'} block holds D={key.head_dim} "
                f"rows of {key.q_heads} and {key.k_heads} heads (rows a multiple or divisor of both, at most 32 "
                f"values per thread); use program='token_heads'")
    if key.program == "token_heads" and _token_heads_plan(key) is None:
        return f"{_NAME}: D={key.head_dim} does not fit the registers of one program (at most 32 values per thread)"
    return arch_refusal(_NAME, key.arch)


def _angle_row(f, section_h, section_w):
    """HF's interleaved-MRoPE rule: the position row frequency ``f`` reads (0 for NeoX, whose
    sections are both 0)."""
    import tilelang.language as T

    return T.if_then_else(f % 3 == 1, T.if_then_else(f < 3 * section_h, 1, 0),
                          T.if_then_else(f % 3 == 2, T.if_then_else(f < 3 * section_w, 2, 0), 0))


def _table_tokens(key: QKNormRopeBuildKey, R: int) -> int:
    """Tokens of the ``rows`` program's cos/sin table: the most one program of R rows covers."""
    return max(1, R // key.q_heads, R // key.k_heads)


def _rows_macro(key: QKNormRopeBuildKey, N: int, R: int, DP: int):
    """The ``rows`` program's work on one tensor of N heads: program ``p`` holds its rows
    ``p·R .. p·R + R - 1`` (row = token · N + head). Rows past the last token are guarded by
    TileLang's safe access (their loads read 0, their stores are skipped), as the table's
    positions past T are."""
    import tilelang.language as T

    D, dt, f32 = key.head_dim, key.dtype, "float32"
    EARLY = key.early_partners
    inverse_rms = inverse_rms_macro(R, DP, D)

    @T.macro
    def rows(X, W, Y, p, positions, inv_freq, xr, pr, wr, wp, sq, rs, cs, sn, rotary_dim, section_h, section_w,
             eps):
        half = rotary_dim // 2
        # The rows and the weight first (16-byte vectors), then, early, the partners of the
        # rotary channels (element loads, L1/L2 hits): all in flight while the table is formed.
        # (The weight loaded after the table took more registers: 63/78 against 59/74.)
        for i, j in T.Parallel(R, DP):
            xr[i, j] = T.if_then_else(j < D, X[(p * R + i) // N, (p * R + i) % N, j], T.cast(0, dt))
        for i, j in T.Parallel(R, DP):
            wr[i, j] = T.if_then_else(j < D, W[j], T.cast(0, dt))
        if EARLY:
            for i, j in T.Parallel(R, DP):
                partner = T.if_then_else(j < half, j + half, j - half)
                pr[i, j] = T.if_then_else(j < rotary_dim, X[(p * R + i) // N, (p * R + i) % N, partner], xr[i, j])
                wp[i, j] = T.if_then_else(j < rotary_dim, W[partner], wr[i, j])
        # The table: one accurate sincos per (token, f) of the program's max(1, R // N) tokens.
        for k in T.Parallel(_table_tokens(key, R) * (D // 2)):
            if k < max(1, R // N) * half:
                u = k // half
                f = k % half
                angle = T.cast(positions[_angle_row(f, section_h, section_w), (p * R) // N + u], f32) * inv_freq[f]
                cs[u, f] = T.cast(T.cos(angle), dt)
                sn[u, f] = T.cast(T.sin(angle), dt)
        inverse_rms(xr, sq, rs, eps)
        # The outputs replace the rows in place: each element reads only itself (and a partner
        # held elsewhere), so no third register row is needed.
        for i, j in T.Parallel(R, DP):
            n = T.cast((T.cast(xr[i, j], f32) * rs[i]) * (T.float32(1) + T.cast(wr[i, j], f32)), dt)
            if j < rotary_dim:
                low = j < half
                f = T.if_then_else(low, j, j - half)
                if EARLY:
                    m = T.cast((T.cast(pr[i, j], f32) * rs[i]) * (T.float32(1) + T.cast(wp[i, j], f32)), dt)
                else:
                    partner = T.if_then_else(low, j + half, j - half)
                    m = T.cast((T.cast(X[(p * R + i) // N, (p * R + i) % N, partner], f32) * rs[i])
                               * (T.float32(1) + T.cast(W[partner], f32)), dt)
                rot = T.cast(T.if_then_else(low, -T.cast(m, f32), T.cast(m, f32)), dt)
                a = T.cast(T.cast(n, f32) * T.cast(cs[i // N, f], f32), dt)
                b = T.cast(T.cast(rot, f32) * T.cast(sn[i // N, f], f32), dt)
                xr[i, j] = T.cast(T.cast(a, f32) + T.cast(b, f32), dt)
            else:  # past rotary_dim: the normalised value passes through
                xr[i, j] = n
        for i, j in T.Parallel(R, DP):
            if j < D:
                Y[(p * R + i) // N, (p * R + i) % N, j] = xr[i, j]

    return rows


def _token_heads_macro(key: QKNormRopeBuildKey, BM: int, DP: int):
    """The ``token_heads`` program's work on BM heads of one token (the table already formed)."""
    import tilelang.language as T

    D, dt, f32 = key.head_dim, key.dtype, "float32"
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

    return norm_rope


def _program(key: QKNormRopeBuildKey):
    import tilelang.language as T

    D, dt, f32, vec = key.head_dim, key.dtype, "float32", _vec(key.dtype)
    NQ, NKV, pdt = key.q_heads, key.k_heads, key.positions_dtype
    ROWS, REGISTERS = key.program == "rows", key.registers  # (the prim_func's `key` is the k tensor)
    plan = _rows_plan(key) if ROWS else _token_heads_plan(key)
    assert plan is not None  # the refusal turned away every key no program holds
    threads, DP, R = plan  # R: rows (``rows``) or heads of one token (``token_heads``) a program holds
    HALF = D // 2  # the largest rotary half: rotary_dim <= D
    TB = _table_tokens(key, R) if ROWS else 1
    Tn = T.dynamic("T")
    P = T.dynamic("P")  # position rows: 1 (NeoX) or 3 (MRoPE)
    SQT, SQH, SKT, SKH = T.dynamic("SQT"), T.dynamic("SQH"), T.dynamic("SKT"), T.dynamic("SKH")
    if ROWS:
        q_rows, k_rows = _rows_macro(key, NQ, R, DP), _rows_macro(key, NKV, R, DP)
        EARLY = key.early_partners
    else:
        norm_rope = _token_heads_macro(key, R, DP)
        QB, KB = NQ // R, NKV // R

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
        if ROWS:
            QP = T.ceildiv(Tn * NQ, R)
            with T.Kernel(QP + T.ceildiv(Tn * NKV, R), threads=threads) as bx:
                if REGISTERS:
                    T.annotate_min_blocks_per_sm(max(1, 65536 // (threads * REGISTERS)))
                xr = T.alloc_fragment((R, DP), dt)
                wr = T.alloc_fragment((R, DP), dt)
                pr = T.alloc_fragment((R, DP), dt) if EARLY else None
                wp = T.alloc_fragment((R, DP), dt) if EARLY else None
                sq = T.alloc_fragment((R, DP), f32)
                rs = T.alloc_fragment((R,), f32)
                cs = T.alloc_shared((TB, HALF), dt)
                sn = T.alloc_shared((TB, HALF), dt)
                if bx < QP:
                    q_rows(query, q_weight, query_out, bx, positions, inv_freq, xr, pr, wr, wp, sq, rs, cs, sn,
                           rotary_dim, section_h, section_w, eps)
                else:
                    k_rows(key, k_weight, key_out, bx - QP, positions, inv_freq, xr, pr, wr, wp, sq, rs, cs, sn,
                           rotary_dim, section_h, section_w, eps)
        else:
            with T.Kernel(Tn, QB + KB, threads=threads) as (bx, by):
                xr = T.alloc_fragment((R, DP), dt)
                sq = T.alloc_fragment((R, DP), f32)
                rs = T.alloc_fragment((R,), f32)
                nsh = T.alloc_shared((R, DP), dt)
                cs = T.alloc_shared((HALF,), dt)
                sn = T.alloc_shared((HALF,), dt)
                for f in T.Parallel(HALF):
                    # Only the rotary_dim / 2 frequencies in use: the accurate sine and cosine are
                    # the costliest arithmetic here. HF's interleaved MRoPE rule picks the position
                    # row; with both sections 0 (NeoX) every f reads row 0.
                    if f < rotary_dim // 2:
                        angle = T.cast(positions[_angle_row(f, section_h, section_w), bx], f32) * inv_freq[f]
                        cs[f] = T.cast(T.cos(angle), dt)
                        sn[f] = T.cast(T.sin(angle), dt)
                if by < QB:
                    norm_rope(query, q_weight, query_out, bx, by * R, xr, sq, rs, nsh, cs, sn, rotary_dim, eps)
                else:
                    norm_rope(key, k_weight, key_out, bx, (by - QB) * R, xr, sq, rs, nsh, cs, sn, rotary_dim, eps)

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
