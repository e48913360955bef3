"""The launch path without a GPU: what a call passes to the compiled functions, how they are
found behind TileLang's JITKernel, and that a build happens once per identity.

Compiled kernels are stood in for by recorders; tensors are CPU tensors (the launch path
reads only their shapes).
"""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from tileops_cuda.kernels import _common, rgdr  # noqa: E402
from tileops_cuda.registered import KERNELS  # noqa: E402


class Recorder:
    """Stands for one compiled function: records each call's arguments."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[tuple] = []

    def __call__(self, *args):
        self.calls.append(args)


def _key(**kw):
    base = dict(input_dtype="bfloat16", state_dtype="bfloat16", num_k_heads=2, num_v_heads=4, head_k_dim=128,
                head_v_dim=128)
    base.update(kw)
    return rgdr.RGDRBuildKey(**base)


def _role_name(schedule, tiling):
    """"small", "large" or "short", with "+speculate" for a role's speculative twin; "decode<lo>-<hi>"
    for the tiling of a range of decode steps (``RGDRSchedule.decode_steps``)."""
    for lo, hi, own in schedule.decode_steps:
        if tiling == own:
            return f"decode{lo}-{hi}"
    plain = dataclasses.replace(tiling, speculate=False)
    role = "small" if plain == schedule.small else "large" if plain == schedule.large else "short"
    return role + ("+speculate" if tiling.speculate else "")


def _launcher(key, sm_count=4):
    schedule = rgdr.default_schedule(key)
    kernels = {t: Recorder(_role_name(schedule, t)) for t in schedule.tilings()}
    return rgdr.RGDRLauncher(key, schedule, kernels, sm_count), {r.name: r for r in kernels.values()}


def _call(lengths, key, extra=()):
    T, B = sum(lengths), len(lengths)
    t = dict(
        query=torch.randn(T, key.num_k_heads, key.head_k_dim), key=torch.randn(T, key.num_k_heads, key.head_k_dim),
        value=torch.randn(T, key.num_v_heads, key.head_v_dim), beta=torch.rand(T, key.num_v_heads),
        state=torch.randn(T + 1, key.num_v_heads, key.head_v_dim, key.head_k_dim),
        actual_seq_lengths=torch.tensor(lengths if key.seq_lens_style == "lengths" else [0, *torch.tensor(lengths).cumsum(0)]),
        ssm_state_indices=torch.randperm(T + 1)[:T], g=torch.randn(T, key.num_v_heads) if key.has_g else None,
        gk=torch.randn(T, key.num_v_heads) if key.gk_form == "scalar" else None,
        num_accepted_tokens=torch.ones(B, dtype=torch.int32) if key.accepted_dtype else None,
    )  # fmt: skip
    return t


def _interface_args(t, scale=None):
    return (t["query"], t["key"], t["value"], t["beta"], t["state"], t["actual_seq_lengths"], t["ssm_state_indices"],
            t["g"], t["gk"], t["num_accepted_tokens"], scale, "lengths", True)  # fmt: skip


def test_run_passes_only_the_optional_inputs_the_key_compiled_then_out_scale_and_splits():
    key = _key(has_g=False, gk_form="scalar", accepted_dtype="int32")
    launcher, rec = _launcher(key)
    t = _call([1, 2], key)
    out = torch.empty_like(t["value"])
    assert launcher.run(*_interface_args(t, scale=0.25), out) is out
    (args,) = rec["small"].calls
    names = ("query", "key", "value", "beta", "state", "actual_seq_lengths", "ssm_state_indices", "gk",
             "num_accepted_tokens")  # fmt: skip
    assert all(a is t[n] for a, n in zip(args, names)) and len(args) == len(names) + 3
    assert args[-3] is out and args[-2] == 0.25 and args[-1] == 1


def test_run_uses_the_default_scale_and_allocates_out_when_the_core_passes_none():
    key = _key()
    launcher, rec = _launcher(key)
    t = _call([3], key)
    out = launcher.run(*_interface_args(t))
    (args,) = rec["small"].calls
    assert args[-3] is out and out.shape == t["value"].shape and out.dtype == t["value"].dtype
    assert args[-2] == pytest.approx(128 ** -0.5)


def test_run_picks_the_schedules_tiling_and_splits_streamed_key_heads_to_fill_the_gpu():
    key = _key()  # bf16 state: small below 8 sequences, streaming for >= 32 short sequences
    launcher, rec = _launcher(key, sm_count=4)
    sched = launcher.schedule
    for lengths in ([1] * 2, [2] * 8, [1] * 32, [8] * 32):
        t = _call(lengths, key)
        launcher.run(*_interface_args(t), torch.empty_like(t["value"]))
        want = sched.pick(len(lengths), sum(lengths))
        name = _role_name(sched, want)
        assert rec[name].calls, (lengths, name)
    # 32 sequences x 2 key heads = 64 programs before splitting; 8 per SM x 4 SMs = 32 wanted: 1 split.
    # (bf16's decode steps of 16..63 sequences run their own streamed tiling; from 64 the short role's twin.)
    tiling = sched.pick(32, 32)
    decode = _role_name(sched, tiling)
    assert decode == "decode16-63" and tiling.stream and rec[decode].calls[-1][-1] == 1
    assert _role_name(sched, sched.pick(64, 64)) == "short+speculate"
    small_gpu, rec2 = _launcher(key, sm_count=132)
    t = _call([1] * 32, key)
    small_gpu.run(*_interface_args(t), torch.empty_like(t["value"]))
    chunks = key.num_v_heads // key.num_k_heads * key.head_v_dim // tiling.block_v
    assert rec2[decode].calls[-1][-1] == min(chunks, -(-8 * 132 // 64))


def test_run_launches_nothing_without_sequences_or_tokens():
    key = _key(seq_lens_style="cu_seqlens")
    launcher, rec = _launcher(key)
    for lengths in ([], [0, 0]):
        t = _call(lengths, key)
        launcher.run(*_interface_args(t), torch.empty_like(t["value"]))
    assert not any(r.calls for r in rec.values())


def test_checked_call_names_a_missing_optional_input_before_launching():
    key = _key()
    launcher, rec = _launcher(key)
    t = _call([1], key)
    with pytest.raises(ValueError, match="built with has_g=True but g is absent"):
        launcher(t["query"], t["key"], t["value"], t["beta"], t["state"], t["actual_seq_lengths"],
                 t["ssm_state_indices"], None, None, None, torch.empty_like(t["value"]), None)  # fmt: skip
    assert not any(r.calls for r in rec.values())


def test_every_tilelang_kernel_class_writes_the_outputs_the_core_allocates():
    assert all(k.writes_outputs is True for k in KERNELS)


class _Adapter:
    def __init__(self, executable, result_idx=()):
        self.result_idx = list(result_idx)
        self._executable = executable

    def get_exportable_executable(self):
        return self._executable


class _Module:
    def __init__(self):
        self.main = Recorder("main")

    def __getitem__(self, name):
        return getattr(self, name)


class _Executable:
    """Like tvm.runtime.Executable: ``jit()`` gives the runnable module."""

    def __init__(self, module):
        self.module = module

    def jit(self):
        return self.module


class _JIT:
    def __init__(self, adapter):
        self.adapter = adapter


def test_direct_entry_is_the_compiled_main_of_a_fresh_compile_or_a_cached_module():
    module = _Module()
    assert _common.direct_entry(_JIT(_Adapter(_Executable(module)))) is module.main
    assert _common.direct_entry(_JIT(_Adapter(module))) is module.main


def test_direct_entry_keeps_the_jit_kernel_where_tilelang_allocates_outputs_or_has_no_such_adapter():
    kernel = _JIT(_Adapter(_Executable(_Module()), result_idx=[2]))
    assert _common.direct_entry(kernel) is kernel
    bare = Recorder("no adapter")
    assert _common.direct_entry(bare) is bare


def test_concurrent_builds_of_one_identity_build_once():
    built = []

    def build():
        time.sleep(0.05)
        built.append(1)
        return object()

    identity = ("test-once", time.monotonic_ns())
    results = []
    threads = [threading.Thread(target=lambda: results.append(_common.cached_build(identity, build))) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(built) == 1 and len(results) == 8 and all(r is results[0] for r in results)


def test_a_failed_build_is_not_cached_and_the_next_caller_builds_again():
    identity = ("test-retry", time.monotonic_ns())

    def fail():
        raise RuntimeError("nvcc failed")

    with pytest.raises(RuntimeError, match="nvcc failed"):
        _common.cached_build(identity, fail)
    marker = object()
    assert _common.cached_build(identity, lambda: marker) is marker
