el policy2
# The decode-step compile policies twice, in two processes one after the other (issue 20): the spread
# between the runs says how far the host-time verdicts are from noise. About 2.5 minutes.
for run in 1 2; do
  timeout -s INT 130 python3 -m tileops_core bench --device cuda --decode-step --json "$out/decode_policy_$run.json" \
      > "$out/decode_policy_$run.txt" 2>&1
  grep -v TileLang "$out/decode_policy_$run.txt" | grep -E "^(way|eager|cuda_graph|compile|policies)" | tail -14
done
