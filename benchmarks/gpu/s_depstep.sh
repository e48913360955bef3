el depstep
# depstep (issue 21's model at decode): the Qwen3.5-MoE decode step (real layer sizes, B=1, every module on TileOPs,
# kernels by GPU time) with the registered keys, then with every kernel that can launching as a programmatic dependent
# (backends/cuda/bench/dependent_step.py --dependent: dependent_launch on every registered key that has it, and the
# skinny tilings'). Same process kind, same call. Where the CUDA-graph step is faster with no loss of equality, set
# dependent_launch in the kernels' registered keys (block_shapes.py, registered_model, the skinny tilings). About 6 minutes.
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc}
# First the bits: the tiny Qwen3.5-MoE's steps with every kernel dependent equal the plain keys' (eager and graph).
timeout -s INT ${DEPSTEP_TEST_S:-200} python3 -m pytest -rA -n 2 -p no:cacheprovider \
    backends/cuda/tests/test_dependent_step_gpu.py > "$out/depstep_tests.log" 2>&1
grep -E "^(PASSED|FAILED|ERROR)|[0-9]+ (passed|failed)|^E " "$out/depstep_tests.log" | tail -8
for mode in plain dependent; do
    flag=""; [ "$mode" = dependent ] && flag="--dependent"
    timeout -s INT ${DEPSTEP_S:-200} python3 backends/cuda/bench/dependent_step.py $flag -- --variants qwen3_5_moe \
        --batches 1 --setups tileops --no-prefill --reps 20 --out "$out/depstep_$mode" > "$out/depstep_$mode.log" 2>&1
    echo "== $mode"; grep -v TileLang "$out/depstep_$mode.log" | grep -E "dependent launch|us a step|cuda_graph|static_eager|logits" | head -24
done
