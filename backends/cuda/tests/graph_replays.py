"""Replaying a captured CUDA graph as the eager calls ran: shared by the GPU tests of programs that
chain steps on one state (dependent launches, pools the next step reads)."""

from __future__ import annotations

from typing import Any, Callable


def assert_replays_like_eager(record: Callable[[], Any], reset: Callable[[], Any], check: Callable[[], Any],
                              times: int = 2) -> None:
    """Capture ``record()`` in a CUDA graph, then ``times`` times: ``reset()`` (the inputs and state
    back to their start, outputs poisoned), replay, synchronise and ``check()`` (which asserts)."""
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        record()
    for _ in range(times):
        reset()
        graph.replay()
        torch.cuda.synchronize()
        check()
