el graphgap
# graphgap (issues 16, 17): what a timed graph replay's start gap adds to a per-call time (graph_gap.py): the same
# copy (33.6, 135 and 268 MB moved) in graphs of 1-16 calls, each replay timed alone (the measure before the
# fortieth session), as back-to-back replays, and by time_graph as it now is. About 1 minute.
OUT=${OUT:-$out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cd backends/cuda/bench
timeout 200 python3 graph_gap.py > "$OUT/graph_gap.log" 2>&1; echo "rc=$?"; cat "$OUT/graph_gap.log"
cd ../../..
