el rgdrhist
# rgdrhist (issue 16): backends/cuda/bench/rgdr_history.py: which part of the bench's history before a draw (a
# same-size case made, launched, checked, the cache emptied after) makes a large RGDR row slow on that draw, each
# history in its own process, with where the pool lands in the caching allocator. About 3 minutes.
(cd backends/cuda/bench && timeout -s INT ${RGDRHIST_S:-300} python3 -u rgdr_history.py --json "$out/rgdr_history.json" \
    2>&1 | grep -v "TileLang:") > "$out/rgdr_history.log"
tail -30 "$out/rgdr_history.log"
