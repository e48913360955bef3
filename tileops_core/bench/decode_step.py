"""A decode step as serving systems run it, four ways: eager, CUDA graph, compiled, reduce-overhead;
the compiled ways under three compile decomposition policies.

The step is a slice of a Gated DeltaNet layer at decode: ``RMSNorm`` over the hidden state,
the recurrent gated delta rule over a state pool with one slot per sequence (slot indices,
as a serving system's cache manager gives them), and ``SiluAndMul`` on its output. Each
way starts from the same state pool and inputs; after ``steps`` steps its state pool and
last output must equal eager's bit for bit (a compiled graph or a captured one must compute
exactly what eager does, and write the state exactly where eager does) — except where a
policy decomposes ops (below).

Per way, two numbers: **host** seconds per step (back-to-back steps timed by the host
clock, no synchronize inside the loop: what the framework costs) and **wall** seconds per
step once the device is the limit (the host loop's total over the steps, synchronized at
the end). The step's **device** time is a CUDA graph's replay timed by events: the kernels
alone, no host in between. On the CPU only eager and compiled run.

The compiled ways run under each compile decomposition policy of :data:`POLICIES`, in the
same run (issue 20: Inductor where it wins): **custom_ops** (no op decomposes: each op is
its opaque custom op, its kernel the one eager runs), **all_decompositions** (``auto``: every
op with a traceable kernel is inlined as that kernel's torch code, which Inductor fuses) and
**default** (``measured``: the documented policy, :data:`~tileops_core.kernels.compile_policy.MEASURED`).
Under custom_ops the state pool and output must equal eager's bit for bit. A decomposed op
computes with Inductor's code instead of the kernel eager runs (TileLang on a GPU), so a
policy that decomposes must match eager within :data:`DECOMPOSED_TOLERANCE` (the largest
difference over the largest magnitude, per tensor: the output and the state pool), and
write the state pool in exactly the slots eager writes (every other slot bit for bit as it
was). Each compiled way also reports its **device** time per policy: the step compiled
fullgraph under that policy, captured in one CUDA graph and replayed (reduce-overhead's
graph replays the same kernels).

A compiled way also reports **torch's floor**: the host time per call of a step that runs
one trivial kernel (``x.neg()``) compiled the same way, on the same inputs, in the same
run. It is what ``torch.compile`` itself costs per call on this host (guards, the AOT and
Inductor wrappers, cudagraph-tree bookkeeping), which no op library can go below; the
step's time over that floor is what the three ops cost inside the compiled graph.
"""

from __future__ import annotations

import statistics
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

import torch

from ..errors import TileOpsError
from ..kernels.compile_policy import parse_decompose_policy, use_decompose_policy
from ..op.decompose import decomposed_ops

__all__ = ["DecodeStepConfig", "DecodeStepResult", "TINY", "WAYS", "POLICIES", "DECOMPOSED_TOLERANCE", "WayResult",
           "format_decode_step", "run_decode_step"]

WAYS = ("eager", "cuda_graph", "compile_fullgraph", "compile_reduce_overhead")

#: The compile decomposition policies each compiled way runs under: name -> ``TILEOPS_COMPILE_DECOMPOSE`` text.
POLICIES = {"custom_ops": "none", "all_decompositions": "auto", "default": "measured"}

#: The ops of the step (what a way's ``decomposed`` list can hold).
STEP_OPS = ("RMSNormFwdOp", "RecurrentGatedDeltaRuleFwdOp", "SiluAndMulFwdOp")

#: Largest |got - eager| over the largest |eager|, per tensor (output, state pool), for a way whose
#: policy decomposes ops: Inductor's fused torch code rounds differently from the kernel eager
#: runs, by a unit in the last place of an element here and there, and the float32 state pool
#: carries the step dtype's rounding of its inputs. Per step dtype: four units in the last place
#: at the tensor's largest value (bfloat16: 2**-5, float16: 2**-8); float32 steps within 1e-5.
DECOMPOSED_TOLERANCE = {"bfloat16": 2**-5, "float16": 2**-8, "float32": 1e-5}


