el routeab
# routeab: backends/cuda/bench/routing_seeds_bench.py (the routing programs at 64 tokens over 12 random data sets)
# from the tree of SWEEPAB_REV (default f74ed96, made as s_sweepab.sh says: the candidates program's old guard)
# and from this one (the guard bounding the outsiders by their largest e), each installed first. Where the
# old tree's registered program reads 2.3 us on some data sets and ~5.3 on others, this tree's should read the
# fast time on all. About 2 minutes.
tar_ab=".device/tree_${SWEEPAB_REV:-f74ed96}.tar.xz"
rab_run() {  # rab_run TREE NAME
    install_tree "$1" "$out/routeab_pip_$2.log"
    [ "$1" = "$PWD" ] || cp backends/cuda/bench/routing_seeds_bench.py "$1/backends/cuda/bench/"
    echo "-- $2 ($1)"
    (cd "$1/backends/cuda/bench" && timeout -s INT ${ROUTEAB_S:-100} python3 -u routing_seeds_bench.py 2>&1 \
        | grep -v "TileLang:" > "$out/routeab_$2.log")
    grep -E "median|Error|error" "$out/routeab_$2.log" | head -12
}
if [ -f "$tar_ab" ]; then
    unpack_old_tree "$tar_ab"
    rab_run /tmp/abold old
    rab_run "$PWD" new
else
    echo "routeab: make $tar_ab (see benchmarks/gpu/s_sweepab.sh)"
fi
