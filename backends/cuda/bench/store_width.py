"""Whether nvcc's split 16-byte stores cost the conv and RGDR kernels time (a timing experiment).

Read off the PTX that nvcc 13.0 gives for sm_90a (backends/cuda/NOTES.md, ninth session):
- in the registered varlen conv program, the first token of every group stores its 16-byte output
  vector as four 4-byte stores (``st.global.v2.u16``), while the other three tokens store theirs
  as one ``st.global.v4``;
- in every RGDR program, one of a thread's state rows is written as four ``st.global.u32``/``f32``;
- the other rows' stores, and the loads, are whole vectors.

A split store is four instructions, each touching every line of the warp's 512 bytes partially:
four times the store requests for a quarter of the bytes. TileLang's ``tl.enable_lower_ldgstg``
pass turns every vector global access into explicit 128-bit PTX instead. So this script compiles
each program twice, plain and with the pass, and checks that both give the same bits (outputs and
state or pool). It then times them on the same rotated input sets (CUDA-graph replay, medians of
``--rounds`` interleaved rounds), beside a copy of the same bytes.

Rows:
- the varlen conv at 4k tokens in 8 and in 1 sequences, at its registered block shape;
- the decode conv at B = 256;
- RGDR's default decode schedule at B = 32, 128 and 256 (T_b = 1), for both states.

    python3 store_width.py [--rounds 3] [--json out.json]
"""

import argparse
import importlib
import json
import statistics

import torch
from cuda_bench_common import rgdr_key, time_graph
from rgdr_speculate import same_bits, same_size_copy, time_row
from rgdr_splits import Forced

from tileops_core import load_manifest
from tileops_core.bench.workloads import instantiate
from tileops_core.workloads import dtype_cases
from tileops_cuda.kernels._common import compile_prim_func, direct_entry
from tileops_cuda.kernels.conv1d import (ConvUpdateBuildKey, ConvVarlenBuildKey, _make_update_run,
                                        _make_varlen_run)
from tileops_cuda.kernels.conv1d_program import conv_update_program, conv_varlen_program
from tileops_cuda.kernels.rgdr import build_rgdr
from tileops_cuda.kernels.rgdr_program import rgdr_program
from tileops_cuda.testing import rgdr_case

WIDE = {"tl.enable_lower_ldgstg": True}


def arch() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def conv_rows() -> list[tuple[str, str, object]]:
    """(op, row label, build key at the registered block shape) for the conv rows."""
    a = arch()
    return [
        ("CausalConv1dVarlenFwdOp", "qwen3.5-prefill-4k-8seq",
         ConvVarlenBuildKey("bfloat16", 8192, 4, True, False, True, "int32", "int32", False, a)),
        ("CausalConv1dVarlenFwdOp", "qwen3.5-prefill-4k-1seq",
         ConvVarlenBuildKey("bfloat16", 8192, 4, True, False, False, "int32", "int32", True, a)),
        ("CausalConv1dUpdateFwdOp", "qwen3.5-b256-t1",
         ConvUpdateBuildKey("bfloat16", 8192, 4, True, False, "lengths", "int32", "int32", None, a)),
    ]  # fmt: skip


def conv_run(key, configs):
    """The launcher's run of ``key``'s program compiled under ``configs``."""
    if isinstance(key, ConvVarlenBuildKey):
        return _make_varlen_run(key, direct_entry(compile_prim_func(conv_varlen_program(key), key.arch, configs)))
    return _make_update_run(key, direct_entry(compile_prim_func(conv_update_program(key), key.arch, configs)))


def conv_call(op: str, run, i: dict, params: dict, pool, out):
    if op == "CausalConv1dUpdateFwdOp":
        return run(i["x"], pool, i["weight"], i["actual_seq_lengths"], i["conv_state_indices"], i.get("bias"),
                   i.get("num_accepted_tokens"), params["activation"], params["seq_lens_style"], out)
    return run(i["x"], pool, i["weight"], i["actual_seq_lengths"], i["conv_state_indices"],
               i.get("has_initial_state"), i.get("bias"), params["activation"], params["seq_lens_style"], out)


