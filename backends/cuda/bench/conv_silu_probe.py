"""Is the varlen conv's SiLU what holds it under its layout's ceiling, and how much of it does ``tanh_silu`` win back?

The registered key with SiLU through ``exp`` and a reciprocal (two MUFU operations an element), with ``tanh_silu``
(one ``tanh.approx``; registered since the forty-third session) and without SiLU, on the 1- and 8-prompt 4k rows, each checked against the CPU reference of its own activation, timed in CUDA graphs beside
the same-size copy, each twice, interleaved (forty-second session: without SiLU the H100 ran 2-2.5 us faster).

    python3 conv_silu_probe.py   (or: bash benchmarks/gpu/run.sh convsilu)
"""

import dataclasses

import torch
from conv_varlen_layouts import ROWS, SETS, T, D, call, check, inputs, launcher
from cuda_bench_common import same_size_copy, time_graph

from tileops_cuda.kernels.conv1d import build_conv_varlen


def main() -> None:
    """Each form on each row, checked, then timed twice, interleaved."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(17)
    copy_us = same_size_copy(2 * T * D * 2)
    print(f"same-size copy: {copy_us:.2f} us", flush=True)
    for label in ("1 x 4096, lengths, no init (the 1-prompt row)", "8 x 512, cu_seqlens, init (the 8-prompt row)"):
        lengths, style, init = ROWS[label]
        sets = [inputs(lengths, style, init, gen) for _ in range(SETS)]
        base = launcher(style, init)
        ways = {"exp SiLU": build_conv_varlen(dataclasses.replace(base.key, tanh_silu=False)),
                "tanh_silu": build_conv_varlen(dataclasses.replace(base.key, tanh_silu=True)),
                "no SiLU": build_conv_varlen(dataclasses.replace(base.key, silu=False, tanh_silu=False))}
        for name in [*ways, *ways]:
            run, activation = ways[name].run, None if name == "no SiLU" else "silu"
            why = check(run, sets[0], style, activation)
            if why is not None:
                print(f"{label:48s} {name:10s} FAILED: {why}", flush=True)
                continue
            outs = [torch.empty_like(c["x"]) for c in sets]
            us = time_graph([lambda c=c, o=o: call(run, c, style, o, activation) for c, o in zip(sets, outs)],
                            warmup_ms=100)
            print(f"{label:48s} {name:10s} {us:7.2f} us  {100 * copy_us / us:5.1f}%", flush=True)


if __name__ == "__main__":
    main()
