"""The generated CUDA of a TileLang program lowered as ``tilelang.compile`` lowers it: under the
pass configs the program annotates (a program that turns a pass off says so in its attributes),
for sm_90a, without a GPU. Shared by the lowering tests of the programs that annotate configs."""

from __future__ import annotations

import re
from typing import Any, Callable

import pytest


def lowered_source(program: Callable[[Any], Any], key: Any) -> str:
    """``program(key)``'s CUDA; skips the test where tilelang is not installed (CI)."""
    tilelang = pytest.importorskip("tilelang")
    func = program(key)
    configs = dict(func.attrs["tilelang_pass_configs"]) if "tilelang_pass_configs" in func.attrs else {}
    target = {"kind": "cuda", "arch": "sm_90a"}
    with tilelang.tvm.transform.PassContext(opt_level=3, config=configs), tilelang.tvm.target.Target(target):
        return tilelang.lower(func, target=target).kernel_source


def grid_extents(func: Any) -> dict[str, Any]:
    """A TileLang PrimFunc's grid before lowering: ``{"blockIdx.x": extent, ...}``, an extent an
    int or the expression of the program's runtime sizes it launches with."""
    tilelang = pytest.importorskip("tilelang")
    tir = tilelang.tvm.tirx
    extents: dict[str, Any] = {}

    def visit(node: Any) -> None:
        if isinstance(node, tir.For) and node.thread_binding is not None:
            tag = node.thread_binding.thread_tag
            if tag.startswith("blockIdx"):
                extents[tag] = node.extent

    tir.stmt_functor.post_order_visit(func.body, visit)
    return extents


def waits_before_its_first_memory_access(source: str, buffers: str) -> bool:
    """Whether a dependent-launch program's CUDA waits for the previous kernel
    (``cudaGridDependencySynchronize``) before its first access to any of ``buffers`` (a regex
    alternation of parameter names) and before it lets the next kernel launch."""
    body = source[source.index("__global__"):]
    wait = body.index("cudaGridDependencySynchronize();")
    first_access = min(m.start() for m in re.finditer(rf"\b({buffers})\[", body))
    return wait < first_access and wait < body.index("cudaTriggerProgrammaticLaunchCompletion();")


def _subscript(text: str, at: int) -> str:
    """The subscript of the ``[`` at ``at`` in ``text``, brackets balanced."""
    depth = 0
    for i in range(at, len(text)):
        depth += {"[": 1, "]": -1}.get(text[i], 0)
        if depth == 0:
            return text[at + 1 : i]
    raise ValueError(f"an unclosed subscript at {at}")


def index_casts(source: str, buffer: str, bound: str) -> tuple[int, list[str]]:
    """The casts to int of a 64-bit index table ``buffer``'s entries in ``source`` (where its loads are
    inline, as without TileLang's bounds checks): how many, and the lines of those not on the line after
    a test of the same entry against ``[0, bound)`` in 64 bits, ``bound`` as the CUDA prints it
    (``(int64_t)0 <= buffer[i]`` and ``buffer[i] < ((int64_t)S)``): an entry made int32 before its range
    test wraps."""
    lines = source.splitlines()
    count, untested = 0, []
    for n, line in enumerate(lines):
        for m in re.finditer(rf"\(\(int\){buffer}\[", line):
            entry = f"{buffer}[{_subscript(line, m.end() - 1)}]"
            count += 1
            before = lines[n - 1] if n else ""
            if f"(int64_t)0 <= {entry}" not in before or f"{entry} < {bound})" not in before:
                untested.append(line.strip())
    return count, untested
