"""The block shapes the registered layer-op kernels launch with: one table, by row width.

A block shape is the fields of a build key after ``arch`` (threads, rows or tokens per
program, passes, a persistent grid, register bounds; each kernel module documents its own).
The registered kernel forms its build key from the call (dtypes, sizes, flags) and then takes
the first entry of its row here whose bound holds for the row width in bytes, a rule on
shapes only (the batch and token counts never enter a build key). ``bench/layer_ops_sweep.py``
prints each candidate's block shape in exactly this form: a measured winner is copied into
the table as it was printed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._common import launchable_on

__all__ = ["BLOCK_SHAPES", "block_shape_of", "with_block_shape"]

#: Registered kernel class -> ((largest row width in bytes the entry serves, or None for any
#: width; build-key fields), ...): the first entry that holds wins; fields left out keep the
#: build key's defaults. Row widths: hidden (norms), D (gated norm), NV (gating; a/b rows),
#: D (conv; channels), D (QKNormRope; a head), E (routing; a token's logits), times the element size.
BLOCK_SHAPES: dict[str, tuple[tuple[int | None, dict[str, Any]], ...]] = {
    # From layer_ops_sweep.py on the H200, 2026-12-02 (bench/results/session-2026-12-02e/norms_sweep.log):
    # the fastest correct shape by graph time on each kernel's prefill row, % of the same-size copy.
    # ZeroCentred 20.54 -> 19.94 us (94.3%), FusedAdd 38.85 -> 37.36 us (97.8%), Gated 31.51 -> 28.12 us
    # (99.1%; the fast SiLU's error 2.9e-3 equals the exact one's), gating 5.78 -> 5.12 us (87.5%).
    "TileLangZeroCentredRMSNorm": ((None, {"threads": 256, "rows": 1, "passes": 1, "programs": 0,
                                           "early_weight": True, "registers": 56}),),
    "TileLangFusedAddZeroCentredRMSNorm": ((None, {"threads": 128, "rows": 0, "passes": 1, "programs": 0,
                                                   "early_weight": True, "registers": 0}),),
    "TileLangGatedRMSNorm": ((None, {"programs": 0, "early_weight": True, "registers": 64, "fast_silu": True}),),
    "TileLangGDNGating": ((None, {"threads": 128, "vectors": 1, "fast_math": True}),),
    # Conv update: the t2 (MTP) row's best, 20.53 -> 19.23 us (80.6%); on the t1 row it is 13.17 us against
    # the best 13.08 (sixth session: 13.52 against 13.12 at 64 threads, 19.02 the t2 row's best again).
    # Varlen conv, the streamed program (sixth session, graph time): the 8-sequence row's best, 45.74 us
    # (77.4% of the same-size copy; the tiled program it replaced 57.94 us); on the 1-sequence row 52.88
    # us against the best 51.71 (256 threads). Longer chunks were faster at every step (16, 32, 64).
    # The update without bounds checks (fourteenth session, unchk_conv_sweep.json, graph time in one run):
    # t1 13.06 us against 13.55 (79.4% of the same-size copy against 76.5%), t2 19.35 against 19.19 (0.8%
    # slower); bit-equal to the checked program (unchk_conv_tests.log). The varlen program lost 6-11% without
    # them (53.38 against 47.47 us on 8 sequences), so it keeps them.
    "TileLangCausalConv1dUpdate": ((None, {"threads": 128, "registers": 0, "unchecked_index": True}),),
    # A call of one sequence runs the same shape at 64 threads (one_sequence_threads): 41.43 us against 45.56 on the
    # 4k single prompt (85.6% of the same-size copy against 77.8%; session-2026-12-04b conv_sweep.log, graph time),
    # 42.94 against 45.55 in the eleventh session (session-2026-12-03d); at 8 sequences 64 threads lost both times
    # (50.73 and 51.70 us against 45.58 and 46.34), so batches keep 128. With the start order of the thirty-eighth
    # session, 64 threads led 2-8 prompts by 0.1-0.6 us in one H200 run and lost 16 and 64 prompts (0.4, 3.4 us;
    # session-2026-12-06e s39c2). few_sequences=8 (that program for 2-8 prompts only) in two more H200 runs
    # (session-2026-12-06f s40b, s40c): the 8-prompt row 42.59 -> 42.79 and 42.61 -> 42.34 us, the 2-4 prompt rows
    # split too (0.2-0.6 us either way): no lead in both runs, so not registered.
    # Chunks of 16 tokens since the forty-first session (session-2026-12-06g, H100, graph time): a 4k call at chunk 64
    # is one wave of 512 programs streaming the whole of x at once, and that structure alone, with no convolution,
    # reads at 91% of the same-size copy where 16-token chunks (several waves) read at 96-99% (conv_structure.py,
    # s41c-s41f). The program itself, chunk 16 against 64 in one run on every convlayouts row (s41g): 1 prompt 86.9%
    # against 81.5%, 2-8 prompts 83.5-84.8% against 78.9-81.0%, 16 prompts 81.7 against 78.5, 64 prompts 77.5 against
    # 77.1; and in another run (s41f) 86.8 / 83.8% against 81.8 / 78.9% (chunk 32: 86.9 / 83.0%; chunk 8: 78.2 /
    # 71.4%). The sixth session's H200 sweep had found longer chunks faster, for the program of then.
    # Back to chunks of 64 on the H200's evidence (forty-seventh session, session-2026-12-06m, graph time against the
    # same-size copy): chunk 64 beside the registered chunk 16 on every convlayouts and convpos row (s47d) won all 23,
    # by 3.8-5.5 us: 1 prompt 39.01 us (85.9%) against 42.81 (78.3%), 8 prompts 40.45 (82.8%) against 44.35 (75.5%),
    # 64 prompts 42.37 (79.1%) against 47.84 (70.0%); every row of both checked against the CPU reference. The issue's
    # sweep in the same session (s47a) led with chunk 64 on both rows too (85.8% / 82.3% against 78.8% / 76.1%).
    # The H200 is the card the targets are set on; on an H100 chunk 16 leads by up to 5 points (above), and the
    # build key, a rule on shapes and the arch, cannot tell the two sm_90 cards apart.
    "TileLangCausalConv1dVarlen": ((None, {"threads": 128, "tokens": 4, "registers": 128, "chunk": 64,
                                           "one_sequence_threads": 64}),),
    # The lanes program at a 40-register cap with the warp's own (token, frequency) table, the 2π-reduced
    # hardware sincos, the rotation partners as one vector and the rotation in 16-bit instructions: the fastest
    # correct shape on all three prefill rows (twelfth session, graph time, qknr4_sweep.log): Qwen3-Next 16k
    # 81.56 us (100.4% of the same-size copy; the lanes entry it replaced 121.27, 67.5%), 4k 23.41 us (90.2%;
    # 34.27), Qwen3.5 MRoPE 4k 23.83 us (87.5%; 35.30). Every spec row passed on it against float64 (151 GPU
    # tests, qknr3_tests.log).
    "TileLangQKNormRope": ((None, {"program": "lanes", "threads": 0, "rows": 0, "registers": 40, "table": "warp",
                                   "sincos": "reduced", "partners": "vectors", "rotation": "native"}),),
    # MoE routing: the candidates program, one token a program (eleventh session, graph time, route_sweep.log):
    # Qwen3-Next E=512 top-10 prefill 4k 9.04 us against 16.89 for the rounds program (33.9% of the same-size
    # copy), Qwen3.5-35B E=256 top-8 6.27 against 8.70, decode B=64 2.73 against 4.74; 2 to 8 tokens a program
    # were within 3% either way. Bit-equal to the rounds program and within tolerance of float64 on every spec
    # row (111 GPU tests passed). Compiled without bounds checks (fourteenth session, unchk_route_sweep.json, graph
    # time against the same program checked, in one run): 8.94 us against 9.38 at 4k, 5.66 against 5.71 on
    # Qwen3.5-35B, 5.65 against 5.99 at decode B=64; bit-equal to the checked program on every spec row (32 GPU
    # tests, unchk_route_tests). Launched as a programmatic dependent (eighteenth session, session-2026-12-04b
    # route_sweep.log, graph replays of back-to-back calls against the same program launched plainly, one run): 8.83
    # us against 9.16 at 4k, 5.70 against 6.19 on Qwen3.5-35B, 2.18 against 2.65 at decode B=64; alone it ties
    # (12.19 / 8.99 / 5.82 us against 12.27 / 8.99 / 5.76). Off Hopper the field is dropped (launchable_on).
    # The logits program (thirty-first session, H100, session-2026-12-05h/s31e-f route_sweep.log, graph time), once
    # the thirtieth session's fix kept its tokens on the fast path, as the registered keys launch (a dependent:
    # launch_policy): Qwen3-Next E=512 5.48 us against the candidates entry's 6.81 at 4k, 1.68 against 2.43 at 64
    # tokens; Qwen3.5 E=256 5.54 against 5.55 at 4k (a tie; launched plainly it reads 4.6, but the policy's
    # measurement is the whole step's), 1.56 against 2.12 at 64 tokens. Ids bit for bit the rounds program's,
    # weights within tolerance of them (341 GPU tests, s31a route_tests.log).
    # Rows of 512 bytes and less (Qwen3.5-35B's E=256 in bf16) run calls of 1024 tokens and more launched plainly
    # (``long_from``; forty-second session): on the H200 its 4k row took 4.57 / 4.49 us plainly against 5.47 / 5.40
    # as a dependent in two runs (thirty-ninth session, s39b and s39d ``launchab``; 54% of the same-size copy
    # against 45%), while its 64-token row took 1.43 / 1.39 as a dependent against 1.90 / 1.85. Qwen3-Next's E=512
    # tied both ways at 4k (5.48 / 5.42 against 5.48 / 5.49) and keeps one program. Between 64 and 4096 tokens
    # nothing was timed: 1024 is a quarter of a one-wave grid of one-warp programs. On an H100 (forty-third session,
    # session-2026-12-06i s43b route_sweep.log, graph time) that key read Qwen3.5's 4k row at 4.39 us (58.1%) against
    # 5.28 (48.3%) for the one dependent program. Qwen3-Next's E=512 runs 4 tokens a program below 1024 tokens: its
    # 64-token row 1.42 us against 1.53 (82.3% against 76.5%; on the H200 in the thirty-second session, 86.7%), its
    # 4k row through one token a program 5.28 against 5.29. Qwen3.5's 64-token row tied at 4 (1.40 against 1.38).
    # Both long programs run 16 tokens a program (512-thread blocks: a fourth of the blocks a one-wave call
    # schedules; s43b and s43c, two H100 runs): Qwen3-Next 4k 5.02 / 5.08 us (67.0 / 67.1%) against one token a
    # program's 5.29 / 5.34 (63.7 / 63.9%), as a dependent (plainly 5.81 / 5.87); Qwen3.5 4k plainly 4.12 / 4.15 us
    # (61.9 / 62.1%) against 4.39 / 4.45 (58.1 / 57.9%).
    # Rows wider than Qwen3-Next's 1 KiB (float32 logits at E=512: 96 registers, where one 16-token program would
    # hold an SM alone) keep the one program measured before, untimed in these forms.
    # Qwen3.5's long program then went to 32 tokens a program launched as a dependent (1024-thread blocks, a 4k
    # call 128 of them, one an SM; forty-fourth session, session-2026-12-06j s44a and s44b route_sweep.json, two
    # H100 runs, graph time): 3.50 / 3.50 us (73.1%) against 4.11 / 4.10 (62.2 / 62.3%) for 16 plainly and 4.36
    # (58.7 / 58.6%) for 16 as a dependent; 32 plainly 4.17. Registered, it read 3.51 / 3.52 us (73.0%) in two
    # more runs (s44c, s44d; its GPU tests: 34 passed, s44c). At E=512 32 tokens lost (5.21 / 5.19 against 5.03).
    # With 4 heads a lane (``heads``) the same form read 3.29 us (77.8%) in s44c and 5.05 in s44d, where every
    # 4-head form lost 1.1-1.2 us on that run's random logits: one token, a tie at the k-th logit, fell back to the
    # rounds selection and held the one-wave call (such a lane reads its row again since).
    # With that reread and the refilling rounds one loop, both long programs run 4 heads a lane (``long_heads``;
    # forty-fifth session, session-2026-12-06k s45a1 and s45b1 route_sweep.json, two H100 runs on two seeds, graph
    # time): Qwen3-Next 4k 4.83 / 4.84 us (70.5 / 69.7%) against 5.04 / 5.00 (67.6 / 67.4%), Qwen3.5 4k 3.42 / 3.41
    # (75.6 / 74.8%) against 3.52 / 3.48 (73.4 / 73.3%). The short programs keep 8: with 4 the 64-token rows lost
    # (E=512 1.63 / 1.89 against 1.43 / 1.42 us, E=256 1.43-1.55 against 1.36). Both registered forms' GPU tests
    # passed (ids bit for bit against the rounds program, weights against float64: 68, s45d, `-k longheads`).
    # Qwen3.5's long program then ran its rounds unrolled, the refilling rounds only for a token whose lane ran dry
    # before the last round (``late_refill``; fifty-second and fifty-third sessions, session-2026-12-07e s52i and
    # session-2026-12-07f s53h route_sweep.json, two H100 runs, graph time): 4k 3.31 / 3.30 us (77.1 / 77.2% of the
    # same-size copy) against 3.41 / 3.41 (74.8 / 74.6%); its GPU tests passed (108, s52i: ids bit for bit against
    # the rounds program). Registered, it read 3.20 us (80.3%) in a third run (s53i). Qwen3-Next's lost two runs and
    # tied one (5.07 against 4.83, 4.88 against 4.82, 4.73 against 4.76 us) and keeps the rounds' refill votes.
    # Both long programs start at 2048 tokens (fifty-ninth session, session-2026-12-08a s59a route_tokens_*.json,
    # H100, graph time; the calls of 1k-16k tokens a row): at 1024 tokens the long programs are 32 (E=256) and 64
    # (E=512) programs on 132 SMs, and one token a program read 1.74 us (75.4% of the same-size copy) against 2.73
    # (48.1%) at E=256 and 2.41 (81.9%) against 2.71 (73.0%) at E=512. At 2048 the long program held E=512 (3.31
    # against 4.11 us) and E=256 tied it (2.86 against 2.75).
    "TileLangMoETopKRouting": ((512, {"program": "logits", "tokens": 1, "unchecked_index": True,
                                      "dependent_launch": True, "long_from": 2048, "long_tokens": 32,
                                      "long_heads": 4, "late_refill": True}),
                               (1024, {"program": "logits", "tokens": 4, "unchecked_index": True,
                                       "dependent_launch": True, "long_from": 2048, "long_tokens": 16,
                                       "long_heads": 4}),
                               (None, {"program": "logits", "tokens": 1, "unchecked_index": True,
                                       "dependent_launch": True})),
}


def block_shape_of(key: Any) -> dict[str, Any]:
    """The block-shape fields of a build key (those after ``arch``) with their values."""
    names = [f.name for f in dataclasses.fields(key)]
    return {n: getattr(key, n) for n in names[names.index("arch") + 1:]}


def with_block_shape(kernel: str, key: Any, row_bytes: int) -> Any:
    """``key`` with the block shape the table gives ``kernel`` at rows of ``row_bytes``; an entry's
    ``dependent_launch`` only on the archs that have it (elsewhere the same program, launched
    plainly: the same bits), so a Hopper measurement never turns another arch's key into a refusal."""
    for bound, fields in BLOCK_SHAPES[kernel]:
        if bound is None or row_bytes <= bound:
            return launchable_on(key.arch, dataclasses.replace(key, **fields))
    raise LookupError(f"block_shapes.BLOCK_SHAPES[{kernel!r}] has no entry for rows of {row_bytes} bytes; "
                      f"end its entries with a None bound")
