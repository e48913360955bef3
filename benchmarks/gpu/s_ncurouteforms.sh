el ncurouteforms
# ncurouteforms (issue 21): Nsight Compute counters of Qwen3-Next's 4k routing row through three forms of its long
# program (row_profile.py routingforms): the registered one, with late_refill (about 63 fewer instructions a token,
# the same ten reductions in a chain) and with 8 heads a lane (about 44 more, a deeper network). Issue slots busy,
# warp cycles per issued instruction and the stall reasons of each: a row that waits on issue shows busy slots and
# "not selected"/math stalls in its tail, one that waits on its warps' chains long waits on reductions and loads
# (NOTES, fifty-ninth session). About 2 minutes.
ncu_row_set routingforms ncu_routingforms.txt
