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
# KEEP_KERNELS=1: the kernels this call compiled (the cache's entries newer than the seed; every entry where none was
# carried) go back as $out/tlcache_new.tar.xz, beside logs.tar.gz (a file comes back up to 16 MiB: the logs must
# not ride in the same one), for `prebuild_here.py --merge` to add to .device/tlcache.tar.xz.
if [ -n "${KEEP_KERNELS:-}" ]; then
    (cd /tmp/tlc && find 0.1.15/cuda-binaries 0.1.15/linux-x86_64/kernels -mindepth 1 -maxdepth 1 -type d \
        $( [ -f .seeded ] && echo -newer .seeded ) > /tmp/tlc_new.list 2>/dev/null
     tar -cJf "$out/tlcache_new.tar.xz" -T /tmp/tlc_new.list \
        && echo "run.sh: $(grep -c kernels/ /tmp/tlc_new.list) compiled kernels kept in tlcache_new.tar.xz")
fi
# The device call brings back at most 8 files from $OUT: every log of the call goes back as one archive
# ($out/logs.tar.gz; `tar -xzf` it here). A call cut by its limit never gets here and returns its files as they are.
(cd "$out" && tar -czf /tmp/logs.tar.gz --exclude=logs.tar.gz --exclude=tlcache_new.tar.xz . \
    && find . -mindepth 1 ! -name tlcache_new.tar.xz -delete && mv /tmp/logs.tar.gz .)
