#!/usr/bin/env bash
# The GPU call path, measured in one device call (see backends/cuda/NOTES.md, "Call path"):
# the call-path GPU tests (first call in fresh processes, no device syncs, the decode step
# four ways), host time per eager call beside the raw launch and torch's op, and the decode
# step's host/device times. Run from the repository root on the GPU machine, with the
# bundle from ../shared/tools/device-bundle.sh carried as .device; results go to $OUT.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/site
tar -C /tmp/site -xJf .device/bundle.tar.xz
export PYTHONPATH=/tmp/site TILELANG_CACHE_DIR=/tmp/tlc PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . -e backends/cpu_ref -e backends/cuda 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
python3 -m pytest -q -x -n 8 -p no:cacheprovider backends/cuda/tests/test_call_path_gpu.py 2>&1 | tee "$out/call_path_tests.log" | tail -15
python3 -m tileops_core bench --device cuda --host-time --baseline none \
  RMSNormFwdOp RecurrentGatedDeltaRuleFwdOp SiluAndMulFwdOp SoftmaxFwdOp \
  --workload decode-m1-4096 --workload qwen3.5-b1-t1-fp32state --workload llama3-8b-mlp-decode-256 \
  --workload attn-probs-2k --json "$out/host_time.json" 2>&1 | tee "$out/host_time.log" | tail -14
python3 -m tileops_core bench --device cuda --decode-step --json "$out/decode_step.json" 2>&1 | tee "$out/decode_step.log"
