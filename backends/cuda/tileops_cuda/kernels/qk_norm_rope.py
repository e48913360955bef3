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

* ``"lanes"`` (the default): a program holds BR consecutive rows of one tensor (row = token ·
  heads + head), each row's 16-byte vectors on consecutive lanes of one warp (LANES, the power of
  two at or above D / vec), each thread ``rows`` rows; BR = threads / LANES · rows. Every global
  load is issued first and none waits on another (the rows, the weight, and the positions of the
  program's cos/sin table), so a program waits on one memory round trip; the table's accurate
  sincos (per token and rotary channel, sin signed as rotate_half signs it) runs while the rows
  are in flight. Sums of squares are reduced with warp shuffles; the rotary lanes put their
  normalised values in shared memory, where each channel reads its partner after the program's
  one barrier; cos, sin and the outputs move as 16-byte vectors. Block shape: ``threads``,
  ``rows`` (0: 256 and 2, 8 KB of rows at D=256 in 16 bits) and ``registers`` (a launch bound);
  candidates, each off by default (``_TABLES``, ``_SINCOS``, ``_PARTNERS``): ``table`` (one
  sincos per (token, frequency) over every warp, or each row's table formed by its own warp with
  no block barrier), ``sincos`` (the angle reduced by 2π in two FMAs, then the hardware's sin and
  cos), ``partners`` (a rotary lane's partners read as one vector, its rotation unguarded) and
  ``rotation`` (HF's roundings as the 16-bit multiply and add instructions, same bits).
  The first programs' generated CUDA showed why they stop near half the copy: ``token_heads``
  loads its rows only after the table's positions came back and its sincos ran (two round trips
  for 1 KB programs), and the rows program (deleted: 20-29% of the copy) issued its positions
  loads after a barrier, re-read the rotation partners from global memory after the reduction
  and divided by the runtime rotary half throughout its table.
* ``"token_heads"`` (the first program, kept for comparison and as the fallback for rows of
  more than 32 vectors): a program holds BM heads of one token, the rows in registers for the
  sum of squares, the normalised heads in shared memory (a channel's rotation partner lives in
  another thread), and the token's cos/sin table in shared memory, formed before the rows are
  loaded; BM divides both head counts. It measured 43-57% of the same-size copy on the H200.

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

from ._common import (ELEM_BYTES, arch_refusal, dependent_launch, dependent_launch_refusal, inverse_rms_macro,
                      programs_at_registers)
from ._launcher import RunLauncher, build_run_launcher

__all__ = ["QKNormRopeBuildKey", "build_qk_norm_rope", "with_fitting_program", "qk_norm_rope_refusal",
           "inv_freq_table"]

_DTYPES = ("float16", "bfloat16", "float32")
_POSITION_DTYPES = ("int32", "int64")
_NAME = "QKNormRope TileLang kernel"


_PROGRAMS = ("lanes", "token_heads")
#: The lanes program's tables. ``channels`` (the first): the program's threads over (token, rotary
#: channel), a sincos per channel (both halves of a pair compute the same angle), a block barrier
#: before the rotation; a k program at Qwen's heads (8 tokens) runs 8 rounds of it on 2 warps.
#: ``pairs``: one sincos per (token, frequency), token fastest, so one round on every warp at Qwen's
#: heads; still behind the block barrier. ``warp``: each row's own lanes form its row's table (a
#: sincos per (row, frequency)) and rotate it after ``__syncwarp``: no block barrier at all, since a
#: row's partners are on its own warp too.
_TABLES = ("channels", "pairs", "warp")
_SINCOS = ("accurate", "reduced")
#: ``elements`` (the first): each partner read on its own (its index picks the half) and each
#: channel's rotation behind its own ``j < rotary_dim`` guard: ~240 SASS instructions a row after
#: the barrier at Qwen's shape, most of the row's work. ``vectors``: where half is whole vectors and
#: the lane's vector is wholly rotary (every model row), one 16-byte read of the partner vector and
#: an unguarded rotation; other lanes as ``elements``.
_PARTNERS = ("elements", "vectors")
#: ``float32`` (the first): each of HF's three roundings as float32 math and a conversion, ~12 SASS
#: instructions a channel. ``native``: in 16 bits, the 16-bit instructions themselves (TileLang's
#: ``__hmul_rn``/``__hadd_rn``; nvcc pairs them into bf16x2/half2 ones, ~1.5 a channel), the same bits:
#: a product of two 16-bit values is exact in float32, so float32-then-round is one rounding; the sum
#: of two is exact in float32 unless their exponents are 14+ (fp16) or 17+ (bf16) apart, where both
#: orders round to the larger operand.
_ROTATIONS = ("float32", "native")
#: ``reduced``: the float32 angle less the nearest multiple of 2π (2π split in two float32 parts; the
#: first product is exact, see ``_reduce_angle``), then the hardware's sin and cos on [-π, π].
_INV_2PI, _TWO_PI_HI, _TWO_PI_LO = 0.15915493667125702, 6.2831854820251465, -1.7484555314695172e-07
#: The lanes program's default block: 256 threads, 2 rows a thread (8 KB of rows at D=256 in 16 bits).
_LANES_THREADS, _LANES_ROWS = 256, 2
#: Shared memory a lanes program may take without raising the kernel's dynamic limit.
_SHARED_BYTES = 48 * 1024


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
    program: str = "lanes"
    #: ``lanes`` only: threads a program, and rows (16-byte vectors in flight) each thread holds.
    threads: int = 0
    rows: int = 0
    #: ``lanes`` only: registers per thread the launch bounds aim at (minimum programs an SM); 0 sets none.
    registers: int = 0
    #: ``lanes`` only: who forms the cos/sin table (``_TABLES``).
    table: str = "channels"
    #: ``lanes`` only: ``"accurate"`` (CUDA's sinf/cosf) or ``"reduced"`` (``_reduce_angle``).
    sincos: str = "accurate"
    #: ``lanes`` only: how a rotary lane reads its rotation partners (``_PARTNERS``).
    partners: str = "elements"
    #: ``lanes`` only: the rotation's arithmetic (``_ROTATIONS``).
    rotation: str = "float32"
    #: Launched as a programmatic dependent of the stream's previous kernel (``_common.dependent_launch``:
    #: the same bits); the registered keys set it (``launch_policy``).
    dependent_launch: bool = False


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


def _lanes_plan(key: QKNormRopeBuildKey) -> tuple[int, int, int] | None:
    """``(threads, lanes a row, rows a thread)`` of the ``lanes`` program, or None: a row's 16-byte
    vectors on consecutive lanes of one warp (lanes: the power of two at or above D / vec, at most
    32), so its sum of squares is reduced with shuffles; threads a multiple of the warp and of the
    lanes (at most 1024); the table and the rotary partners within 48 KB of shared memory."""
    nv = key.head_dim // _vec(key.dtype)
    if nv > 32:
        return None
    lanes = 1 << max(0, nv - 1).bit_length()
    threads, rows = key.threads or _LANES_THREADS, key.rows or _LANES_ROWS
    if threads < 0 or threads % 32 or threads > 1024 or not 0 < rows <= 8:
        return None
    br = threads // lanes * rows
    table = _table_rows(key, br)
    if (2 * table + br) * key.head_dim * ELEM_BYTES[key.dtype] > _SHARED_BYTES:
        return None
    return threads, lanes, rows


def with_fitting_program(key: QKNormRopeBuildKey) -> QKNormRopeBuildKey:
    """``key`` itself, or with the ``token_heads`` program where its ``lanes`` program has no
    block for this D (more than 32 vectors a row) or block shape (the registered kernel's rule:
    never a refusal that one of the two programs could serve)."""
    if key.program == "lanes" and key.dtype in _DTYPES and _lanes_plan(key) is None:
        return dataclasses.replace(key, program="token_heads")
    return key


def qk_norm_rope_refusal(key: QKNormRopeBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    reason = dependent_launch_refusal(key.dependent_launch, _NAME, key.arch, "drop dependent_launch")
    if reason is not None:
        return reason
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
    if key.table not in _TABLES:
        return f"{_NAME}: table={key.table!r} is not one of {_TABLES}"
    if key.sincos not in _SINCOS:
        return f"{_NAME}: sincos={key.sincos!r} is not one of {_SINCOS}"
    if key.partners not in _PARTNERS:
        return f"{_NAME}: partners={key.partners!r} is not one of {_PARTNERS}"
    if key.rotation not in _ROTATIONS:
        return f"{_NAME}: rotation={key.rotation!r} is not one of {_ROTATIONS}"
    if key.program == "lanes" and _lanes_plan(key) is None:
        return (f"{_NAME}: threads={key.threads} x rows={key.rows} does not lay out D={key.head_dim} in {key.dtype} "
                f"(at most 32 16-byte vectors a row, threads a multiple of 32 up to 1024, 1-8 rows a thread, "
                f"its table and partners within 48 KB of shared memory); use program='token_heads'")
    if key.program == "token_heads" and _token_heads_plan(key) is None:
        return f"{_NAME}: D={key.head_dim} does not fit the registers of one program (at most 32 values per thread)"
    return arch_refusal(_NAME, key.arch)


def _angle_row(f, section_h, section_w):
    """HF's interleaved-MRoPE rule: the position row frequency ``f`` reads (0 for NeoX, whose
    sections are both 0)."""
    import tilelang.language as T

    return T.if_then_else(f % 3 == 1, T.if_then_else(f < 3 * section_h, 1, 0),
                          T.if_then_else(f % 3 == 2, T.if_then_else(f < 3 * section_w, 2, 0), 0))


def _table_rows(key: QKNormRopeBuildKey, br: int) -> int:
    """Rows of the lanes program's cos/sin table: one per token its rows reach, or one per row
    (``warp``: each row's lanes form their own)."""
    if key.table == "warp":
        return br
    return max(_table_tokens(key.q_heads, br), _table_tokens(key.k_heads, br))


def _reduce_angle():
    """A macro: ``angle[2]`` = the float32 angle ``angle[0]`` less ``angle[1]`` = its nearest
    multiple of 2π. ``k = floor(x/2π + 1/2)``, ``r = (x - k·HI) - k·LO`` with 2π split in two
    float32 parts (``_TWO_PI_HI``, ``_TWO_PI_LO``); nvcc contracts each step into one FMA: the first
    is exact (x - k·HI needs at most float32's 24 bits: |r| < 4 and both terms are multiples of
    HI's last bit or coarser), the second rounds once (2^-23 at |r| <= π; HI + LO is 2π within
    2^-47, k·2^-47 is nothing at any position a model reaches). Then the hardware (MUFU) sin and cos
    of r, absolute error 2^-21.41 on [-π, π] (CUDA guide): about 8 instructions for both against ~50
    on the fast path of accurate ``sinf`` + ``cosf`` (185 static sm_90a instructions with their
    Payne-Hanek path, 19 for this). So under 1e-6 from the exact sin and cos of the same float32
    angle: far under the outputs' tolerances against float64 (bf16 1.6e-2, fp16 2e-3, fp32 2e-5
    relative), though a bf16 cos or sin may round the other way from HF's at a tie."""
    import tilelang.language as T

    @T.macro
    def reduce_angle(angle):
        # One statement a step, through locals: the simplifier could fold k·HI + k·LO into k·2π.
        angle[1] = T.floor(angle[0] * T.float32(_INV_2PI) + T.float32(0.5))
        angle[2] = angle[0] - angle[1] * T.float32(_TWO_PI_HI)
        angle[2] = angle[2] - angle[1] * T.float32(_TWO_PI_LO)

    return reduce_angle


def _table_tokens(n: int, rows: int) -> int:
    """Tokens a program of ``rows`` consecutive rows of an ``n``-head tensor spans, at most."""
    if rows % n == 0 or n % rows == 0:
        return max(1, rows // n)
    return (rows - 1) // n + 2


def _lanes_macro(key: QKNormRopeBuildKey, N: int):
    """The ``lanes`` program's work on one tensor of N heads: program ``p`` holds rows
    ``p·BR .. p·BR + BR - 1`` (row = token · N + head), thread ``slot · LANES + lane`` the
    vector ``lane`` of rows ``p·BR + k·SLOTS + slot``, k < rows a thread."""
    import tilelang.language as T

    D, dt, f32, vec = key.head_dim, key.dtype, "float32", _vec(key.dtype)
    plan = _lanes_plan(key)
    assert plan is not None  # the refusal turned away every key the lanes program cannot lay out
    threads, LANES, RPT = plan
    SLOTS = threads // LANES
    BR, HALF = SLOTS * RPT, D // 2
    TB = _table_tokens(N, BR)
    TABLE, REDUCED = key.table, key.sincos == "reduced"
    reduce_angle = _reduce_angle()
    VECTOR_PARTNERS = key.partners == "vectors"
    NATIVE_ROTATION = key.rotation == "native" and dt != "float32"  # float32: the same code either way

    def rotated(x, c, m, sgn_sin):
        """HF's rotation of one channel: round(round(x·cos) + round(partner·signed sin))."""
        if NATIVE_ROTATION:
            return T.call_extern(dt, "__hadd_rn", T.call_extern(dt, "__hmul_rn", x, c),
                                 T.call_extern(dt, "__hmul_rn", m, sgn_sin))
        return T.cast(T.cast(T.cast(T.cast(x, f32) * T.cast(c, f32), dt), f32)
                      + T.cast(T.cast(T.cast(m, f32) * T.cast(sgn_sin, f32), dt), f32), dt)

    def sin_cos(angle):
        """sin and cos of ``angle[0]``, or (reduced) the hardware's of ``angle[2]``."""
        return (T.__sin(angle[2]), T.__cos(angle[2])) if REDUCED else (T.sin(angle[0]), T.cos(angle[0]))
    PADDED = LANES * vec > D  # lanes past D hold zeros and store nothing

    @T.macro
    def lanes(X, W, Y, p, tid, xl, wl, rs, cl, sl, ml, fr, angle, cs, sn, sw, positions, inv_freq, rotary_dim,
              section_h, section_w, eps, Tn):
        half = rotary_dim // 2
        lane, slot = tid % LANES, tid // LANES
        c0 = lane * vec  # the lane's first channel
        tok0 = (p * BR) // N
        # 1. Every load first, none waiting on another: the rows, the weight, and the positions of
        #    the program's cos/sin table (its accurate sincos per (token, channel) runs while the rows
        #    are in flight). One memory round trip a program.
        for k in T.unroll(RPT):
            r = p * BR + k * SLOTS + slot
            if r < Tn * N and (not PADDED or c0 < D):
                for e in T.vectorized(vec):
                    xl[k, e] = X[r // N, r % N, c0 + e]
            else:
                for e in T.vectorized(vec):
                    xl[k, e] = T.cast(0, dt)
        if not PADDED or c0 < D:
            for e in T.vectorized(vec):
                wl[e] = W[c0 + e]
        else:
            for e in T.vectorized(vec):
                wl[e] = T.cast(0, dt)
        if TABLE == "channels":
            # The table by channel, each thread writing its own entries: cos(f) and sin(f) signed as
            # rotate_half signs it (-sin below half), f = j mod half; so a rotary lane reads its
            # vector's cos and sin as one 16-byte vector each.
            for it in T.serial(-(-TB * D // threads)):
                u = (it * threads + tid) // D
                j = (it * threads + tid) % D
                if u < TB and j < rotary_dim and tok0 + u < Tn:
                    # Through locals: the MRoPE row rule inlined into the index and its guards made
                    # TileLang's simplifier run for minutes on some block shapes.
                    fr[0] = T.if_then_else(j < half, j, j - half)
                    fr[1] = _angle_row(fr[0], section_h, section_w)
                    angle[0] = T.cast(positions[fr[1], tok0 + u], f32) * inv_freq[fr[0]]
                    if REDUCED:
                        reduce_angle(angle)
                    # Inline, not bound to names: the first program's CUDA stays as it was.
                    cs[u, j] = T.cast(sin_cos(angle)[1], dt)
                    sn[u, j] = T.cast(T.if_then_else(j < half, -sin_cos(angle)[0], sin_cos(angle)[0]), dt)
        elif TABLE == "pairs":
            # One sincos per (token, frequency), the token fastest: TB·half entries over every thread
            # (one round on all 8 warps for a k program at Qwen's heads, not 8 rounds on 2).
            for it in T.serial(-(-TB * HALF // threads)):
                fr[0] = (it * threads + tid) // TB  # the frequency
                u = (it * threads + tid) % TB
                if fr[0] < half and tok0 + u < Tn:
                    fr[1] = _angle_row(fr[0], section_h, section_w)
                    angle[0] = T.cast(positions[fr[1], tok0 + u], f32) * inv_freq[fr[0]]
                    if REDUCED:
                        reduce_angle(angle)
                    s, c = sin_cos(angle)
                    cs[u, fr[0]] = T.cast(c, dt)
                    cs[u, fr[0] + half] = T.cast(c, dt)
                    sn[u, fr[0]] = T.cast(-s, dt)
                    sn[u, fr[0] + half] = T.cast(s, dt)
        else:
            # warp: each row's lanes form the row's own table (a sincos per frequency, lane-strided),
            # so the rotation needs only the warp's own writes.
            for k in T.unroll(RPT):
                r = p * BR + k * SLOTS + slot
                for i in T.serial(-(-HALF // LANES)):
                    fr[0] = i * LANES + lane
                    if fr[0] < half and r < Tn * N:
                        fr[1] = _angle_row(fr[0], section_h, section_w)
                        angle[0] = T.cast(positions[fr[1], r // N], f32) * inv_freq[fr[0]]
                        if REDUCED:
                            reduce_angle(angle)
                        s, c = sin_cos(angle)
                        cs[k * SLOTS + slot, fr[0]] = T.cast(c, dt)
                        cs[k * SLOTS + slot, fr[0] + half] = T.cast(c, dt)
                        sn[k * SLOTS + slot, fr[0]] = T.cast(-s, dt)
                        sn[k * SLOTS + slot, fr[0] + half] = T.cast(s, dt)
        # 2. Each row's inverse RMS: the lane's squares, then shuffles across its LANES lanes.
        for k in T.unroll(RPT):
            rs[k] = T.float32(0)
            for e in T.unroll(vec):
                rs[k] = rs[k] + T.cast(xl[k, e], f32) * T.cast(xl[k, e], f32)
            for o in T.unroll(LANES.bit_length() - 1):
                rs[k] = rs[k] + T.shfl_xor(rs[k], LANES >> (o + 1))
            rs[k] = T.rsqrt(rs[k] / T.float32(D) + eps)
        # 3. The normalised rows, in place; the rotary lanes' values also to shared memory, where
        #    each channel's rotate_half partner is read below.
        for k in T.unroll(RPT):
            for e in T.unroll(vec):
                xl[k, e] = T.cast((T.cast(xl[k, e], f32) * rs[k]) * (T.float32(1) + T.cast(wl[e], f32)), dt)
            if c0 < rotary_dim:
                for e in T.vectorized(vec):
                    sw[k * SLOTS + slot, c0 + e] = xl[k, e]
        if TABLE == "warp":
            T.sync_warp()  # a row's table and partners were written by its own warp
        else:
            T.sync_threads()
        # 4. The rotation of the rotary lanes (HF's roundings), then the 16-byte stores.
        for k in T.unroll(RPT):
            r = p * BR + k * SLOTS + slot
            if c0 < rotary_dim:
                u = k * SLOTS + slot if TABLE == "warp" else T.min(r // N - tok0, TB - 1)
                for e in T.vectorized(vec):
                    cl[e] = cs[u, c0 + e]
                for e in T.vectorized(vec):
                    sl[e] = sn[u, c0 + e]
                if VECTOR_PARTNERS and half % vec == 0 and c0 + vec <= rotary_dim:
                    # The lane's vector is wholly rotary and its partners are one whole vector, half away:
                    # one 16-byte shared load and a rotation without a guard an element.
                    fr[0] = T.if_then_else(c0 < half, lane + half // vec, lane - half // vec)
                    for e in T.vectorized(vec):
                        ml[e] = sw[k * SLOTS + slot, fr[0] * vec + e]
                    for e in T.unroll(vec):
                        xl[k, e] = rotated(xl[k, e], cl[e], ml[e], sl[e])
                else:
                    for e in T.unroll(vec):
                        ml[e] = sw[k * SLOTS + slot, T.if_then_else(c0 + e < half, c0 + e + half, c0 + e - half)]
                    for e in T.unroll(vec):
                        if c0 + e < rotary_dim:
                            xl[k, e] = rotated(xl[k, e], cl[e], ml[e], sl[e])
            if r < Tn * N and (not PADDED or c0 < D):
                for e in T.vectorized(vec):
                    Y[r // N, r % N, c0 + e] = xl[k, e]

    return lanes


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

    DEPENDENT = key.dependent_launch  # (the program's ``key`` parameter shadows the build key inside)

    D, dt, f32, vec = key.head_dim, key.dtype, "float32", _vec(key.dtype)
    NQ, NKV, pdt = key.q_heads, key.k_heads, key.positions_dtype
    LANES_PROGRAM, REGISTERS = key.program == "lanes", key.registers  # (the prim_func's `key` is the k tensor)
    OWN_BARRIERS = LANES_PROGRAM and key.table != "channels"
    ANGLE_LOCALS = 3 if key.sincos == "reduced" else 1
    HALF = D // 2  # the largest rotary half: rotary_dim <= D
    Tn = T.dynamic("T")
    P = T.dynamic("P")  # position rows: 1 (NeoX) or 3 (MRoPE)
    SQT, SQH, SKT, SKH = T.dynamic("SQT"), T.dynamic("SQH"), T.dynamic("SKT"), T.dynamic("SKH")
    if LANES_PROGRAM:
        lanes_plan = _lanes_plan(key)
        assert lanes_plan is not None  # the refusal turned away every key the lanes program cannot lay out
        threads, LANES, RPT = lanes_plan
        BR = threads // LANES * RPT
        TB = _table_rows(key, BR)
        q_lanes, k_lanes = _lanes_macro(key, NQ), _lanes_macro(key, NKV)
    else:
        plan = _token_heads_plan(key)
        assert plan is not None  # the refusal turned away every key no program holds
        threads, DP, R = plan  # R heads of one token a program
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
        if OWN_BARRIERS:
            # The program places its own barriers: the warp table keeps every exchange in a warp
            # (__syncwarp, no block barrier); TileLang put one between each of the pairs table's
            # four stores (their addresses depend on a runtime half), where one after the table serves.
            T.annotate_pass_configs({"tl.disable_thread_storage_sync": True})
        if LANES_PROGRAM:
            QP = T.ceildiv(Tn * NQ, BR)
            with T.Kernel(QP + T.ceildiv(Tn * NKV, BR), threads=threads) as bx:
                if REGISTERS:
                    T.annotate_min_blocks_per_sm(programs_at_registers(threads, REGISTERS))
                dependent_launch(DEPENDENT)
                tid = T.get_thread_binding()
                xl = T.alloc_local((RPT, vec), dt)
                wl = T.alloc_local((vec,), dt)
                rs = T.alloc_local((RPT,), f32)
                cl = T.alloc_local((vec,), dt)
                sl = T.alloc_local((vec,), dt)
                ml = T.alloc_local((vec,), dt)
                fr = T.alloc_local((2,), "int32")  # a table entry's frequency and position row
                # The angle (and _reduce_angle's multiple of 2π and remainder).
                angle = T.alloc_local((ANGLE_LOCALS,), f32)
                cs = T.alloc_shared((TB, D), dt)
                sn = T.alloc_shared((TB, D), dt)
                sw = T.alloc_shared((BR, D), dt)
                if bx < QP:
                    q_lanes(query, q_weight, query_out, bx, tid, xl, wl, rs, cl, sl, ml, fr, angle, cs, sn, sw,
                            positions, inv_freq, rotary_dim, section_h, section_w, eps, Tn)
                else:
                    k_lanes(key, k_weight, key_out, bx - QP, tid, xl, wl, rs, cl, sl, ml, fr, angle, cs, sn, sw,
                            positions, inv_freq, rotary_dim, section_h, section_w, eps, Tn)
        else:
            with T.Kernel(Tn, QB + KB, threads=threads) as (bx, by):
                dependent_launch(DEPENDENT)
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


_INV_FREQ: dict[tuple[Any, ...], Any] = {}
_INV_FREQ_LOCK = threading.Lock()


def inv_freq_table(theta: float, rotary_dim: int, head_dim: int, device: Any) -> Any:
    """HF's float32 ``inv_freq`` (``1 / theta ** (arange(0, R, 2) / R)``, made on the CPU as HF
    makes it), zero-padded to ``head_dim // 2`` entries, on ``device``; made once per key.

    Looked up on every launch, so the key is the values as given (a ``torch.device`` hashes as
    itself; equal numbers hash alike): building ``str(device)`` a call cost more than the launch's
    other host work (found profiling the decode step's host path)."""
    import torch

    key = (theta, rotary_dim, head_dim, device)
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

    from ._row_views import packed, readable

    D = key.head_dim

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
        elif positions.stride(0) == 0:
            # Text-only MRoPE positions are one row expanded to three (stride 0, what HF passes at a decode
            # step): every frequency's row holds the same positions, so row 0 read by NeoX's rule (sections
            # 0) is the same rotation, without the per-call copy of the expansion (an allocation and a copy
            # launch on the GPU). Read from the strides only: nothing on the device is looked at.
            rows, section_h, section_w = positions[0].unsqueeze(0), 0, 0
        else:
            rows, section_h, section_w = positions, int(mrope_section[1]), int(mrope_section[2])
        # The weights are read in 16-byte vectors (packed where misaligned), the positions an element at a time.
        if not q_weight.is_contiguous() or q_weight.data_ptr() % 16:
            q_weight = packed(q_weight)
        if not k_weight.is_contiguous() or k_weight.data_ptr() % 16:
            k_weight = packed(k_weight)
        fn(query if readable(query) else packed(query), key if readable(key) else packed(key), q_weight, k_weight,
           rows.contiguous(), inv_freq_table(theta, rotary_dim, D, query.device), query_out, key_out,
           int(rotary_dim), section_h, section_w, float(eps))
        return query_out, key_out

    return qk_norm_rope


def build_qk_norm_rope(key: QKNormRopeBuildKey) -> RunLauncher:
    """Compile once per process and return the launcher; ValueError with the refusal reason."""
    return build_run_launcher("qk_norm_rope", key, qk_norm_rope_refusal, _program, _make_run)