def conv_row(op: str, label: str, key, rounds: int) -> dict:
    manifest = load_manifest()
    spec = manifest[op]
    importlib.import_module(spec.source["op"])  # the workload generators
    row = next(r for r in spec.workloads if r.label == label)
    made = [instantiate(spec, row, dtype_cases(row)[0], device="cuda", rng=torch.Generator().manual_seed(17 + n))
            for n in range(2)]  # two input sets: each row moves over 4x the L2 already  # fmt: skip
    params = {"activation": None, "seq_lens_style": "lengths", **made[0].op_kwargs}
    runs = {"plain": conv_run(key, None), "wide": conv_run(key, WIDE)}
    i = made[0].inputs
    got = {}
    for name, run in runs.items():
        pool, out = i["conv_state"].clone(), torch.full_like(i["x"], float("nan"))
        conv_call(op, run, i, params, pool, out)
        got[name] = (out, pool)
    torch.cuda.synchronize()
    same = all(torch.equal(a, b) for a, b in zip(got["plain"], got["wide"]))
    moved = 2 * i["x"].numel() * i["x"].element_size() + 2 * i["conv_state"][: i["conv_state_indices"].numel()].nbytes
    sets = [(m.inputs, m.inputs["conv_state"].clone(), torch.empty_like(m.inputs["x"])) for m in made]
    times: dict[str, list[float]] = {name: [] for name in runs}
    copies = []
    for _ in range(rounds):
        copies.append(same_size_copy(moved))
        for name, run in runs.items():
            times[name].append(time_graph([lambda s=s, run=run: conv_call(op, run, s[0], params, s[1], s[2])
                                           for s in sets]))  # fmt: skip
    return {"row": label, "same_bits": same, "copy_us": statistics.median(copies),
            **{f"{n}_us": statistics.median(t) for n, t in times.items()}}


def launch_splits(key, t, n_seq: int) -> int:
    """The ``splits`` the launcher passes for ``n_seq`` sequences (kernels/rgdr.py ``_make_run``):
    a streamed program's row chunks shared by enough programs for 8 an SM, else 1."""
    if not t.stream:
        return 1
    chunks = key.num_v_heads // key.num_k_heads * key.head_v_dim // t.block_v
    wanted = 8 * torch.cuda.get_device_properties(0).multi_processor_count
    return max(1, min(chunks, -(-wanted // (n_seq * key.num_k_heads))))


def rgdr_rows(rounds: int, gen) -> list[dict]:
    out = []
    for st in ("float32", "bfloat16"):
        key = rgdr_key(16, 32, st)
        launcher = build_rgdr(key)
        for B in (32, 128, 256):
            t = launcher.schedule.pick(B, B)
            wide_fn = direct_entry(compile_prim_func(rgdr_program(key, t), key.arch, WIDE))
            splits = launch_splits(key, t, B)
            variants = {"plain": Forced(launcher, t, splits), "wide": Forced(launcher, t, splits, fn=wide_fn)}
            case = rgdr_case(key, [1] * B, device="cuda", generator=gen)
            same = same_bits(variants["plain"], variants["wide"], case)
            foot, copy_us, times = time_row(variants, key, B, 1, gen, rounds)
            out.append({"row": f"rgdr {st} B={B} {t}", "same_bits": same, "copy_us": copy_us,
                        **{f"{n}_us": statistics.median(v) for n, v in times.items()}})
            print(json.dumps(out[-1]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(16)
    results = []
    for op, label, key in conv_rows():
        results.append(conv_row(op, label, key, args.rounds))
        print(json.dumps(results[-1]), flush=True)
    results += rgdr_rows(args.rounds, gen)
    print(f"{'row':58s} {'bits':>5s} {'copy':>8s} {'plain':>16s} {'wide':>16s} {'x':>6s}")
    for r in results:
        c, p, w = r["copy_us"], r["plain_us"], r["wide_us"]
        print(f"{r['row'][:58]:58s} {str(r['same_bits']):>5s} {c:8.2f} {p:8.2f} {100 * c / p:6.1f}% "
              f"{w:8.2f} {100 * c / w:6.1f}% {p / w:6.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
