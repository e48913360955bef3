#!/usr/bin/env bash
# The pending H200 checks, in sections, for one device call (see benchmarks/gpu/README.md):
#   bash benchmarks/gpu/run.sh rgdrsafe policy profile norms attndec hfstatic hfdecode
# Run from the repository root on the GPU machine with the bundle of ../shared/tools/device-bundle.sh
# carried as .device; every section writes its logs under $OUT and prints a summary.
source benchmarks/gpu/prefix.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
for s in "$@"; do source "benchmarks/gpu/s_$s.sh"; done
el done
echo "run.sh: kernel cache holds $(kernel_cache_count) kernels"
# The device call brings back at most 8 files from $OUT: every log of the call goes back as one archive
# ($out/logs.tar.gz; `tar -xzf` it here). A call cut by its limit never gets here and returns its files as they are.
(cd "$out" && tar -czf /tmp/logs.tar.gz --exclude=logs.tar.gz . && find . -mindepth 1 -delete && mv /tmp/logs.tar.gz .)