@dataclass(frozen=True)
class DecodeStepConfig:
    """Sizes of the step (Qwen3.5 heads by default; :data:`TINY` for a CPU) and how long to time it."""

    B: int = 32
    NK: int = 16
    NV: int = 32
    DK: int = 128
    DV: int = 128
    dtype: str = "bfloat16"
    state_dtype: str = "float32"
    steps: int = 200
    repeats: int = 15


#: A step small enough for the CPU reference (CI, a laptop).
TINY = DecodeStepConfig(B=4, NK=2, NV=4, DK=16, DV=16, steps=20, repeats=5)


@dataclass
class WayResult:
    """One way of running the step (under one policy, for a compiled way): its times and how it
    compares with eager."""

    way: str
    policy: str | None = None  # a key of POLICIES for a compiled way; None for eager and cuda_graph
    host_s: float | None = None
    wall_s: float | None = None
    device_s: float | None = None  # the kernels alone (see the module docstring); None on the CPU
    equal_to_eager: bool | None = None  # bit for bit, output and state pool
    max_rel_diff: float | None = None  # the largest |got - eager| / max |eager| of the output and the state pool
    state_written_where_eager_writes: bool | None = None
    matches_eager: bool | None = None  # the verdict: bit for bit, or within tolerance where the policy decomposes
    decomposed: list[str] = field(default_factory=list)  # the step's ops the compiled graph inlined
    error: str | None = None
    floor_host_s: float | None = None  # torch.compile's own cost per call, same way (see the module docstring)

    @property
    def label(self) -> str:
        return self.way if self.policy is None else f"{self.way} [{self.policy}]"


@dataclass
class DecodeStepResult:
    """The step's device time and every way's result."""

    config: DecodeStepConfig
    device: str
    device_s: float | None
    ways: list[WayResult] = field(default_factory=list)
    #: Each policy run: its name -> the ops it decomposes (the canonical policy text).
    policies: dict[str, str] = field(default_factory=dict)

    def verdicts(self) -> list[dict[str, Any]]:
        """Per compiled way: the default policy's wall time against the better of "custom ops" and
        "all decompositions" (issue 20: the default must be no slower than the best of them), and
        the fastest policy of the run."""
        out = []
        for way in dict.fromkeys(w.way for w in self.ways if w.policy is not None):
            timed = {w.policy: w.wall_s for w in self.ways if w.way == way and w.policy is not None
                     and w.wall_s is not None and not w.error}
            others = {name: timed[name] for name in ("custom_ops", "all_decompositions") if name in timed}
            if "default" not in timed or not others:
                continue
            best = min(others, key=others.__getitem__)
            out.append({"way": way, "default_wall_s": timed["default"], "best_other": best,
                        "best_other_wall_s": others[best], "ratio": timed["default"] / others[best],
                        "fastest": min(timed, key=timed.__getitem__)})
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "device": self.device, "device_s": self.device_s,
                "policies": self.policies, "tolerance": DECOMPOSED_TOLERANCE.get(self.config.dtype),
                "ways": [asdict(w) for w in self.ways], "policy_verdicts": self.verdicts()}


