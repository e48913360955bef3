el rgdrpairing
# rgdrpairing (issue 16): backends/cuda/bench/rgdr_pool_pairing.py: one RGDR row on a first draw of its inputs and
# on a draw made after check_rgdr freed a same-size case (966 against 1121 us on an H100 in session 32), with the
# slot permutations swapped, and the fan copy writing each draw's state addresses: whether the slow pairing of
# pool and slots slows any kernel writing those addresses (the memory system) or only RGDR (the kernel). Under a
# minute a row; RGDRPAIRING_ROWS lists rows as NK,NV,state,B,T_b. First the GPU tests of the transposed grid
# (RGDRTiling.sequences_fastest: float64 and the plain tiling's bits), which the pairing then times on both draws.
rgdr_gpu_tests seqfast ${RGDRPAIRING_TEST_S:-200} 2 "sequences and fastest"
(cd backends/cuda/bench && for row in ${RGDRPAIRING_ROWS:-16,32,float32,256,4 16,32,bfloat16,256,8}; do
    timeout -s INT 120 python3 -u rgdr_pool_pairing.py --row "$row" --json "$out/rgdr_pairing_${row//,/_}.json" 2>&1 \
        | grep -v "TileLang:"; done) > "$out/rgdr_pairing.log"
grep -v "^\[" "$out/rgdr_pairing.log" | tail -40
