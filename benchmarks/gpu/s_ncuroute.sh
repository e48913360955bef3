el ncuroute
# ncuroute (issue 21): Nsight Compute counters of the MoE routing kernel (the registered candidates program, one
# token a warp) on its two 4k prefill rows and decode B=64 (row_profile.py routing): issue slots busy, warp
# cycles per issued instruction and the stall reasons, occupancy, and instructions executed over warps launched
# (instructions a token). Says whether fewer instructions a token or shorter dependent chains would bring the
# rows (35-56% of the same-size copy) toward 80%. About 2 minutes.
ncu_row_set routing ncu_routing.txt