class _Step:
    """The ops and inputs of one step; ``__call__`` runs it on the inputs it holds."""

    def __init__(self, cfg: DecodeStepConfig, device: torch.device, seed: int) -> None:
        from ..ops.activation import SiluAndMulFwdOp
        from ..ops.linear_attention import RecurrentGatedDeltaRuleFwdOp
        from ..ops.normalization import RMSNormFwdOp

        self.cfg = cfg
        g = torch.Generator().manual_seed(seed)
        dt, sdt = getattr(torch, cfg.dtype), getattr(torch, cfg.state_dtype)
        B, NK, NV, DK, DV = cfg.B, cfg.NK, cfg.NV, cfg.DK, cfg.DV
        hidden = NV * DV
        pool = 2 * B + 8

        def rand(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=g)

        # As a serving system runs them: the checks that read tensor contents (a device sync,
        # which no CUDA graph can hold) stay off whatever TILEOPS_CHECK_CONTENTS says.
        self.norm = RMSNormFwdOp(normalized_shape=[hidden], eps=1e-6, check_contents=False)
        self.rgdr = RecurrentGatedDeltaRuleFwdOp(use_qk_l2norm_in_kernel=True, check_contents=False)
        self.act = SiluAndMulFwdOp(check_contents=False)
        self.x = rand(B, hidden).to(device, dt)
        self.weight = (1 + 0.1 * rand(hidden)).to(device, dt)
        self.q = rand(B, NK, DK).to(device, dt)
        self.k = rand(B, NK, DK).to(device, dt)
        self.beta = torch.sigmoid(rand(B, NV)).to(device, dt)
        self.g = (-(0.05 + 0.5 * torch.rand(B, NV, generator=g))).to(device)
        self.state0 = (0.1 * rand(pool, NV, DV, DK)).to(device, sdt)
        self.state = self.state0.clone()
        self.lengths = torch.ones(B, dtype=torch.int32, device=device)
        self.slots = torch.randperm(pool, generator=g)[:B].to(device, torch.int32)
        self.shape = (B, NV, DV)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        h = self.norm(x, self.weight)
        out = self.rgdr(self.q, self.k, h.view(self.shape), self.beta, state, self.lengths, self.slots, self.g)
        return self.act(out.view(x.shape[0], -1))

    def reset(self) -> None:
        self.state.copy_(self.state0)


def _time_loop(fn: Callable[[], Any], steps: int, repeats: int, sync: Callable[[], None]) -> tuple[float, float]:
    """(median host seconds per step with no sync inside, median wall seconds per step synced at the end)."""
    host, wall = [], []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        host.append((t1 - t0) / steps)
        wall.append((t2 - t0) / steps)
    return statistics.median(host), statistics.median(wall)


