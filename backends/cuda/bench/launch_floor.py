"""What a raw RGDR launch costs on the host, piece by piece (issue 15's RGDR B=1 <= 15 µs).

``hot`` measured RGDR B=1 T=1 at 20.4 µs an eager op call against 10.0 µs for its raw launch (the
launcher's ``run`` calling the compiled TVM-FFI function), while RMSNorm's raw launch took 4.9 µs.
On a CPU the framework's part of the RGDR call is 4.0 µs (``benchmarks/host_path.py``) and a TVM-FFI
call costs about 0.1 µs a tensor (``testing.nop``), so neither explains 5 µs more than RMSNorm's
launch. This times, in one process on the GPU, each layer of the raw launch on the same B=1 inputs:

* ``nop(0)`` / ``nop(3)`` / ``nop(9)``: TVM-FFI's ``testing.nop`` with no, 3 and 9 CUDA tensors
  (the argument exchange alone: DLPack through torch's exchange API, the stream query);
* ``rgdr fn`` and ``rgdr fn, plain launch``: the compiled RGDR function of the tiling the schedule
  picks at B=1 (a programmatic dependent on Hopper), and the same tiling launched plainly, called
  with the launcher's arguments (the compiled host code's checks, ``cudaSetDevice``, the driver's
  launch: with launch attributes or without);
* ``rgdr run``: the launcher's ``run`` (the tiling lookup and argument selection around ``fn``);
* ``rmsnorm fn``: RMSNorm's compiled function on ``[1, 4096]`` bf16 (three tensors).

Medians of host time per call (``tileops_core.bench.host_time.time_host``: loops of back-to-back
calls after a synchronize, never filling the launch queue), in interleaved rounds.

    python3 launch_floor.py [--rounds 5]
"""

import argparse
import dataclasses
import statistics

import torch

from cuda_bench_common import rgdr_key

from tileops_core.bench.host_time import time_host
from tileops_cuda.kernels.rgdr import build_rgdr, default_schedule
from tileops_cuda.kernels.rmsnorm import RMSNormBuildKey, build_rmsnorm
from tileops_cuda.testing import rgdr_case

_ORDER = ("query", "key", "value", "beta", "state", "actual_seq_lengths", "ssm_state_indices", "g")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import tvm_ffi

    dev = torch.device("cuda")
    arch = "sm_%d%d" % torch.cuda.get_device_capability()
    key = dataclasses.replace(rgdr_key(16, 32, "float32"), arch=arch)
    tiling = default_schedule(key).pick(1, 1)
    plain = dataclasses.replace(tiling, dependent_launch=False)
    launcher = build_rgdr(key)
    plain_fn = build_rgdr(key, plain).entries[plain]
    fn = launcher.entries[tiling]
    case = rgdr_case(key, [1], device=dev)
    tensors = [case[n] for n in _ORDER]
    out = torch.empty_like(case["value"])
    scale = float(key.head_k_dim) ** -0.5
    fn_args = (*tensors, out, scale, 1)

    rms_key = RMSNormBuildKey("bfloat16", 4096, True, arch)
    rms = build_rmsnorm(rms_key)
    x = torch.randn(1, 4096, device=dev, dtype=torch.bfloat16)
    w = torch.randn(4096, device=dev, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    rms_fn = rms.fn

    nop = tvm_ffi.get_global_func("testing.nop")
    nine = tensors + [out]
    subjects = {
        "nop(0)": lambda: nop(),
        "nop(3)": lambda: nop(x, w, y),
        "nop(9)": lambda: nop(*nine),
        "rgdr fn": lambda: fn(*fn_args),
        "rgdr fn, plain launch": lambda: plain_fn(*fn_args),
        "rgdr run": lambda: launcher.run(*tensors, None, None, scale, "lengths", True, out),
        "rmsnorm fn": lambda: rms_fn(x, w, y, 1e-6),
    }
    rounds = [{name: time_host(f, dev, repeats=7) for name, f in subjects.items()} for _ in range(args.rounds)]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, tvm_ffi {tvm_ffi.__version__}; "
          f"RGDR B=1 T=1 fp32 state, tiling {tiling}")
    for name in subjects:
        us = statistics.median(r[name] for r in rounds) * 1e6
        print(f"{name:24s} {us:7.2f} us a call")


if __name__ == "__main__":
    main()
