"""The fan copy: each 8 KiB block of a source read once and written ``fan`` times, to places given.

Why: an RGDR row with ``T_b`` tokens a sequence reads each state once and writes it after every token, so
its writes outnumber its reads and a 1:1 copy does not say what such traffic can reach. ``bench_cuda.py``
takes its fan ceilings from this copy with the copies side by side (:func:`fan_destinations`).
"""

# No `from __future__ import annotations`: the TileLang kernel below is annotated with locals.

import torch

__all__ = ["BLOCK", "fan_copy_kernel", "fan_destinations"]

BLOCK = 2048  # float32 elements a block: 8 KiB
_KERNELS: dict = {}


def fan_copy_kernel(fan: int):
    """``kern(x, dst, y)``: block ``b`` of ``x`` ((NB, BLOCK) float32) read once and written to blocks
    ``dst[k, b]`` of ``y`` ((NY, BLOCK) float32) for every ``k < fan``; one 128-thread program a block."""
    if fan not in _KERNELS:
        import tilelang.language as T

        from tileops_cuda.kernels._common import compile_prim_func

        nb = T.dynamic("NB")
        ny = T.dynamic("NY")
        blk = BLOCK

        @T.prim_func
        def fan_copy(x: T.Tensor((nb, blk), T.float32), dst: T.Tensor((fan, nb), T.int32),
                     y: T.Tensor((ny, blk), T.float32)):
            with T.Kernel(nb, threads=128) as bx:
                v = T.alloc_fragment((blk,), T.float32)
                for i in T.Parallel(blk):
                    v[i] = x[bx, i]
                for k in T.unroll(fan):
                    for i in T.Parallel(blk):
                        y[dst[k, bx], i] = v[i]

        _KERNELS[fan] = compile_prim_func(fan_copy, "sm_90")
    return _KERNELS[fan]


def fan_destinations(fan: int, blocks: int) -> torch.Tensor:
    """``dst[k, b]`` (int32, on the CPU): where copy ``k`` of block ``b`` goes among ``fan * blocks``: copy ``k``
    of the whole source is the ``k``-th of ``fan`` side by side."""
    return torch.arange(fan * blocks, dtype=torch.int32).view(fan, blocks)
