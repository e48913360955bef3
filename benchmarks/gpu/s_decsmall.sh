el decsmall
# decsmall (issue 21): the attention decode's light split program (DecodeSchedule.block_h=16: 16 score rows on mma,
# registers for 3 programs an SM, the split plan filling 1, or 2 on long splits), the rule's schedule at B <= 8;
# backends/cuda/NOTES.md "Attention decode at small batch". First its GPU tests (float64 on the spec rows and
# ragged lengths at up to 256 splits, NaN-poisoned outputs, padding-only and empty batches, the default
# schedule's B=1 decode steps chained in a CUDA graph), then the sweep on the contiguous rows of B <= 8 (B=1 at
# 4k, 32k, 8k; B=2 and 4 at 8k; B=8 at 4k): par beside par-bh16 at its plan and pinned split counts, with the
# same-size copy; the paged rows of B <= 8 (16-token blocks) with gather beside gather-bh16, the light program
# gathering 32-position tiles; each light program also with the sliced combine (-sl: partials loaded beside the
# log-sum-exps, a program a 64-channel slice), and on the contiguous rows the light program gathering its rows
# (gather-bh16: cp.async, one stage, as over paged blocks; DECSMALL_CANDIDATES overrides the list). Every step
# bounded (worst case 530 s); alone in its call.
# DECSMALL_TESTS=0 skips the GPU tests (a call that only times the candidates, on a card where they passed before).
if [ "${DECSMALL_TESTS:-1}" != 0 ]; then
    timeout -s INT ${DECSMALL_TEST_S:-360} python3 -m pytest -rA -p no:cacheprovider \
        backends/cuda/tests/test_attention_decode_small_batch_gpu.py > "$out/decsmall_tests.log" 2>&1
    grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]" "$out/decsmall_tests.log" | tail -16
fi
el decsmall-sweep
decsmall_default=contiguous/par,contiguous/par-bh16,contiguous/par-bh16-sl,contiguous/gather-bh16
decsmall_default+=,contiguous/gather-bh16-sl,paged/gather,paged/gather-bh16,paged/gather-bh16-sl
timeout -s INT ${DECSMALL_SWEEP_S:-170} python3 -u backends/cuda/bench/attention_decode_sweep.py --reps 30 \
    --budget-s 120 --max-batch 8 --json "$out/decsmall_sweep.json" \
    --candidates ${DECSMALL_CANDIDATES:-$decsmall_default} \
    > "$out/decsmall_sweep.log" 2>&1
grep -v TileLang "$out/decsmall_sweep.log" | tail -40
