"""The causal conv1d kernels as TileLang programs: the decode step and the varlen prefill.

Host-side decisions (build keys, refusals, the launchers) live in
:mod:`tileops_cuda.kernels.conv1d`; semantics are ``manifest/conv.yaml``'s (the reference is
``tileops_cpu_ref.conv``). Shared layout:

* A thread owns ``VC`` consecutive channels (one 16-byte vector of ``x``). The pool is passed
  flat, ``[S, D * (W - 1)]``, so the thread's windows are ``VC * (W - 1)`` consecutive elements
  (``W - 1`` 16-byte vectors, channel-major: element ``i * (W - 1) + k`` is channel ``c0 + i``,
  tap ``k``) and its weights ``VC * W`` consecutive elements of the flat ``[D * W]`` weight.
* ``x`` is a strided ``[T, D]`` view (row stride ``XS``, unit channel stride): a slice of the
  projection output is read in place. ``out`` is contiguous.
* float32 math; bias and SiLU in float32 (``x · rcp(1 + exp(-x))`` with the approximate
  exp and reciprocal: ~1e-6 relative, far under every output dtype's tolerance; with ``tanh_silu``,
  16-bit outputs only, ``h + h · tanh(h)`` at ``h = x / 2`` with one ``tanh.approx``: 2**-11); one
  rounding to the output dtype.
* Nothing depends on B, T or the pool size at compile time.
* Metadata, unchecked included, is read as the specs' rule (``tileops_cpu_ref.rgdr.clipped_bounds``),
  every entry clipped into ``[0, T]`` in its own dtype as it is loaded (a 64-bit entry never wraps):
  lengths, a negative one counting as 0, summed saturating at T; prefix sums through their running
  maximum, so sequence ``b`` starts at ``clip(max(cu[0..b]))``. Valid metadata reads as written (its
  entries lie in ``[0, T]`` and its prefix sums never decrease). A slot outside ``[0, S)`` is padding
  (never read, never written), tested in the slots' own dtype: a 64-bit slot ``2**32 + k`` is padding,
  not slot ``k`` (:func:`._index_metadata.narrowed_index`).

Decode: one program per (channel block, sequence), plus one row of programs that writes zeros
to the tokens no sequence covers (only unchecked metadata leaves any). A program reads its
sequence's initial window into registers, then runs its tokens in order, writing each
token's window to its slot (skipped when the next token writes the same slot). (A program
that guessed the decode layout to load its window before the metadata resolved measured no
faster on the H200: backends/cuda/NOTES.md, ninth session.)

Varlen (:func:`conv_varlen_program`): one program a chunk of ``chunk`` tokens and a
channel block, its rows loaded a group of ``tokens`` ahead and its window rolling in registers;
a token's sequence comes from one binary search a chunk over the clipped prefix sums' running
maximum (its first ``threads`` entries scanned into shared memory by each program, the rest made
non-decreasing by the launcher, where there are more). A sequence's head
tokens (its first ``W - 1``, whose taps reach into the initial window) are all computed by the
program holding its first token, even past the chunk's end (the next program skips them), and
that program writes the sequence's final window after the reads: each pool slot is read and
written by one thread per channel vector, in program order, so one launch suffices (two
programs reading and writing one slot would have no order between them).

Bounds (why a key's ``unchecked_index`` may drop TileLang's bounds checks: every access is in
range by construction, for any metadata values the op accepts: negative, out-of-range or
repeated slots, lengths or cu_seqlens past T, decreasing or negative, accepted counts out of
range; the shape rules give ``conv_state_indices``, ``has_initial_state`` and
``num_accepted_tokens`` B entries, and the launchers launch nothing for T = 0):

* Decode. Every entry is clipped into ``[0, T]`` as it is loaded, so the start (their saturating
  sum or maximum) is ``s`` in ``[0, T]``, and ``L = clip(end, s, T) - s``, so a token
  ``t = s + j`` (``j < L``) is in ``[0, T)``: its ``x`` row, ``out`` row, ``slots[t]`` and
  ``slots[min(t + 1, T - 1)]``; the first window's slot index is clipped into ``[0, T)``. Pool
  rows are read and written only under ``0 <= slot < S``. The earlier entries (lengths or prefix
  sums) are read at indices below ``by <= B``; the sequence's own entry only where ``by`` is below
  their count and its accepted count only where ``by < B`` (B may be 0: the unchecked program
  checks that itself, TileLang's check is gone). The zero rows are ``[0, lo)`` and ``[s, T)``
  with ``0 <= lo, s <= T``.
* Varlen. A program's chunk starts below T (``by < ceil(T / C)``); rows before it are read
  where ``t >= 0``, rows of the chunk where ``t < T``. The search's global reads are at
  ``found + step < nb`` (``found >= 0``) or ``min(found (+ 1), nb)``, both in ``cu``'s ``nb`` or
  ``nb + 1`` entries (in-kernel lengths are fewer than ``threads``: those reads go to shared
  memory); the ``threads`` entries scanned into shared memory are read at ``min(tid, nb)``. A
  token is computed (``code >= 0``) only where it is owned: ``lo <= t < hi``, ``t < T``; its
  ``out`` row is then in range and the sequence ``c - 1 = pos < nb = B``, so ``slots[c - 1]``
  and ``has_init[c - 1]`` are. Pool rows only under ``0 <= slot < S``. The final window's rows
  ``u = ends - W1 + k`` with ``u >= t`` lie in ``[t, min(hi, T))``; one with ``u < t`` comes
  from the initial window at tap ``W1 + u - t``, in ``[1, W1)`` since ``ends >= t + 1``.
  Uncovered tokens (``code == -2``) are written only for ``t < T``.
* Both: weights and bias at channels ``c0 + e < D`` (``c0 < D`` is checked, ``D`` is whole
  vectors).

The GPU tests run every case, garbage metadata included, through both programs and compare
the bits (tests/test_conv_gpu.py).

tilelang is imported inside the builders, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

from typing import TYPE_CHECKING, Any

from ._common import annotate_pass_configs, block_scan_macro, dependent_launch, programs_at_registers
from ._index_metadata import clip_tokens, narrowed_index

if TYPE_CHECKING:
    from .conv1d import ConvUpdateBuildKey, ConvVarlenBuildKey

__all__ = ["conv_update_program", "conv_varlen_program"]


#: ``tl_tanh_approx``: PTX's ``tanh.approx.f32`` (one MUFU operation; relative error 2**-11), which CUDA's math
#: library offers under no name (``ConvVarlenBuildKey.tanh_silu``).
_TANH_APPROX = ("__device__ __forceinline__ float tl_tanh_approx(float x) {\n"
                "  float y;\n  asm(\"tanh.approx.f32 %0, %1;\" : \"=f\"(y) : \"f\"(x));\n  return y;\n}\n")


def _silu(key: "ConvUpdateBuildKey | ConvVarlenBuildKey", acc: Any) -> Any:
    """SiLU of the float32 ``acc`` as both programs compute it: ``acc · rcp(1 + exp(-acc))`` with the approximate
    exp and reciprocal, or with ``tanh_silu`` ``h + h · tanh(h)`` at ``h = acc / 2`` (``tl_tanh_approx``)."""
    import tilelang.language as T

    if key.tanh_silu:
        h = acc * T.float32(0.5)
        return h + h * T.call_extern("float32", "tl_tanh_approx", h)
    return acc * T.fast_rcp(T.float32(1) + T.__exp(-acc))


def _lanes(dtype: str) -> int:
    return 16 // {"float16": 2, "bfloat16": 2, "float32": 4}[dtype]


def _load_taps(key: "ConvUpdateBuildKey | ConvVarlenBuildKey") -> Any:
    """A macro loading a thread's weights (``VC * W``) and bias (``VC``) as 16-byte vectors;
    both programs issue it first, before anything that waits on metadata."""
    import tilelang.language as T

    VC, W = _lanes(key.dtype), key.width

    @T.macro
    def load_taps(weight, bias, wv, bv, c0):
        for p in T.unroll(W):
            for e in T.vectorized(VC):
                wv[p * VC + e] = weight[c0 * W + p * VC + e]
        if key.has_bias:
            for e in T.vectorized(VC):
                bv[e] = bias[c0 + e]

    return load_taps


def _running_max(threads: int) -> Any:
    """A macro ``(part, wsum, tid)``: ``part[0]`` (a one-element int32 local buffer, one a thread,
    non-negative) becomes the maximum over threads ``0..tid`` of the block; ``wsum`` (int32 shared,
    one entry a warp) is left holding each warp's maximum (one barrier; the caller fences before
    writing it again). A lane below a shuffle's offset gets its own value back, which the maximum
    absorbs, so the warp's steps need no lane test."""
    import tilelang.language as T

    @T.macro
    def running_max(part, wsum, tid):
        for off in T.unroll(5):
            part[0] = T.max(part[0], T.shfl_up(part[0], 1 << off))
        if tid % 32 == 31:
            wsum[tid // 32] = part[0]
        T.sync_threads()
        for w in T.unroll(max(threads // 32, 1)):
            part[0] = T.max(part[0], T.if_then_else(w < tid // 32, wsum[w], 0))

    return running_max


def _find_sequence(threads: int, Tn: Any) -> Any:
    """A macro setting ``found[:3]`` to ``(b, cu[b], cu[b + 1])`` for token ``t``, ``b`` the last
    with ``cu[b] <= t`` (halving steps from ``top``, the largest power of two <= B; ``found[3]``
    holds the step); ``cu`` must be non-decreasing, as the prefix sums the spec reads (clipped,
    their running maximum) are.
    The first ``threads`` entries come from ``cus`` (shared memory), so the search's dependent
    steps are shared-memory reads (global ones only past that many sequences, clipped into
    ``[0, Tn]`` as read: ``Tn`` is the program's token count, a closure, not a macro argument, which
    would rename it in the kernel's signature)."""
    import tilelang.language as T

    TH = threads

    @T.macro
    def find_sequence(cu, cus, NB, t, top, nbits, found):
        found[0] = 0
        found[3] = top
        for _ in T.serial(nbits):
            if found[0] + found[3] < NB:
                if T.if_then_else(found[0] + found[3] < TH, cus[T.min(found[0] + found[3], TH - 1)],
                                  clip_tokens(cu[found[0] + found[3]], Tn)) <= t:
                    found[0] = found[0] + found[3]
            found[3] = found[3] // 2
        found[1] = T.if_then_else(found[0] < TH, cus[T.min(found[0], TH - 1)],
                                  clip_tokens(cu[T.min(found[0], NB)], Tn))
        found[2] = T.if_then_else(found[0] + 1 < TH, cus[T.min(found[0] + 1, TH - 1)],
                                  clip_tokens(cu[T.min(found[0] + 1, NB)], Tn))

    return find_sequence


def conv_update_program(key: "ConvUpdateBuildKey") -> Any:  # noqa: C901 - one kernel, read top to bottom
    """The decode PrimFunc: ``(x, pool, weight, bias, seq_meta, slots, nacc, out)``; absent
    optional inputs are passed as one-element dummies the program never reads. With ``key.speculate``
    the first window, its slot and the first x row are loaded at a guessed start beside the metadata and
    kept where the metadata agrees (:attr:`ConvUpdateBuildKey.speculate`): the same bits."""
    import tilelang.language as T

    i32, f32, dt = "int32", "float32", key.dtype
    D, W = key.dim, key.width
    W1 = W - 1
    VC = _lanes(dt)
    TH = key.threads
    NCB = (D + TH * VC - 1) // (TH * VC)
    lengths_style = key.seq_lens_style == "lengths"
    has_acc = key.accepted_dtype is not None
    Tn, XS, S, BM, NA, NBIAS = (T.dynamic(n) for n in ("T", "XS", "S", "BM", "NA", "NBIAS"))
    NB = BM if lengths_style else BM - 1
    load_taps = _load_taps(key)
    SPEC = key.speculate  # (ConvUpdateBuildKey.speculate: the speculative first window)

    def combine(a, b):
        """The reduction of the earlier sequences' clipped entries into a start (both in ``[0, T]``)."""
        return T.min(a + b, Tn) if lengths_style else T.max(a, b)

    @T.macro
    def zero_rows(seq_meta, out, s, c0, zero):
        """Zeros for the tokens outside [first start, last end): for the last row of programs
        ``s`` is where the last sequence ends (see the bounds). A macro, not inline: its
        argument binding (a copy of ``s``) is part of the registered program's CUDA."""
        lo = clip_tokens(seq_meta[0], Tn) if not lengths_style else 0
        for t in T.serial(lo):
            for e in T.vectorized(VC):
                out[t, c0 + e] = zero[e]
        for t in T.serial(Tn - s):
            for e in T.vectorized(VC):
                out[s + t, c0 + e] = zero[e]

    @T.macro
    def load_window(pool, window, slot, c0):
        """A thread's window (its channels' W - 1 rows) at ``slot`` of the pool, zeros where the slot is padding
        or outside the pool: the speculating program's two window loads (the guessed one, and the one where the
        guess missed)."""
        for p in T.unroll(W1):
            for e in T.vectorized(VC):
                window[p * VC + e] = T.if_then_else(
                    slot >= 0 and slot < S, pool[T.max(slot, 0), c0 * W1 + p * VC + e], T.cast(0, dt)
                )

    @T.prim_func
    def conv_update(
        x: T.StridedTensor((Tn, D), (XS, 1), dt),
        pool: T.Tensor((S, D * W1), dt),
        weight: T.Tensor((D * W,), dt),
        bias: T.Tensor((NBIAS,), dt),
        seq_meta: T.Tensor((BM,), key.seq_lens_dtype),
        slots: T.Tensor((Tn,), key.slot_dtype),
        nacc: T.Tensor((NA,), key.accepted_dtype or i32),
        out: T.Tensor((Tn, D), dt),
    ):
        T.assume(XS % VC == 0)  # the launcher passes only rows of whole 16-byte vectors
        annotate_pass_configs(key.unchecked_index)  # in bounds by construction: the module's "Bounds"
        with T.Kernel(NCB, NB + 1, threads=TH) as (bx, by):
            if key.registers:
                T.annotate_min_blocks_per_sm(programs_at_registers(TH, key.registers))
            if key.tanh_silu:
                T.import_source(_TANH_APPROX)
            dependent_launch(key.dependent_launch)
            tid = T.get_thread_binding()
            c0 = (bx * TH + tid) * VC
            red = T.alloc_shared((max(TH // 32, 1),), i32)
            own = T.alloc_var(i32)
            start = T.alloc_var(i32)
            end = T.alloc_var(i32)
            s = T.alloc_var(i32)
            L = T.alloc_var(i32)
            acc_n = T.alloc_var(i32)
            slot0 = T.alloc_var(i32)
            wv = T.alloc_local((VC * W,), dt)
            bv = T.alloc_local((VC,), dt)
            sv = T.alloc_local((VC * W1,), dt)  # the running window, channel-major
            xc = T.alloc_local((VC,), dt)
            accv = T.alloc_local((VC,), f32)
            ov = T.alloc_local((VC,), dt)
            zero = T.alloc_local((VC,), dt)
            if SPEC:
                cand = T.alloc_local((SPEC,), i32)  # the guessed tokens' slots
                svg = T.alloc_local((VC * W1,), dt)  # the window at the guessed first slot
                xg = T.alloc_local((VC,), dt)  # the guessed first token's x
                slot_g = T.alloc_var(i32)
                acc_g = T.alloc_var(i32)
                hit = T.alloc_var(i32)
            # -- where sequence `by` starts and ends (for by == NB: the end of the last one) -----
            # Every load that does not depend on another is issued first: the chain
            # metadata -> slot -> window is the decode step's latency, paid once per program.
            if c0 < D:
                load_taps(weight, bias, wv, bv, c0)
            if key.unchecked_index:  # B may be 0 (BM = NA = 0): read only where `by` is a sequence
                own = T.if_then_else(by < BM, clip_tokens(seq_meta[by], Tn), 0)
                acc_n = T.if_then_else(by < NA, clip_tokens(nacc[by], Tn, 1), 0) if has_acc else 1
            else:
                own = clip_tokens(seq_meta[T.max(T.min(by, BM - 1), 0)], Tn)
                acc_n = clip_tokens(nacc[T.max(T.min(by, NA - 1), 0)], Tn, 1) if has_acc else 1
            if SPEC:
                # The guess (ConvUpdateBuildKey.speculate): every sequence holds T // B tokens, so this one starts at
                # by * (T // B). Its slot candidates, its first x row and the window at its first accepted token's
                # slot are loaded now, beside the metadata below, not after it; kept only where the metadata agrees.
                gl = Tn // T.max(NB, 1)
                acc_g = T.max(T.min(acc_n, gl), 1)
                slot_g = -1
                if Tn > 0 and by < NB and gl > 0:  # (not on acc_g: the candidates go out beside its load)
                    for j in T.unroll(SPEC):
                        cand[j] = narrowed_index(slots[T.min(by * gl + j, Tn - 1)], S)
                    for j in T.unroll(SPEC):
                        slot_g = T.if_then_else(acc_g == j + 1, cand[j], slot_g)
                    if c0 < D:
                        for e in T.vectorized(VC):
                            xg[e] = x[T.min(by * gl, Tn - 1), c0 + e]
                        load_window(pool, svg, slot_g, c0)
            # The start is the earlier entries reduced (the spec's rule, every entry clipped into
            # [0, T] first): lengths summed saturating at T, prefix sums' maximum with cu[by] (a
            # decreasing entry starts no sequence below an earlier one). Valid metadata: the plain sum,
            # cu[by] itself.
            part = T.alloc_var(i32)
            part = 0  # the identity of both reductions
            for h in T.unroll(2):  # the first 2 * TH entries: independent loads, all in flight
                if h * TH + tid < by:
                    part = combine(part, clip_tokens(seq_meta[h * TH + tid], Tn))
            for it in T.serial(T.max(T.ceildiv(by, TH) - 2, 0)):
                if (it + 2) * TH + tid < by:
                    part = combine(part, clip_tokens(seq_meta[(it + 2) * TH + tid], Tn))
            for off in T.unroll(5):
                part = combine(part, T.shfl_xor(part, 16 >> off))
            if tid % 32 == 0:
                red[tid // 32] = part
            T.sync_threads()
            start = 0 if lengths_style else own
            for w in T.unroll(max(TH // 32, 1)):
                start = combine(start, red[w])
            if lengths_style:
                end = start + T.if_then_else(by < NB, own, 0)
            else:
                end = clip_tokens(seq_meta[T.min(by + 1, NB)], Tn)
            s = T.max(T.min(start, Tn), 0)
            L = T.max(T.min(end, Tn), s) - s
            for e in T.vectorized(VC):
                zero[e] = T.cast(0, dt)

            # -- the initial window: the slot of the first accepted token, zeros if padding -------
            acc_n = T.max(T.min(acc_n, L), 1)
            if SPEC:
                # The guess held where this sequence starts at the guessed token and holds T // B of them: its first
                # accepted token is then the guessed one, and its slot, x row and window are the ones loaded.
                hit = T.if_then_else(Tn > 0 and by < NB and gl > 0 and acc_g <= SPEC and L > 0 and s == by * gl
                                     and L == gl, 1, 0)
                slot0 = T.if_then_else(hit == 1, slot_g, T.if_then_else(
                    L > 0, narrowed_index(slots[T.max(T.min(s + acc_n - 1, Tn - 1), 0)], S), -1))
            else:
                slot0 = T.if_then_else(L > 0, narrowed_index(slots[T.max(T.min(s + acc_n - 1, Tn - 1), 0)], S), -1)
            if c0 < D:
                if by < NB:
                    if SPEC:
                        if hit == 1:
                            for p in T.unroll(W1):
                                for e in T.vectorized(VC):
                                    sv[p * VC + e] = svg[p * VC + e]
                        else:
                            load_window(pool, sv, slot0, c0)
                    else:  # (inline, not the macro: its argument binding would change the registered CUDA)
                        for p in T.unroll(W1):
                            for e in T.vectorized(VC):
                                sv[p * VC + e] = T.if_then_else(
                                    slot0 >= 0 and slot0 < S, pool[T.max(slot0, 0), c0 * W1 + p * VC + e],
                                    T.cast(0, dt)
                                )
                    for j in T.serial(L):
                        t = s + j
                        if SPEC:
                            for e in T.vectorized(VC):
                                xc[e] = T.if_then_else(hit == 1 and j == 0, xg[e], x[t, c0 + e])
                        else:
                            for e in T.vectorized(VC):
                                xc[e] = x[t, c0 + e]
                        for i in T.unroll(VC):
                            accv[i] = T.cast(bv[i], f32) if key.has_bias else T.float32(0)
                            for k in T.unroll(W1):
                                accv[i] = accv[i] + T.cast(wv[i * W + k], f32) * T.cast(sv[i * W1 + k], f32)
                            accv[i] = accv[i] + T.cast(wv[i * W + W1], f32) * T.cast(xc[i], f32)
                            if key.silu:
                                accv[i] = _silu(key, accv[i])
                            ov[i] = T.cast(accv[i], dt)
                        for e in T.vectorized(VC):
                            out[t, c0 + e] = ov[e]
                        for i in T.unroll(VC):
                            for k in T.unroll(W1 - 1):
                                sv[i * W1 + k] = sv[i * W1 + k + 1]
                            sv[i * W1 + W1 - 1] = xc[i]
                        sl = narrowed_index(slots[t], S)
                        # A slot the next token of this sequence writes again is skipped: nothing
                        # reads it in between, so the final contents are identical.
                        nxt = T.if_then_else(j + 1 < L, narrowed_index(slots[T.min(t + 1, Tn - 1)], S), -1)
                        if sl >= 0 and sl < S and sl != nxt:
                            for p in T.unroll(W1):
                                for e in T.vectorized(VC):
                                    pool[sl, c0 * W1 + p * VC + e] = sv[p * VC + e]
                else:
                    zero_rows(seq_meta, out, s, c0, zero)

    return conv_update


def conv_varlen_program(key: "ConvVarlenBuildKey") -> Any:  # noqa: C901 - one kernel, read top to bottom
    """The varlen PrimFunc: ``(x, pool, weight, bias, cu, slots, has_init, out, top, nbits, scan)``;
    every output row and every non-empty sequence's final window written. ``top`` is the largest
    power of two <= B (0 when B == 0) and ``nbits`` its bit length: the binary search's step and
    step count. ``cu`` is cu_seqlens (``scan`` = 0) or, for a ``meta_lengths`` key, fewer than
    ``threads`` sequence lengths (``scan`` = 1), summed here in one block-wide scan: a
    lengths-style call then costs no prefix-sum launches.

    Why it streams: a program that computes one tile of tokens re-reads ``W - 1`` rows of ``x``
    (and the weights) a tile, pays its metadata search and two barriers a tile, and holds
    nothing in flight while it computes and stores; on the H200 such a tiled program reached
    60-61% of the same-size copy at 4k tokens where this one reaches 67-77% (backends/cuda/
    NOTES.md, sixth session of 2026-12-02). Here a program runs ``chunk`` tokens in groups of ``tokens``: group
    ``g + 1``'s rows are loaded (16 bytes a thread a row) while group ``g`` is computed, the
    window before the current token rolls in float32 registers, so the only re-read is
    ``W - 1`` rows a chunk, and the search runs once a chunk.

    Each token's role comes from one search per chunk, kept in shared memory as ``code``:
    ``-2`` uncovered (its output is zero), ``-1`` not this program's, ``0`` computed here,
    ``b + 1`` the first token of sequence ``b``. Ownership: a sequence's
    head tokens (its first ``W - 1``) belong to the program holding its first token, which runs
    up to ``W - 2`` tokens past its chunk. At a first token the thread reads the sequence's
    initial window from its slot (zeros without one), writes the final window there (its last
    ``W - 1`` inputs, the initial window's tail where the sequence is shorter), and restarts the
    rolling window from the initial one; any other token's window is the previous ``W - 1``
    rows, which the rolling window holds. Every slot is read and then written by one thread per
    channel vector, so one launch suffices.
    """
    import tilelang.language as T

    i32, f32, dt = "int32", "float32", key.dtype
    D, W = key.dim, key.width
    W1 = W - 1
    VC = _lanes(dt)
    TH, G, C = key.threads, key.tokens, key.chunk
    E = W1 - 1  # tokens past the chunk a program may compute: its sequences' head tokens
    NG = C // G
    NCB = (D + TH * VC - 1) // (TH * VC)
    ROUNDS = (C + E + TH - 1) // TH  # of the per-token search, one token a thread a round
    Tn, XS, S, BM, NI, NH, NBIAS = (T.dynamic(n) for n in ("T", "XS", "S", "BM", "NI", "NH", "NBIAS"))
    load_taps = _load_taps(key)
    find_sequence = _find_sequence(TH, Tn)
    block_scan = block_scan_macro(TH)
    running_max = _running_max(TH)

    @T.macro
    def token(x, pool, slots, has_init, out, code, ends, wf, bv, xw, nv, xr, xe, accv, ov, rows, r, j, t, c0,
              starts):  # fmt: skip
        """Token ``t`` (chunk index ``j``, its row at ``rows[r * VC:]``): a sequence's start where
        ``starts`` (a Python bool: the code exists only on the groups' slow path), its output,
        then the window rolled."""
        c = T.if_then_else(j < C + E, code[T.min(j, C + E - 1)], -1)
        if starts:
            if c > 0:
                # -- the first token of sequence c - 1: its initial window, then its final window
                # written to the same slot (this thread is its only reader and writer) ---------
                if key.end_rows_first:  # the final window's x rows in flight before the slot is read
                    for k in T.unroll(W1):
                        if ends[j] - W1 + k >= t:
                            for e in T.vectorized(VC):
                                xe[k * VC + e] = x[ends[j] - W1 + k, c0 + e]
                slot = narrowed_index(slots[c - 1], S)
                valid = slot >= 0 and slot < S
                for p in T.unroll(W1):  # the initial window, one pool vector at a time, into the window
                    for e in T.vectorized(VC):
                        if key.has_init:
                            xr[e] = T.if_then_else(valid and has_init[c - 1] != 0,
                                                   pool[T.max(T.min(slot, S - 1), 0), c0 * W1 + p * VC + e],
                                                   T.cast(0, dt))
                        else:
                            xr[e] = T.cast(0, dt)
                    for e in T.unroll(VC):
                        xw[(p * VC + e) % W1 * VC + (p * VC + e) // W1] = T.cast(xr[e], f32)
                if valid:
                    e_ = ends[j]
                    for k in T.unroll(W1):
                        u = e_ - W1 + k
                        if u >= t:
                            if key.end_rows_first:
                                for v in T.unroll(VC):
                                    nv[v * W1 + k] = xe[k * VC + v]
                            else:
                                for e in T.vectorized(VC):
                                    xr[e] = x[u, c0 + e]
                                for v in T.unroll(VC):
                                    nv[v * W1 + k] = xr[v]
                        else:  # a sequence shorter than W - 1: the initial window's tail
                            for v in T.unroll(VC):
                                if key.has_init:
                                    nv[v * W1 + k] = T.if_then_else(
                                        has_init[c - 1] != 0, pool[slot, (c0 + v) * W1 + W1 + u - t], T.cast(0, dt))
                                else:
                                    nv[v * W1 + k] = T.cast(0, dt)
                    for p in T.unroll(W1):
                        for e in T.vectorized(VC):
                            pool[slot, c0 * W1 + p * VC + e] = nv[p * VC + e]
        if c >= 0:
            for v in T.unroll(VC):
                accv[v] = T.cast(bv[v], f32) if key.has_bias else T.float32(0)
                for k in T.unroll(W1):
                    accv[v] = accv[v] + wf[v * W + k] * xw[k * VC + v]
                accv[v] = accv[v] + wf[v * W + W1] * T.cast(rows[r * VC + v], f32)
                if key.silu:
                    accv[v] = _silu(key, accv[v])
                ov[v] = T.cast(accv[v], dt)
            for e in T.vectorized(VC):
                out[t, c0 + e] = ov[e]
        elif c == -2:
            for e in T.vectorized(VC):
                out[t, c0 + e] = T.cast(0, dt)
        for k in T.unroll(W1 - 1):
            for v in T.unroll(VC):
                xw[k * VC + v] = xw[(k + 1) * VC + v]
        for v in T.unroll(VC):
            xw[(W1 - 1) * VC + v] = T.cast(rows[r * VC + v], f32)

    @T.macro
    def run_group(x, pool, slots, has_init, out, code, ends, starts, wf, bv, xw, nv, xr, xe, xt, accv, ov, xs, c0,
                  t0, g):  # fmt: skip
        """The tokens of group ``g`` (its rows in ``xs``): the fast path where no sequence starts in
        the group, else one token at a time with its row re-read (an L1 hit) and the start logic
        (``unrolled_starts``: unrolled from ``xs`` like the fast path, the start logic included)."""
        if starts[g] == 0:
            for i in T.unroll(G):
                token(x, pool, slots, has_init, out, code, ends, wf, bv, xw, nv, xr, xe, accv, ov,
                      xs, i, g * G + i, t0 + g * G + i, c0, False)
        elif key.unrolled_starts:
            for i in T.unroll(G):
                token(x, pool, slots, has_init, out, code, ends, wf, bv, xw, nv, xr, xe, accv, ov,
                      xs, i, g * G + i, t0 + g * G + i, c0, True)
        else:
            for i in T.serial(G):
                if t0 + g * G + i < Tn:
                    for e in T.vectorized(VC):
                        xt[e] = x[t0 + g * G + i, c0 + e]
                else:
                    for e in T.vectorized(VC):
                        xt[e] = T.cast(0, dt)
                token(x, pool, slots, has_init, out, code, ends, wf, bv, xw, nv, xr, xe, accv, ov,
                      xt, 0, g * G + i, t0 + g * G + i, c0, True)

    @T.macro
    def load_group(x, xn, t0, g, c0):
        """Group ``g``'s rows of the chunk at ``t0`` into ``xn`` (zeros past T)."""
        for i in T.unroll(G):
            if t0 + g * G + i < Tn:
                for e in T.vectorized(VC):
                    xn[i * VC + e] = x[t0 + g * G + i, c0 + e]
            else:
                for e in T.vectorized(VC):
                    xn[i * VC + e] = T.cast(0, dt)

    flat = key.flat_grid
    # The grid: channel blocks along x, chunks along y (65535 at most: 1,048,560 tokens at chunk 16; the launcher
    # runs a longer call flat), or with ``flat_grid`` both along x, channel blocks still varying fastest (the same
    # order of programs).
    GX = NCB * T.ceildiv(Tn, C) if flat else NCB
    GY = 1 if flat else T.ceildiv(Tn, C)

    def first_channel(gx, tid):
        """The thread's first channel in program ``gx`` of the grid."""
        return ((T.truncmod(gx, NCB) if flat else gx) * TH + tid) * VC

    def first_token(gx, gy):
        """The first token of the chunk of program ``(gx, gy)``."""
        return (T.truncdiv(gx, NCB) if flat else gy) * C

    @T.prim_func
    def conv_varlen(
        x: T.StridedTensor((Tn, D), (XS, 1), dt),
        pool: T.Tensor((S, D * W1), dt),
        weight: T.Tensor((D * W,), dt),
        bias: T.Tensor((NBIAS,), dt),
        cu: T.Tensor((BM,), key.cu_dtype),
        slots: T.Tensor((NI,), key.slot_dtype),
        has_init: T.Tensor((NH,), "uint8"),
        out: T.Tensor((Tn, D), dt),
        top: T.int32,
        nbits: T.int32,
        scan: T.int32,
    ):
        T.assume(XS % VC == 0)  # the launcher passes only rows of whole 16-byte vectors
        annotate_pass_configs(key.unchecked_index)  # in bounds by construction: the module's "Bounds"
        with T.Kernel(GX, GY, threads=TH) as (bx, by):
            if key.registers:
                T.annotate_min_blocks_per_sm(programs_at_registers(TH, key.registers))
            if key.tanh_silu:
                T.import_source(_TANH_APPROX)
            dependent_launch(key.dependent_launch)
            tid = T.get_thread_binding()
            c0 = first_channel(bx, tid)
            t0 = first_token(bx, by)
            cus = T.alloc_shared((TH,), i32)  # cu_seqlens' first TH entries: the search's steps
            code = T.alloc_shared((C + E,), i32)
            ends = T.alloc_shared((C + E,), i32)  # where each token's sequence ends (read at first tokens)
            starts = T.alloc_shared((NG + 1,), i32)  # whether a group holds a sequence's first token
            found = T.alloc_local((4,), i32)  # a token's sequence, its bounds, the search's step
            nb = T.alloc_var(i32)  # sequences: BM - 1 for cu_seqlens, BM for lengths scanned here
            wv = T.alloc_local((VC * W,), dt)
            bv = T.alloc_local((VC,), dt)
            wf = T.alloc_local((VC * W,), f32)  # the taps in float32, converted once
            xw = T.alloc_local((W1 * VC,), f32)  # the window before the current token, tap-major
            xs = T.alloc_local((G * VC,), dt)  # this group's rows
            nv = T.alloc_local((VC * W1,), dt)  # a final window, channel-major like the pool
            xr = T.alloc_local((VC,), dt)
            xe = T.alloc_local((W1 * VC if key.end_rows_first else 1,), dt)  # a final window's x rows, row-major
            xt = T.alloc_local((VC,), dt)  # the current row on a group's slow path
            accv = T.alloc_local((VC,), f32)
            ov = T.alloc_local((VC,), dt)
            # -- loads that need no metadata first: taps, the window rows before the chunk, the
            # first group; in flight during the search ------------------------------------------
            if c0 < D:
                load_taps(weight, bias, wv, bv, c0)
                for k in T.unroll(W1):
                    if t0 - W1 + k >= 0:
                        for e in T.vectorized(VC):
                            xr[e] = x[t0 - W1 + k, c0 + e]
                        for v in T.unroll(VC):
                            xw[k * VC + v] = T.cast(xr[v], f32)
                    else:
                        for v in T.unroll(VC):
                            xw[k * VC + v] = T.float32(0)
                for i in T.unroll(G):
                    if t0 + i < Tn:
                        for e in T.vectorized(VC):
                            xs[i * VC + e] = x[t0 + i, c0 + e]
                    else:
                        for e in T.vectorized(VC):
                            xs[i * VC + e] = T.cast(0, dt)
            # -- each token's role (see the docstring), one binary search a token over the prefix
            # sums as the spec reads them, cummax(clip(cu_seqlens)) (its first TH entries in shared
            # memory; lengths-style metadata of fewer than TH sequences is turned into them here,
            # ``scan`` = 1: each length clipped into [0, T], then summed) -------------------------
            part = T.alloc_local((1,), i32)
            wsum = T.alloc_shared((max(TH // 32, 1),), i32)
            if key.meta_lengths:
                own_len = T.alloc_var(i32)
                nb = BM - 1 + scan
                own_len = T.if_then_else(scan != 0 and tid < BM, clip_tokens(cu[T.min(tid, BM - 1)], Tn), 0)
                part[0] = own_len
                block_scan(part, wsum, tid)  # of the lengths
                # (scan = 0: the launcher's prefix sums, non-decreasing already)
                cus[tid] = T.if_then_else(scan != 0, part[0] - own_len, clip_tokens(cu[T.min(tid, nb)], Tn))
            else:
                nb = BM - 1
                part[0] = clip_tokens(cu[T.min(tid, nb)], Tn)
                running_max(part, wsum, tid)  # a no-op on valid cu_seqlens
                cus[tid] = part[0]
            for r in T.unroll((NG + TH) // TH):
                if r * TH + tid <= NG:
                    starts[r * TH + tid] = 0
            T.sync_threads()
            for r in T.unroll(ROUNDS):
                if r * TH + tid < C + E:
                    jj = r * TH + tid
                    t = t0 + jj
                    find_sequence(cu, cus, nb, t, top, nbits, found)
                    pos, lo, hi = found[0], found[1], found[2]
                    own = nb > 0 and t < Tn and lo <= t and t < hi and lo >= 0
                    code[jj] = T.if_then_else(
                        not own, T.if_then_else(jj < C and t < Tn, -2, -1),
                        T.if_then_else(t - lo >= W1, T.if_then_else(jj < C, 0, -1),
                                       T.if_then_else(lo >= t0 and lo < t0 + C,
                                                      T.if_then_else(lo == t, pos + 1, 0), -1)))
                    ends[jj] = T.min(hi, Tn)  # metadata past T (unchecked) never reads past x
                    if own and lo == t:
                        starts[jj // G] = 1
            T.sync_threads()
            if c0 < D:
                for q in T.unroll(VC * W):
                    wf[q] = T.cast(wv[q], f32)
                xn = T.alloc_local((G * VC,), dt)  # the next group's rows, in flight during this group
                for g in T.serial(NG + 1):  # the chunk's groups, then its head tokens past the end
                    if g + 1 < NG:
                        load_group(x, xn, t0, g + 1, c0)
                    elif g + 1 == NG:
                        for i in T.unroll(G):
                            if i < E and code[C + i] >= 0:
                                for e in T.vectorized(VC):
                                    xn[i * VC + e] = x[t0 + C + i, c0 + e]
                            else:
                                for e in T.vectorized(VC):
                                    xn[i * VC + e] = T.cast(0, dt)
                    run_group(x, pool, slots, has_init, out, code, ends, starts, wf, bv, xw, nv, xr, xe, xt, accv,
                              ov, xs, c0, t0, g)  # fmt: skip
                    for q in T.unroll(G * VC):
                        xs[q] = xn[q]

    return conv_varlen