def _capture(run: Callable[[], Any], device: torch.device, steps: int) -> tuple[Any, Any]:
    """``steps`` calls of ``run`` captured in one CUDA graph, after a warm-up on a side stream
    (capture needs warmed-up allocations and lazy inits off the capture stream); the graph
    and the last call's output."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            run()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    out = None
    with torch.cuda.graph(graph):
        for _ in range(steps):
            out = run()
    return graph, out


def _graph_device_time(run: Callable[[], Any], device: torch.device, steps: int) -> float:
    """Device seconds per step: ``steps`` steps captured in one CUDA graph, replay timed by events."""
    graph, _ = _capture(run, device, steps)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / steps)
    return statistics.median(times)


def run_decode_step(device: torch.device, cfg: DecodeStepConfig = DecodeStepConfig(), seed: int = 0,
                    ways: tuple[str, ...] = WAYS, policies: Mapping[str, str] = POLICIES) -> DecodeStepResult:
    """Run the step every way in ``ways`` that ``device`` supports, each compiled way under each
    policy of ``policies`` (name -> ``TILEOPS_COMPILE_DECOMPOSE`` text); see the module docstring."""
    on_cuda = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if on_cuda else (lambda: None)
    s = _Step(cfg, device, seed)
    # Eager: the reference every other way must equal, bit for bit.
    s.reset()
    for _ in range(cfg.steps):
        want_out = s.step(s.x, s.state)
    sync()
    want = (want_out, s.state.clone())
    device_s = None
    if on_cuda:
        device_s = _graph_device_time(lambda: s.step(s.x, s.state), device, cfg.steps)
    result = DecodeStepResult(cfg, str(device), device_s)
    for name, text in policies.items():
        result.policies[name] = parse_decompose_policy(text, f"decode step policy {name}").canonical()
    floors: dict[str, float] = {}
    compiled_device_s: dict[str, float | None] = {}
    for way in ways:
        if way in ("cuda_graph", "compile_reduce_overhead") and not on_cuda:
            continue
        for policy in (tuple(policies) if way.startswith("compile") else (None,)):
            w = WayResult(way, policy)
            try:
                if policy is None:
                    run = _run_way(w, s, device, want, sync, exact=True)
                    w.device_s = device_s
                else:
                    # (everything that calls the compiled step inside: leaving the policy changes the
                    # selection state, and the step's next call would be traced again)
                    with use_decompose_policy(policies[policy], f"decode step policy {policy}"):
                        run = _run_way(w, s, device, want, sync, exact=result.policies[policy] == "none")
                        w.decomposed = [op for op in decomposed_ops() if op in STEP_OPS]
                        if on_cuda and way == "compile_fullgraph":  # the same kernels as reduce-overhead's graph
                            compiled_device_s[policy] = _captured_device_time(run, device, cfg.steps)
                    w.device_s = compiled_device_s.get(policy)
                    # torch's floor does not depend on the policy (no op in it): measured once per way
                    if way not in floors:
                        torch._dynamo.reset()
                        floors[way] = _time_loop(_prepare(way, s, device, _trivial_step), cfg.steps, cfg.repeats,
                                                 sync)[0]
                    w.floor_host_s = floors[way]
            except (TileOpsError, RuntimeError, AssertionError) as exc:
                w.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}{_where(exc)}"
            result.ways.append(w)
            torch._dynamo.reset()
    return result


def _run_way(w: WayResult, s: _Step, device: torch.device, want: tuple[torch.Tensor, torch.Tensor],
             sync: Callable[[], None], exact: bool) -> Callable[[], Any]:
    """Run the step ``w.way`` (under the policy in force), compare its last output and state pool
    with eager's (``want``; ``exact``: bit for bit is required), time it; the prepared step."""
    cfg = s.cfg
    run = _prepare(w.way, s, device)
    s.reset()
    for _ in range(cfg.steps):
        out = run()
    sync()
    want_out, want_state = want
    w.equal_to_eager = bool(torch.equal(s.state, want_state) and torch.equal(out, want_out))
    w.max_rel_diff = max(_rel_diff(out, want_out), _rel_diff(s.state, want_state))
    written = (s.state != s.state0).flatten(1).any(1)
    w.state_written_where_eager_writes = bool(torch.equal(written, (want_state != s.state0).flatten(1).any(1)))
    tolerance = DECOMPOSED_TOLERANCE.get(cfg.dtype, 0.0)
    w.matches_eager = w.equal_to_eager or (not exact and w.state_written_where_eager_writes
                                           and w.max_rel_diff <= tolerance)
    w.host_s, w.wall_s = _time_loop(run, cfg.steps, cfg.repeats, sync)
    return run


def _rel_diff(got: torch.Tensor, want: torch.Tensor) -> float:
    """The largest |got - want| over the largest |want| (0 when both are all zeros)."""
    scale = want.float().abs().max().item()
    diff = (got.float() - want.float()).abs().max().item()
    return diff / scale if scale else diff


def _captured_device_time(run: Callable[[], Any], device: torch.device, steps: int) -> float | None:
    """Device seconds per step of a step compiled fullgraph (its kernels captured in one CUDA
    graph); None where the compiled step cannot be captured (it syncs, or allocates outside the
    graph's pool): the way's host and wall times stand without it."""
    try:
        return _graph_device_time(run, device, steps)
    except RuntimeError:
        return None


def _where(exc: BaseException) -> str:
    """`` (at file:line in function)`` of the innermost frame that raised: a way's error says where."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    f = frames[-1]
    return f" (at {f.filename}:{f.lineno} in {f.name})"


def _trivial_step(x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """One trivial kernel on the step's inputs: what a compiled call costs with no op in it."""
    return x.neg()


