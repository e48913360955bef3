el convab
# convab (issue 17): the varlen conv of 8 sequences measured 50.5 us in a graph, 71.3% of the same-size copy, in the
# twenty-ninth session, against 45.6-47.0 us (75-78%) in every run before 3ebf2e7 (unchecked cu_seqlens read as the
# spec's clipped prefix sums: an in-program max-scan with one more barrier a program); the one-sequence row did not
# move. Same run, same rows: the CausalConv1dVarlen sweep from the tree before that commit, from this tree, and from
# the old one again (old-new-old: a drift of the card between the three shows as old != old). The old tree travels
# in the bundle folder; make it once in this checkout (about 0.6 MB):
#   git archive 3ebf2e7^ -- . ':(exclude)backends/cuda/bench/results' ':(exclude)docs' ':(exclude)tests' \
#       | xz > .device/conv_before_clip.tar.xz
# About 4 minutes; this tree is installed again at the end.
convab_sweep() {  # convab_sweep TREE NAME: the varlen sweep from TREE (installed first), logged as convab_NAME
    (cd "$1" && python3 -m pip install -q --no-deps --no-build-isolation -e . -e backends/cpu_ref -e backends/cuda \
        > "$out/convab_pip_$2.log" 2>&1 || tail -3 "$out/convab_pip_$2.log")
    (cd "$1" && timeout -s INT ${CONVAB_S:-100} python3 -u backends/cuda/bench/layer_ops_sweep.py --only CausalConv1dVarlen \
        --budget ${CONVAB_BUDGET:-70} --reps 40 --json "$out/convab_$2.json" 2>&1 | grep --line-buffered -v "TileLang:" \
        > "$out/convab_$2.log")
    echo "-- $2 ($1)"; grep -E "^CausalConv1dVarlen.*(registered|threads)|Error" "$out/convab_$2.log" | head -12
}
if [ -f .device/conv_before_clip.tar.xz ]; then
    rm -rf /tmp/convold && mkdir -p /tmp/convold && tar -C /tmp/convold -xJf .device/conv_before_clip.tar.xz
    convab_sweep /tmp/convold old1
    convab_sweep "$PWD" new
    convab_sweep /tmp/convold old2
    python3 -m pip install -q --no-deps --no-build-isolation -e . -e backends/cpu_ref -e backends/cuda > "$out/convab_pip_end.log" 2>&1
else
    echo "convab: no .device/conv_before_clip.tar.xz (see benchmarks/gpu/s_convab.sh for the command that makes it)"
fi
