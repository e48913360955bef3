el ncudec
# ncudec (issue 21): Nsight Compute counters of the attention decode's kernels (the split program and the
# combine) at B=1, where decode stays at 23-37% of the same-size copy whatever the split count (the
# fourteenth session's unchk_attndec.log: 64 splits 16.9 us in a graph at 8k against a 6.2 us copy, 8 splits
# 30.8, 128 splits 21.9), beside B=64 4k (98% of the copy): what a split program spends besides its bytes
# (row_profile.py decode). About 3 minutes.
ncu_row_set decode ncu_decode.txt
