"""Shared plumbing for the TileLang kernels: dtype names, targets, the build cache.

Nothing here imports tilelang or torch at module import; both load on first build.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

__all__ = [
    "ELEM_BYTES",
    "Compiled",
    "SUPPORTED_ARCHS",
    "FLOAT_DTYPES",
    "annotate_pass_configs",
    "arch_refusal",
    "block_scan_macro",
    "uncovered_rows_macro",
    "cached_build",
    "compile_many",
    "compile_once",
    "compile_prim_func",
    "dependent_launch",
    "dependent_launch_refusal",
    "launchable_on",
    "DEPENDENT_LAUNCH_ARCHS",
    "direct_entry",
    "dtype_name",
    "inverse_rms_macro",
    "programs_at_registers",
    "row_refusal",
]

ELEM_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "int32": 4, "int64": 8}

#: What the kernels were written for: generic SIMT / wgmma-free code runs on sm_80+;
#: only sm_90 (H200) has been measured.
SUPPORTED_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")


def dtype_name(t: Any) -> str:
    """``torch.bfloat16`` (or a tensor of it) -> ``"bfloat16"``."""
    dt = getattr(t, "dtype", t)
    return str(dt).replace("torch.", "")


def programs_at_registers(threads: int, registers: int) -> int:
    """Programs of ``threads`` threads an SM holds at ``registers`` registers a thread (64K registers
    an SM): the minimum a kernel asks for (``T.annotate_min_blocks_per_sm``) to bound its registers."""
    return max(1, 65536 // (threads * registers))


#: The archs with programmatic dependent launch (Hopper on): where :func:`dependent_launch` may be on.
DEPENDENT_LAUNCH_ARCHS = ("sm_90", "sm_90a")


def dependent_launch(on: bool) -> None:
    """Inside a program's ``T.Kernel``, before its first memory access: with ``on``, wait for the
    stream's previous kernel (``cudaGridDependencySynchronize``), then let the next kernel launch
    (``cudaTriggerProgrammaticLaunchCompletion``).

    Why: TileLang then marks the function, and the TVM-FFI runtime launches it as a programmatic
    dependent (``cuLaunchKernelEx`` with programmatic stream serialisation), so its launch and block
    scheduling overlap the previous kernel's tail instead of following its end: about a microsecond
    a kernel, most of a small-batch decode kernel's time. Every memory access still follows the
    previous kernel's completion, so results are bit for bit the plain program's. Only on
    :data:`DEPENDENT_LAUNCH_ARCHS` (TileLang refuses to lower it elsewhere). The statements are
    emitted with ``T.evaluate``: a bare call from a helper would build the expression and drop it.
    """
    if on:
        import tilelang.language as T

        T.evaluate(T.pdl_sync())
        T.evaluate(T.pdl_trigger())


def dependent_launch_refusal(on: bool, kernel: str, arch: str, fix: str) -> str | None:
    """Why a program asking (``on``) for :func:`dependent_launch` cannot be built for ``arch`` (None
    where it can, or does not ask): the refusal of every kernel that takes the field, ending in the
    ``fix`` it names."""
    if not on or arch in DEPENDENT_LAUNCH_ARCHS:
        return None
    return (f"{kernel}: dependent_launch needs programmatic dependent launch ({', '.join(DEPENDENT_LAUNCH_ARCHS)}), "
            f"not {arch}; {fix}")


def launchable_on(arch: str, config: Any) -> Any:
    """``config`` (a frozen tiling or build key) as ``arch`` can launch it: a ``dependent_launch``
    field dropped where the arch has no programmatic dependent launch (the same program, launched
    plainly: the same bits), so a setting measured on Hopper never becomes a refusal elsewhere."""
    if getattr(config, "dependent_launch", False) and arch not in DEPENDENT_LAUNCH_ARCHS:
        return replace(config, dependent_launch=False)
    return config


def annotate_pass_configs(unchecked_index: bool, others: dict[str, bool] | None = None) -> None:
    """At the top of a prim_func's body: the TileLang pass configs it is compiled under, ``others``
    and, with ``unchecked_index``, ``tl.disable_safe_memory_legalize`` (no bounds checks on memory
    accesses: for programs whose every access is in bounds by construction, which then cost only
    instructions). Annotates nothing when there is nothing to set."""
    configs = dict(others or {})
    if unchecked_index:
        configs["tl.disable_safe_memory_legalize"] = True
    if configs:
        import tilelang.language as T

        T.annotate_pass_configs(configs)


def arch_refusal(kernel: str, arch: str, archs: Iterable[str] = SUPPORTED_ARCHS) -> str | None:
    archs = tuple(archs)
    if arch not in archs:
        return f"{kernel}: arch {arch} is not supported (written for {', '.join(archs)}); use the reference"
    return None


#: The element dtypes the row kernels are written for.
FLOAT_DTYPES = ("float16", "bfloat16", "float32")

#: CUDA's cap on gridDim.y and gridDim.z (x takes 2^31 - 1): a program that puts a runtime
#: extent on y or z is launched in pieces of at most this many (or lays its grid out on x).
GRID_YZ_MAX = 65535


def row_refusal(kernel: str, dtype: str, size: str, n: int, arch: str, plan: Callable[[], Any] | None = None,
                fit: str = "") -> str | None:
    """The refusal of a kernel over rows of ``n`` elements read 16 bytes at a time (named ``size``
    in messages): a dtype it is not written for, ``n`` not a whole number of vectors, a row that
    ``plan()`` (when given) cannot lay out in one program's registers (``fit`` says the limit),
    or the arch. None when it serves the row."""
    if dtype not in FLOAT_DTYPES:
        return f"{kernel}: dtype {dtype} is not one of {FLOAT_DTYPES}; use the reference"
    vec = 16 // ELEM_BYTES[dtype]
    if n % vec:
        return f"{kernel}: {size}={n} must be a multiple of {vec} (16-byte vectors); use the reference"
    if plan is not None and plan() is None:
        return f"{kernel}: {size}={n} does not fit in the registers of one program ({fit}); use the reference"
    return arch_refusal(kernel, arch)


def compile_prim_func(func: Any, arch: str) -> Any:
    """Compile a TileLang PrimFunc for ``arch`` with the tvm_ffi launcher (current torch stream)."""
    import tilelang  # lazy: importing tileops_cuda must not need tilelang or a GPU

    return tilelang.compile(
        func,
        target={"kind": "cuda", "arch": arch},
        execution_backend="tvm_ffi",
    )


def direct_entry(kernel: Any) -> Callable[..., Any]:
    """The compiled TVM-FFI function behind a TileLang ``JITKernel``: call it with the
    PrimFunc's parameters in order (tensors and scalars), on the current torch stream.

    For a kernel that allocates no outputs (every kernel here: outputs are parameters),
    ``JITKernel.__call__`` (tilelang 0.1.15, ``execution_backend="tvm_ffi"``) only forwards
    the arguments through a Python adapter that lists them again, looks the executable up
    and, for a fresh compile, re-walks its module tree on every call before reaching this
    same function; tensors, their shapes and dtypes, and the stream (through torch's
    DLPack exchange API) are handled by the compiled host code either way. Resolving the
    function once at build time leaves per call only the FFI call itself. Where the
    adapter is not the one described (another tilelang, or a kernel that allocates its
    outputs), the ``JITKernel`` itself is returned: slower, same behaviour.
    """
    adapter = getattr(kernel, "adapter", None)
    get_executable = getattr(adapter, "get_exportable_executable", None)
    if get_executable is None or getattr(adapter, "result_idx", None):
        return kernel
    executable = get_executable()
    # A fresh compile gives a ``tvm.runtime.Executable`` (``jit()`` links the host code once
    # and returns a module); a disk-cache hit gives the loaded module itself.
    module = executable.jit() if callable(getattr(type(executable), "jit", None)) else executable
    main = module["main"]
    if not callable(main):
        raise TypeError(f"TileLang kernel: the compiled module's 'main' is not callable ({type(main).__name__})")
    return main


class Compiled:
    """A compiled TileLang kernel: ``fn``, its :func:`direct_entry` (what launches call), and
    ``kernel``, the ``JITKernel`` it came from (generated sources, inspection)."""

    __slots__ = ("fn", "kernel")

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.fn = direct_entry(kernel)


def compile_once(identity: Any, refusal: str | None, program: Callable[[], Any], arch: str) -> Compiled:
    """The kernel of one build identity, compiled once per process from ``program()`` for
    ``arch``; a ValueError carrying ``refusal`` (the kernel's own reason) when it is not None."""
    if refusal is not None:
        raise ValueError(refusal)
    return cached_build(identity, lambda: Compiled(compile_prim_func(program(), arch)))


_LOCK = threading.Lock()
_BUILT: dict[Any, Any] = {}
_BUILDING: dict[Any, threading.Lock] = {}


def cached_build(identity: Any, build: Callable[[], Any]) -> Any:
    """Build once per process per identity (tilelang's disk cache spans processes).

    Concurrent callers of one identity wait for the first one's build instead of compiling
    it again; different identities build in parallel (``compile_many``). A build that
    raises leaves nothing cached, so the next caller tries again.
    """
    with _LOCK:
        hit = _BUILT.get(identity)
        if hit is not None:
            return hit
        gate = _BUILDING.setdefault(identity, threading.Lock())
    with gate:
        with _LOCK:
            hit = _BUILT.get(identity)
        if hit is not None:
            return hit
        made = build()
        with _LOCK:
            _BUILT[identity] = made
            _BUILDING.pop(identity, None)
        return made


def compile_many(thunks: Iterable[Callable[[], Any]], workers: int | None = None) -> list[Any]:
    """Run build thunks concurrently (TVM lowering releases the GIL; nvcc is a subprocess).

    Exceptions are returned in place of results so one bad build does not hide the others.
    """
    thunks = list(thunks)
    if not thunks:
        return []
    workers = workers or min(len(thunks), max(1, (os.cpu_count() or 2)))

    def run(th: Callable[[], Any]) -> Any:
        try:
            return th()
        except Exception as exc:  # reported to the caller, never swallowed
            return exc

    with concurrent.futures.ThreadPoolExecutor(workers, "tileops-build") as pool:
        return list(pool.map(run, thunks))


def row_plan(n: int, vec: int, max_per_thread: int = 48, ideal_per_thread: int = 16, threads: int = 0,
             rows: int = 0) -> tuple[int, int, int] | None:
    """How register-resident rows of ``n`` elements (``vec`` per 16-byte access) are laid on a
    block: ``(threads, padded_n, rows_per_program)``, or None when no block holds a row.

    Threads are a power of two in [64, 1024] (TileLang's block all-reduce wants that) and
    ``rows * padded_n`` is a multiple of ``threads * vec`` so every thread owns whole
    vectors (padding is masked in the kernels). Least padding wins, then about 16 values
    per thread, then fewer rows per program. Nonzero ``threads`` / ``rows`` fix that choice
    (a tuning sweep's configurations); the other rules still apply.
    """
    best = None
    for t in (64, 128, 256, 512, 1024):
        r = 1
        while r <= 64:
            if threads and t != threads or rows and r != rows:
                pass
            elif (t * vec) % r == 0 and ((t * vec) // r) % vec == 0:
                unit = (t * vec) // r
                padded = -(-n // unit) * unit
                per = r * padded // t
                if vec <= per <= max_per_thread:
                    score = (padded - n, abs(per - ideal_per_thread), r)
                    if best is None or score < best[0]:
                        best = (score, t, padded, r)
            r *= 2
    if best is None:
        return None
    return best[1], best[2], best[3]


def inverse_rms_macro(rows: int, cols: int, n: int) -> Any:
    """A TileLang macro ``(h, sq, rs, eps)`` of the register-row norms: ``rs[i] = rsqrt(mean of
    h[i, :n]² + eps)`` over a ``(rows, cols)`` fragment ``h`` whose columns past ``n`` hold
    zeros, with ``sq`` a float32 fragment of its shape (the squares, reduced across the threads
    holding a row)."""
    import tilelang.language as T

    @T.macro
    def inverse_rms(h, sq, rs, eps):
        for i, j in T.Parallel(rows, cols):
            sq[i, j] = T.cast(h[i, j], "float32") * T.cast(h[i, j], "float32")
        T.reduce_sum(sq, rs, dim=1)
        for i in T.Parallel(rows):
            rs[i] = T.rsqrt(rs[i] / T.float32(n) + eps)

    return inverse_rms


def block_scan_macro(threads: int, combine: Callable[[Any, Any], Any] | None = None) -> Any:
    """A TileLang macro ``(part, wsum, tid)``: ``part[0]`` (a one-element int32 local buffer, one a
    thread: a macro cannot assign its caller's var) becomes the inclusive scan over threads ``0..tid``
    of the block under ``combine`` (None: the sum; ``T.max`` over non-negative values: the running
    maximum); ``wsum``, an int32 shared buffer of ``max(threads // 32, 1)`` entries, is left holding
    each warp's total (one warp-shuffle scan and one barrier; the caller fences before writing
    ``wsum`` again)."""
    import tilelang.language as T

    add = combine or (lambda a, b: a + b)

    @T.macro
    def block_scan(part, wsum, tid):
        for off in T.unroll(5):  # inclusive scan within the warp
            up = T.shfl_up(part[0], 1 << off)
            if tid % 32 >= (1 << off):
                part[0] = add(part[0], up)
        if tid % 32 == 31:
            wsum[tid // 32] = part[0]
        T.sync_threads()
        for w in T.unroll(max(threads // 32, 1)):
            if w < tid // 32:
                part[0] = add(part[0], wsum[w])

    return block_scan


def uncovered_rows_macro(threads: int, row_shape: tuple[int, ...], dtype: str) -> Any:
    """A TileLang macro ``(out, head, tail, tid)``: zeros in the rows ``[0, head)`` and
    ``[tail, rows)`` of ``out`` (``[rows, *row_shape]``, rows of whole 16-byte vectors), one vector a
    thread and step over the block's ``threads``. The rows no sequence or expert covers under
    unchecked metadata (the spec's clipped reading): for valid metadata both ranges are empty and
    the loop makes no iteration, so a program pays a compare for the guarantee."""
    import tilelang.language as T

    vec = 16 // ELEM_BYTES[dtype]
    inner = row_shape[-1]
    if len(row_shape) not in (1, 2) or inner % vec:
        raise ValueError(f"uncovered_rows_macro: rows of shape {row_shape} are not one or two axes whose last holds "
                         f"whole 16-byte vectors of {dtype}")
    rv = math.prod(row_shape) // vec  # vectors of a row

    @T.macro
    def zero_rows(out, head, tail, tid):
        # out.shape[0] inline: a dynamic size bound to a name here takes that name in the kernel's signature
        for i in T.serial(T.ceildiv((head + out.shape[0] - tail) * rv, threads)):
            idx = i * threads + tid
            if idx < (head + out.shape[0] - tail) * rv:
                row = idx // rv
                zero_row = T.alloc_var("int32")  # a variable: a macro's plain name is substituted at every use
                zero_row = T.if_then_else(row < head, row, row - head + tail)
                first = idx % rv * vec  # the vector's first element in the row
                for j in T.vectorized(vec):
                    if len(row_shape) == 1:
                        out[zero_row, first + j] = T.cast(0, dtype)
                    else:
                        out[zero_row, first // inner, first % inner + j] = T.cast(0, dtype)

    return zero_rows
