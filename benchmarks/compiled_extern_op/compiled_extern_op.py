"""What a custom op costs inside a ``torch.compile(fullgraph=True)`` graph, and whether writing its
implementation in C++ changes that (issue 15: "compiled with fullgraph=True no slower than eager").

Every way below does the same work per op: allocate one output like the input and call tvm-ffi's
``testing.nop`` with nine tensors, the FFI call a compiled TileLang kernel is (RGDR's compiled
function takes nine tensors), minus the launch. Ways, each at k = 1, 3 and 6 chained ops:

* ``direct``: Python calls the FFI function itself, as TileOPs' eager hot path does;
* ``torch.ops, python impl`` / ``torch.ops, c++ impl``: the op through the dispatcher from Python,
  implemented in Python (a ``torch.library.Library`` fragment, as ``tileops_core/op/boundary.py``
  defines TileOPs' ops) or in C++ (``nop_op.cpp``: DLTensor pointers straight into
  ``TVMFFIFunctionCall``);
* ``compiled, python impl`` / ``compiled, c++ impl``: the chain under ``torch.compile(fullgraph=True)``.

The slope over k is the cost of one op; the intercept, the graph's own (guards over its eight input
tensors, Inductor's wrapper). Run with tileops importable and tvm-ffi installed (tilelang installs it), and a C++ compiler; the
extension is built into a temporary folder:
``python benchmarks/compiled_extern_op/compiled_extern_op.py [--no-size-asserts] [--cpp-wrapper]``.
CPU only: the question is host time, which the GPU host pays the same way, 2-3x slower a
Python operation.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
from typing import Any, Callable

import torch

from tileops_core.bench.timing import Subject, time_cpu

HERE = pathlib.Path(__file__).resolve().parent
CHAIN = (1, 3, 6)


def build_probe() -> Any:
    """Compile and load ``nop_op.cpp``; return ``torch.ops.tileops_extern_probe.nop.default``."""
    import tvm_ffi
    from torch.utils.cpp_extension import load

    root = pathlib.Path(tvm_ffi.__file__).resolve().parent
    lib = root / "lib"
    load(name="tileops_extern_probe", sources=[str(HERE / "nop_op.cpp")], extra_include_paths=[str(root / "include")],
         extra_ldflags=[f"-L{lib}", "-ltvm_ffi", f"-Wl,-rpath,{lib}"], is_python_module=False,
         build_directory=tempfile.mkdtemp(prefix="tileops_extern_probe_"))
    return torch.ops.tileops_extern_probe.nop.default


def python_op(nop: Callable[..., Any]) -> tuple[Any, Any]:
    """The same op implemented in Python, defined as TileOPs defines its ops (and its fragment)."""
    library = torch.library.Library("tileops_extern_probe_py", "FRAGMENT")
    library.define("nop(Tensor a, Tensor b, Tensor c, Tensor d, Tensor e, Tensor f, Tensor g, Tensor h) -> Tensor")

    def impl(a: Any, b: Any, c: Any, d: Any, e: Any, f: Any, g: Any, h: Any) -> Any:
        out = torch.empty_like(h)
        nop(a, b, c, d, e, f, g, h, out)
        return out

    library.impl("nop", impl, "CompositeExplicitAutograd")
    return torch.ops.tileops_extern_probe_py.nop.default, library


def ways(nop: Callable[..., Any], py_op: Any, cpp_op: Any, inputs: list[torch.Tensor]) -> dict[str, Callable[..., Any]]:
    def direct(k: int) -> Callable[..., Any]:
        def step(x: torch.Tensor) -> torch.Tensor:
            for _ in range(k):
                out = torch.empty_like(x)
                nop(*inputs, x, out)
                x = out
            return x
        return step

    def through(op: Any, k: int) -> Callable[..., Any]:
        def step(x: torch.Tensor) -> torch.Tensor:
            for _ in range(k):
                x = op(*inputs, x)
            return x
        return step

    made: dict[str, Callable[..., Any]] = {}
    for k in CHAIN:
        made[f"direct|{k}"] = direct(k)
        made[f"torch.ops, python impl|{k}"] = through(py_op, k)
        made[f"torch.ops, c++ impl|{k}"] = through(cpp_op, k)
        made[f"compiled, python impl|{k}"] = torch.compile(through(py_op, k), fullgraph=True)
        made[f"compiled, c++ impl|{k}"] = torch.compile(through(cpp_op, k), fullgraph=True)
    return made


def time_ways(made: dict[str, Callable[..., Any]], x: torch.Tensor) -> dict[str, float]:
    """Median µs a step per way, the ways sampled interleaved (``tileops_core.bench.timing``)."""
    for fn in made.values():
        fn(x)  # compile before timing starts
    subjects = [Subject(name, [lambda fn=fn: fn(x)]) for name, fn in made.items()]
    return {s.name: m.median_s * 1e6 for s, m in zip(subjects, time_cpu(subjects))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-size-asserts", action="store_true", help="Inductor's size_asserts off")
    parser.add_argument("--cpp-wrapper", action="store_true", help="Inductor's C++ wrapper instead of Python")
    args = parser.parse_args(argv)
    import torch._inductor.config as inductor_config
    import tvm_ffi

    inductor_config.size_asserts = not args.no_size_asserts
    inductor_config.cpp_wrapper = args.cpp_wrapper
    torch.set_num_threads(1)
    nop = tvm_ffi.get_global_func("testing.nop")
    cpp_op = build_probe()
    py_op, _library = python_op(nop)
    for op in (py_op, cpp_op):
        torch.library.register_fake(op, lambda a, b, c, d, e, f, g, h: torch.empty_like(h))
    inputs = [torch.randn(16) for _ in range(7)]
    medians = time_ways(ways(nop, py_op, cpp_op, inputs), torch.randn(16))
    print(f"torch {torch.__version__}, tvm-ffi {tvm_ffi.__version__}, 1 thread, size_asserts "
          f"{inductor_config.size_asserts}, cpp_wrapper {inductor_config.cpp_wrapper}; median µs a step")
    names = list(dict.fromkeys(name.split("|")[0] for name in medians))
    print(f"{'way':24s}" + "".join(f"{f'k={k}':>9s}" for k in CHAIN) + f"{'µs/op':>9s}{'fixed':>9s}")
    for name in names:
        ys = [medians[f"{name}|{k}"] for k in CHAIN]
        slope = statistics.linear_regression(CHAIN, ys).slope
        fixed = statistics.linear_regression(CHAIN, ys).intercept
        print(f"{name:24s}" + "".join(f"{y:9.2f}" for y in ys) + f"{slope:9.2f}{fixed:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
