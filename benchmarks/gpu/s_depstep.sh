el depstep
# depstep (issue 21's model at decode): the Qwen3.5-MoE decode step (real layer sizes, B=1, every module on TileOPs,
# kernels by GPU time) with every key's dependent_launch off (backends/cuda/bench/dependent_step.py --plain), then with
# the registered keys (every kernel that can launching as a programmatic dependent: tileops_cuda.launch_policy, since
# 2026-12-04e: the graph step 0.384 -> 0.334 ms). Same process kind, same call. DEPSTEP_MODES picks the step runs
# ("plain registered" by default; empty for the test alone). About 6 minutes.
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc}
# First the bits: the tiny Qwen3.5-MoE's steps with the registered (dependent) keys equal the plain keys' (eager and
# graph). Its builds (two sets of about 30 kernels) need more than 210 s on a cold cache.
timeout -s INT 240 python3 -u backends/cuda/bench/prebuild_models.py --plain qwen3_5_moe > "$out/depstep_prebuild.log" 2>&1
tail -3 "$out/depstep_prebuild.log"
timeout -s INT ${DEPSTEP_TEST_S:-360} python3 -m pytest -rA -n 2 -p no:cacheprovider \
    backends/cuda/tests/test_dependent_step_gpu.py > "$out/depstep_tests.log" 2>&1
grep -E "^(PASSED|FAILED|ERROR)|[0-9]+ (passed|failed)|^E " "$out/depstep_tests.log" | tail -8
for mode in ${DEPSTEP_MODES-plain registered}; do
    flag=""; [ "$mode" = plain ] && flag="--plain"
    timeout -s INT ${DEPSTEP_S:-200} python3 backends/cuda/bench/dependent_step.py $flag -- --variants qwen3_5_moe \
        --batches 1 --setups tileops --no-prefill --reps 20 --out "$out/depstep_$mode" > "$out/depstep_$mode.log" 2>&1
    echo "== $mode"; grep -v TileLang "$out/depstep_$mode.log" | grep -E "registered keys|us a step|cuda_graph|static_eager|logits" | head -24
done
