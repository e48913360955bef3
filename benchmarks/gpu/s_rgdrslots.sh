el rgdrslots
# rgdrslots (issue 16): backends/cuda/bench/rgdr_slot_layout.py: RGDR rows that write 32768 head states a call
# (75-80% of the copy in the thirty-first session's table) and a fast row beside each, with the bench's random
# state slots and with slot = token, beside fan copies at each row's footprint writing in order and to permuted
# head-state runs. About 2 minutes (one build per key, ten rows).
(cd backends/cuda/bench && timeout -s INT ${RGDRSLOTS_S:-240} python3 -u rgdr_slot_layout.py --json "$out/rgdr_slots.json" 2>&1 \
    | grep -v "TileLang:" > "$out/rgdr_slots.log")
grep -v "^\[" "$out/rgdr_slots.log" | tail -16
