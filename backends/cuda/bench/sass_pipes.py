"""A routing program's SASS counted by issue pipe, on a machine with nvcc and no GPU.

Issue 21's 4k routing row is bound after its rows land, and the instruction count alone did not predict it:
``late_refill`` ran 63 fewer instructions a token and tied (NOTES, fifty-ninth session). On sm_90 the integer
compares, min/max, selects, logic and shifts go to the ALU pipe, which takes a warp instruction every other cycle of
a sub-partition, while ``IMAD`` and float32 arithmetic go to the FMA pipe; Nsight Compute found the ALU pipe the
busiest (s42c). This prints a key's registers and spills (ptxas), its static SASS by pipe, and, given the listing's
line ranges of a token's path (``--path``, read off ``--listing``), that path's instructions by pipe.

    PATH=/usr/local/bin:$PATH PYTHONPATH=<tilelang 0.1.15's site-packages> .venv/bin/python \\
        backends/cuda/bench/sass_pipes.py '{"dtype": "bfloat16", "ids_dtype": "int64", "experts": 512, "top_k": 10,
        "arch": "sm_90a", "program": "logits", "tokens": 16, "unchecked_index": true, "dependent_launch": true,
        "heads": 4}' --listing /tmp/k.txt --path 1-224,409-411*6,210-224*6,409-425,603-666,1354-1384

A range ``A-B*N`` counts lines A to B (1-based, inclusive) N times; the order of ranges does not matter. The lines
are those of this nvcc's listing: find the path again for another compiler (its branches, ``REDUX`` rounds and
``EXIT``s mark it). cuobjdump comes from PATH or from the ``nvidia-cuda-cuobjdump`` wheel.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tileops_cuda from this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # layer_ops_sweep's nvcc_cubin

#: Opcode families by the pipe that issues them on sm_90 (64 results a clock an SM for the integer ALU family, 128
#: for float32 on the FMA pipe, by NVIDIA's throughput table; ``IMAD`` and its moves, shifts and adds on the FMA
#: pipe's heavy half). Leads, not measurements: Nsight Compute's pipe utilisation is the check.
PIPES = {
    "alu": {"LOP3", "ISETP", "SEL", "VIMNMX", "VIMNMX3", "IMNMX", "SHF", "IADD3", "VIADD", "PRMT", "FMNMX", "FSETP",
            "PLOP3", "LEA", "FSEL", "SGXT", "BMSK", "FLO", "POPC", "IABS", "F2FP", "HSETP2", "HMNMX2", "VHMNMX",
            "ISCADD", "VIADDMNMX"},
    "fma": {"IMAD", "FFMA", "FADD", "FMUL", "FSWZADD", "HFMA2", "HADD2", "HMUL2", "IMUL"},
    "xu": {"MUFU"},
    "warp": {"SHFL", "REDUX", "VOTE", "MATCH"},
    "memory": {"LDG", "STG", "LDS", "STS", "LDC", "LDL", "STL"},
}
_INSTRUCTION = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*(/\*.*)?$")


def pipe_of(opcode: str) -> str:
    """The pipe of an instruction's opcode (its family before the first dot); control flow, uniform and special
    register instructions are named as themselves."""
    family = opcode.split(".")[0]
    return next((pipe for pipe, families in PIPES.items() if family in families), family)


def listing(sass: str) -> list[str]:
    """The instructions of cuobjdump's SASS, one a line, predicates kept."""
    return [m.group(2) for m in map(_INSTRUCTION.match, sass.splitlines()) if m]


def by_pipe(lines: list[str]) -> tuple[collections.Counter, collections.Counter]:
    """Instructions by pipe, and the ALU pipe's by opcode family."""
    pipes: collections.Counter = collections.Counter()
    alu: collections.Counter = collections.Counter()
    for line in lines:
        opcode = re.sub(r"^@!?U?P\w+\s+", "", line).split()[0]
        pipes[pipe_of(opcode)] += 1
        if pipe_of(opcode) == "alu":
            alu[opcode.split(".")[0]] += 1
    return pipes, alu


def path_lines(lines: list[str], path: str) -> list[str]:
    """The listing's lines along ``path`` (``A-B`` or ``A-B*N`` ranges, comma-separated, 1-based)."""
    out: list[str] = []
    for part in filter(None, path.split(",")):
        m = re.fullmatch(r"(\d+)-(\d+)(?:\*(\d+))?", part.strip())
        if m is None or not 1 <= int(m.group(1)) <= int(m.group(2)) <= len(lines):
            raise SystemExit(f"--path: {part!r} is not A-B or A-B*N within the listing's {len(lines)} lines")
        out += lines[int(m.group(1)) - 1:int(m.group(2))] * int(m.group(3) or 1)
    return out


def _cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia  # the nvidia-cuda-cuobjdump wheel's namespace
    except ImportError:
        raise SystemExit("no cuobjdump on PATH and no nvidia-cuda-cuobjdump wheel") from None
    for root in map(Path, nvidia.__path__):
        for candidate in sorted(root.glob("cu*/bin/cuobjdump")):
            return str(candidate)
    raise SystemExit("no cuobjdump on PATH or in the nvidia wheels")


def routing_sass(fields: dict) -> tuple[str, str]:
    """(ptxas's report, cuobjdump's SASS) of the routing program of ``fields`` (a MoETopKRoutingBuildKey's)."""
    from layer_ops_sweep import nvcc_cubin
    from tileops_cuda.kernels._common import compile_prim_func
    from tileops_cuda.kernels.moe_topk_routing import MoETopKRoutingBuildKey
    from tileops_cuda.kernels.moe_topk_routing_program import routing_program

    key = MoETopKRoutingBuildKey(**fields)
    source = compile_prim_func(routing_program(key), key.arch).get_kernel_source()
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp, "routing.cubin")
        ptxas = nvcc_cubin(source, key.arch, cubin)
        sass = subprocess.run([_cuobjdump(), "-sass", str(cubin)], capture_output=True, text=True, check=True)
    report = "\n".join(line for line in ptxas.splitlines() if "registers" in line or "spill" in line)
    return report, sass.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("key", help="the MoETopKRoutingBuildKey's fields as JSON")
    ap.add_argument("--path", default="", help="the listing's line ranges of a token's path: A-B or A-B*N, comma-"
                    "separated")
    ap.add_argument("--listing", default="", help="write the numbered instruction listing here")
    args = ap.parse_args()
    report, sass = routing_sass(json.loads(args.key))
    lines = listing(sass)
    if args.listing:
        Path(args.listing).write_text("".join(f"{i:5d}  {line}\n" for i, line in enumerate(lines, 1)))
    print(report)
    pipes, alu = by_pipe(lines)
    print(f"static: {len(lines)} instructions; {dict(pipes.most_common())}")
    if args.path:
        along = path_lines(lines, args.path)
        pipes, alu = by_pipe(along)
        print(f"path: {len(along)} instructions; {dict(pipes.most_common())}")
        print(f"  ALU pipe by opcode: {dict(alu.most_common())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
