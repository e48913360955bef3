el ncuconv
# ncuconv (issue 17): Nsight Compute counters of the conv rows that stay at 78-82% of the same-size copy
# (row_profile.py conv). About 2 minutes. The compute section is there for the varlen rows: per SM they issue
# about 18 instructions and two MUFU operations (the SiLU's exp and reciprocal, 16 a clock an SM) per element,
# roughly 16-20 us of a 46 us kernel by count, so the issue slots or the XU pipe may bind rather than memory.
ncu_row_set conv ncu_conv.txt -k regex:conv
