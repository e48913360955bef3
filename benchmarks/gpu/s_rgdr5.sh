el rgdr5
# rgdr5 (issue 16): the default schedule's decode steps at a batch of every role (small, large, short), each
# tiling and speculative twin it runs against float64 (fp32 large now speculates too), and the four pinned
# speculative twins once more. About 2 minutes. Results into $OUT (or $out).
OUT=${OUT:-$out}; mkdir -p "$OUT"
rgdr_gpu_tests rgdr5 "${RGDR5_TEST_S:-200}" 10 "default_schedule_on_decode_steps or equals_its_general_twin"
