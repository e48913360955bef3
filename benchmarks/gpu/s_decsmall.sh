el decsmall
# decsmall (issue 21; helper dec-small-b): the attention decode's small-batch candidates, the light split program
# (DecodeSchedule.block_h=16: 16 score rows on mma, 3 programs an SM at 80 registers) and the combine folded into
# the split launch (combine="last_program"); backends/cuda/NOTES.md "Attention decode at small batch". First their
# GPU tests (float64 on the spec rows and ragged lengths at up to 256 splits, NaN-poisoned outputs, padding-only
# and empty batches, folded against parallel within one rounding, a CUDA graph of the folded combine replayed
# twice), then the sweep on the B=1 contiguous rows (4k, 32k, 8k): the registered par beside each candidate at its
# plan and pinned split counts (128 and 256 where the light program holds 3 an SM), with the same-size copy.
# Every step bounded (worst case 530 s); alone in its call.
timeout -s INT ${DECSMALL_TEST_S:-360} python3 -m pytest -rA -p no:cacheprovider \
    backends/cuda/tests/test_attention_decode_small_batch_gpu.py > "$out/decsmall_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]" "$out/decsmall_tests.log" | tail -16
el decsmall-sweep
timeout -s INT ${DECSMALL_SWEEP_S:-170} python3 -u backends/cuda/bench/attention_decode_sweep.py --reps 30 \
    --budget-s 120 --max-batch 1 --json "$out/decsmall_sweep.json" \
    --candidates contiguous/par,contiguous/par-bh16,contiguous/fold,contiguous/bh16-fold,contiguous/par-pdl \
    > "$out/decsmall_sweep.log" 2>&1
grep -v TileLang "$out/decsmall_sweep.log" | tail -40