def _prepare(way: str, s: _Step, device: torch.device,
             fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None) -> Callable[[], Any]:
    """A no-argument callable running one step the given way (compiled and warmed up);
    ``fn`` replaces the step (torch's floor)."""
    if way == "eager":
        return lambda: s.step(s.x, s.state)
    if way == "cuda_graph":
        graph, captured = _capture(lambda: s.step(s.x, s.state), device, 1)

        def replay() -> torch.Tensor:
            graph.replay()
            return captured
        return replay
    step = fn or s.step
    if way == "compile_fullgraph":
        compiled = torch.compile(step, fullgraph=True)
    elif way == "compile_reduce_overhead":
        # What a serving system keeps in place between steps (weights, the state pool, the cache
        # manager's metadata, the persistent buffer the step's input is written into) has a
        # static address: the captured graph reads it where it is, as the cuda_graph way does,
        # instead of copying it into the graph's own buffers on every replay.
        for t in (s.x, s.state, s.weight, s.q, s.k, s.beta, s.g, s.lengths, s.slots):
            torch._dynamo.mark_static_address(t)
        compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    else:
        raise TileOpsError(f"unknown way {way!r} (known: {', '.join(WAYS)})")
    # Compiled cold, never from torch's on-disk caches: a cached graph skips the trace in which
    # the policy decides, so what the step inlined (``decomposed_ops``) would not be what it runs.
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        for _ in range(3):
            compiled(s.x, s.state)  # compile and warm up (reduce-overhead records its graph here)
    return lambda: compiled(s.x, s.state)


def format_decode_step(result: DecodeStepResult) -> str:
    """The terminal table: per way and policy host, wall and device time per step, ratio of wall to
    eager's device time, torch's floor and the comparison with eager; then the policies and, per
    compiled way, the default policy against the best other."""
    c = result.config
    dev = "-" if result.device_s is None else f"{result.device_s * 1e6:.1f} µs"
    tolerance = DECOMPOSED_TOLERANCE.get(c.dtype, 0.0)
    lines = [f"decode step on {result.device}: RMSNorm -> RGDR -> SiluAndMul, B={c.B} NK={c.NK} NV={c.NV} DK={c.DK} "
             f"DV={c.DV} {c.dtype}, {c.state_dtype} state; device time per step {dev} (CUDA graph replay, events)",
             f"{'way [policy]':46s} {'host/step':>11s} {'wall/step':>11s} {'device/step':>11s} {'wall/device':>11s}  "
             f"{'torch floor':>11s}  {'inlined':24s} equal to eager"]
    for w in result.ways:
        if w.error or w.host_s is None or w.wall_s is None:
            lines.append(f"{w.label:46s} error: {w.error or 'not timed'}")
            continue
        ratio = "-" if result.device_s is None else f"{w.wall_s / result.device_s:.2f}x"
        floor = "-" if w.floor_host_s is None else f"{w.floor_host_s * 1e6:.1f} µs"
        device = "-" if w.device_s is None else f"{w.device_s * 1e6:.1f} µs"
        inlined = ",".join(op.removesuffix("FwdOp") for op in w.decomposed) or "-"
        lines.append(f"{w.label:46s} {w.host_s * 1e6:9.1f} µs {w.wall_s * 1e6:9.1f} µs {device:>11s} {ratio:>11s}  "
                     f"{floor:>11s}  {inlined:24s} {_equality(w, tolerance)}")
    if result.policies:
        lines.append("policies: " + "; ".join(f"{name} = {ops}" for name, ops in result.policies.items()))
    for v in result.verdicts():
        lines.append(f"{v['way']}: default {v['default_wall_s'] * 1e6:.1f} µs wall vs the better of custom_ops and "
                     f"all_decompositions ({v['best_other']}) {v['best_other_wall_s'] * 1e6:.1f} µs: {v['ratio']:.3f}x; "
                     f"fastest policy: {v['fastest']}")
    return "\n".join(lines)


def _equality(w: WayResult, tolerance: float) -> str:
    if w.equal_to_eager:
        return "bit for bit"
    where = "state written where eager writes" if w.state_written_where_eager_writes else \
        "STATE WRITTEN ELSEWHERE than eager"
    verdict = "within tolerance" if w.matches_eager else "NO"
    return f"{verdict} (max rel diff {w.max_rel_diff:.1e}, tolerance {tolerance:.1e}; {where})"
