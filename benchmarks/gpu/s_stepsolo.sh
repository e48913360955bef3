el stepsolo
# stepsolo (issue 15): the decode step's compiled ways one policy a process (tileops bench --decode-step
# --only-policies). In s32a (H200) the combined run read reduce-overhead 104.6-107.6 us a step under the first three
# policies and 61.1 us (1.47x the device time, the target <= 1.5x) under auto_again, the same policy as
# all_decompositions run last; torch's reduce-overhead floor read 90.7 us there. Each policy in a fresh process says
# whether the step's cost is the policy's or the position's. About 4 minutes (each process compiles its ways cold).
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tlc}
for p in ${STEPSOLO_POLICIES:-custom_ops=none all_decompositions=auto default=measured}; do
    timeout -s INT ${STEPSOLO_S:-110} python3 -m tileops_core bench --device cuda --decode-step --quick --only-policies \
        --policy "$p" --json "$out/stepsolo_${p%%=*}.json" > "$out/stepsolo_${p%%=*}.log" 2>&1
    echo "== $p rc=$?"; grep -E "^(eager|cuda_graph|compile_)" "$out/stepsolo_${p%%=*}.log"
done
