el convtwin
# convtwin (issue 17): a varlen conv twin, CONV_TWIN (default end_rows_first): a boolean ConvVarlenBuildKey field
# flipped from the registered key, or FIELD=INT (threads=64, few_sequences=8; has_init=1 sets a boolean). First
# every conv GPU test, which runs the twins on every varlen case bit for bit against the plain program (garbage
# metadata included), then convpos and convlayouts with the twin timed beside the registered program on each 4k
# row (CONV_ROWS: either set).
# About 7.5 minutes (CONV_TEST_K=nothing skips the tests: 1.5).
timeout -s INT ${CONV_TEST_S:-330} python3 -m pytest -rA -n 16 -p no:cacheprovider ${CONV_TEST_K:+-k "$CONV_TEST_K"} \
    backends/cuda/tests/test_conv_gpu.py > "$out/conv_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|INTERNALERROR> [A-Z]" "$out/conv_tests.log" | tail -15
OUT=${OUT:-$out}; mkdir -p "$OUT"
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc} PYTHONUNBUFFERED=1
cd backends/cuda/bench
for rows in ${CONV_ROWS:-positions layouts}; do
timeout ${CONVPOS_S:-170} python3 conv_varlen_layouts.py --rows $rows --twin ${CONV_TWIN:-end_rows_first} \
    --json "$OUT/conv_$rows.json" 2>&1 | grep --line-buffered -v "TileLang:tilelang.jit" > "$OUT/conv_$rows.log"
echo "rc=$?"; tail -24 "$OUT/conv_$rows.log"
done
cd ../../..
