el policy
timeout -s INT 150 python3 -m tileops_core bench --device cuda --decode-step --json "$out/decode_policy.json" > "$out/decode_policy.txt" 2>&1; grep -v TileLang "$out/decode_policy.txt" | tail -25
TILEOPS_COMPILE_DECOMPOSE=measured timeout 20 python3 -m tileops_core explain RMSNormFwdOp --device cuda > "$out/decode_policy_explain.txt" 2>&1; tail -8 "$out/decode_policy_explain.txt"
