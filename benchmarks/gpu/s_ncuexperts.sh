el ncuexperts
# ncuexperts (issue 21's model at decode): Nsight Compute counters of the MoE experts' skinny programs through their
# ops' registered keys (row_profile.py experts): the routed experts at Qwen3.5-35B decode B=1 and Qwen3-Next B=16
# (tile map, gate/up, down) and the shared expert at T=1 (gate/up with the fused logit, down). They read their
# weights at 50-60% of the same-size copy where the skinny linear reads at 80-90%: DRAM throughput, occupancy,
# waves, and the stall reasons say whether the expert indirection's dependent loads, the short down rows or the
# grid is what holds them. About 3 minutes.
ncu_row_set experts ncu_experts.txt
