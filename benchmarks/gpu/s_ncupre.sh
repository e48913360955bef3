el ncupre
# ncupre (issue 21): Nsight Compute counters of the attention prefill's kernels (the default key: the overlap
# program on the heads grid, the tile-count kernel, the cache write) on the paged 4k B=4 row, which stays at 0.65x
# of cuDNN, beside the contiguous 4k B=1 row (0.97x) with the same programs and 3.7x the key-tile steps
# (row_profile.py prefill). About 3 minutes.
ncu_row_set prefill ncu_prefill.txt
