el sweepab
# sweepab: a layer_ops_sweep row set timed from an older tree of this repository and from this one, old-new-old in
# one run (a drift of the card between the three shows as old1 != old2), to tell a kernel's regression from a
# different card or day. SWEEPAB_REV names the old commit, SWEEPAB_ONLY the sweep's --only. The old tree travels in
# the bundle folder; make it once in this checkout (under 1 MB):
#   git archive REV -- . ':(exclude)backends/cuda/bench/results' ':(exclude)docs' ':(exclude)tests' > /tmp/t.tar
#   git archive REV -- tests/catalogue_references.py > /tmp/c.tar && tar -A -f /tmp/t.tar /tmp/c.tar
#   xz -c /tmp/t.tar > .device/tree_REV.tar.xz
# (the sweep imports tests/catalogue_references.py: a tree without it fails at import, as the thirtieth session's
# first try did). SWEEPAB_NEW_ARGS goes to this tree's sweep only (e.g. --candidates 1: the registered key alone).
# Run in the thirtieth session (H100, session-2026-12-05g/s30d): the 8-sequence varlen conv old1/new/old2 62.26 /
# 62.23 / 62.32 us in a graph (no regression); routing at 64 tokens 2.29 / 5.28 / 2.23 us with the kernels' CUDA,
# build and launch code identical and an A/B of the kernels alone timing both trees alike (5.3 us). The thirty-first
# session's routeab (routing_seeds_bench.py over 12 data sets) read that as a lottery the guard fix removed.
# About 1.5 minutes a tree for one row; this tree is installed again at the end.
sweepab_run() {  # sweepab_run TREE NAME: the sweep from TREE (installed first), logged as sweepab_NAME
    install_tree "$1" "$out/sweepab_pip_$2.log"
    # The SM clock every 100 ms while the sweep runs (its compiles idle the card: read the median and maximum):
    # latency-bound rows (one warp an SM, as routing at 64 tokens) follow it directly.
    nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,pstate,power.draw --format=csv,noheader -lms 100 \
        > "$out/sweepab_clocks_$2.log" 2>&1 &
    local sampler=$!
    local extra=""; [ "$2" = new ] && extra="${SWEEPAB_NEW_ARGS:-}"
    (cd "$1" && timeout -s INT ${SWEEPAB_S:-100} python3 -u backends/cuda/bench/layer_ops_sweep.py --only "$SWEEPAB_ONLY" \
        --budget ${SWEEPAB_BUDGET:-70} --reps 40 --json "$out/sweepab_$2.json" $extra 2>&1 | grep --line-buffered -v "TileLang:" \
        > "$out/sweepab_$2.log")
    kill "$sampler" 2>/dev/null
    echo "-- $2 ($1)"; grep -E "same-size copy|^[A-Za-z0-9]+FwdOp  .*(registered|\{)|Error" "$out/sweepab_$2.log" | head -14
    # SM clock (MHz) over the samples: minimum, median, maximum, and the samples' count
    sed -E 's/ MHz//g' "$out/sweepab_clocks_$2.log" | awk -F', ' '$1 ~ /^[0-9]+$/ {print $1}' | sort -n \
        | awk '{v[NR] = $1} END {if (NR) printf "   SM clock MHz: min %d, median %d, max %d (%d samples)\n", v[1], v[int((NR + 1) / 2)], v[NR], NR}'
}
tar_ab=".device/tree_${SWEEPAB_REV:-none}.tar.xz"
if [ -f "$tar_ab" ] && [ -n "${SWEEPAB_ONLY:-}" ]; then
    unpack_old_tree "$tar_ab"
    sweepab_run /tmp/abold old1
    sweepab_run "$PWD" new
    sweepab_run /tmp/abold old2
    install_tree . "$out/sweepab_pip_end.log"
else
    echo "sweepab: set SWEEPAB_ONLY and make $tar_ab (see benchmarks/gpu/s_sweepab.sh)"
fi
