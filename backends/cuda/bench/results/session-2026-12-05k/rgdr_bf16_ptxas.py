"""Registers and spills of bf16 RGDR tilings, lowered by tilelang and compiled by nvcc for sm_90a (no GPU):
run from anywhere with a python that has tilelang (thirty-fourth session: /work/tlvenv), nvcc on PATH."""
import os, sys, subprocess, pathlib, re
ROOT = pathlib.Path(__file__).resolve().parents[5]
sys.path[:0] = [str(ROOT / p) for p in (".", "backends/cuda", "backends/cpu_ref", "backends/cuda/tests")]
import tilelang
from lowered_source import lowered_source
from tileops_cuda.kernels.rgdr import RGDRTiling, RGDRBuildKey, STREAM_CUTS, TILED_CUTS, rgdr_refusal
from tileops_cuda.kernels.rgdr_program import rgdr_program
key = RGDRBuildKey("bfloat16", "bfloat16", 16, 32, 128, 128, use_qk_l2norm=True)
PDL = dict(dependent_launch=True)
cands = {
  "8r4b-spec(reg)": RGDRTiling(128, 16, 8, 4, True, True, **STREAM_CUTS, **PDL),
  "8r4b-plain": RGDRTiling(128, 16, 8, 4, True, **STREAM_CUTS, **PDL),
  "8r5b-plain": RGDRTiling(128, 16, 8, 5, True, **STREAM_CUTS, **PDL),
  "8r5b-spec": RGDRTiling(128, 16, 8, 5, True, True, **STREAM_CUTS, **PDL),
  "4r6b-spec": RGDRTiling(128, 16, 4, 6, True, True, **STREAM_CUTS, **PDL),
  "4r8b-plain": RGDRTiling(128, 16, 4, 8, True, **STREAM_CUTS, **PDL),
  "4r7b-plain": RGDRTiling(128, 16, 4, 7, True, **STREAM_CUTS, **PDL),
  "2r8b-tiled-spec(small)": RGDRTiling(128, 16, 2, 8, False, True, **TILED_CUTS, **PDL),
}
root = pathlib.Path(os.path.dirname(tilelang.__file__))
for name, t in cands.items():
    why = rgdr_refusal(key, t)
    if why: print(name, "refused:", why); continue
    src = lowered_source(lambda k, t=t: rgdr_program(k, t), key)
    cu = pathlib.Path(f"/tmp/rg_{abs(hash(name))}.cu"); cu.write_text(src)
    done = subprocess.run(["nvcc", "-gencode", "arch=compute_90a,code=sm_90a", "-std=c++17", "-c", "-Xptxas", "-v",
        f"-I{root/'src'}", f"-I{root/'3rdparty'/'cutlass'/'include'}", "-DENABLE_BF16", str(cu), "-o", str(cu)+".o"],
        capture_output=True, text=True, timeout=900)
    rep = done.stderr + done.stdout
    regs = re.findall(r"Used (\d+) registers", rep); sp = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", rep)
    stack = re.findall(r"(\d+) bytes stack frame", rep)
    print(f"{name:24s} rc={done.returncode} regs={regs} spill={sp} stack={stack}", flush=True)
