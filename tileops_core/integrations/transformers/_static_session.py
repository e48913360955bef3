"""``static_decode_session``: prefill a batch, then decode it one token a step over fixed-address state.

    apply_tileops(model)
    session = static_decode_session(model, max_batch=32, max_len=4096, capture="cuda_graph")
    logits = session.prefill(input_ids, attention_mask)       # [B, V], the prompt's last position
    for _ in range(n):
        logits = session.step(logits.argmax(-1))               # [B, V], one CUDA graph replay

The prefill is the patched model's own forward (TileOPs' prefill ops); its states are then copied
once into the session's static pools (``_static_pools``). Each step copies the next token ids into
a static buffer and runs ``_static_step`` on the pools, eagerly or as a replay of a CUDA graph
captured at the first step after a prefill of a new batch size (``capture="cuda_graph"``), or
through ``torch.compile(mode="reduce-overhead")`` (``capture="reduce_overhead"``). A step's
logits are a buffer the next step overwrites: clone them to keep them.

Positions follow HF's forward without ``position_ids``: the prompt is at ``0 .. T - 1`` in every
row (padding counted), each step one further; pass the prompt's ``position_ids`` [B, T] to
continue from others (``generate`` derives them from the mask).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks

from ...op.checks import contents_checking_default
from ._static_pools import StaticPools
from ._static_step import StaticStep
from ._compat import cache_of

__all__ = ["CAPTURE_MODES", "StaticDecodeSession", "static_decode_session"]

CAPTURE_MODES = ("eager", "cuda_graph", "reduce_overhead")


def _unpatched_mixers(model: Any) -> list[str]:
    """The token mixers ``apply_tileops`` did not route (their state is not in the layout the step reads)."""
    names = []
    for i, layer in enumerate(model.model.layers):
        mixer = getattr(layer, "linear_attn", None) or getattr(layer, "self_attn", None)
        if mixer is None or "forward" not in vars(mixer):
            names.append(f"model.layers.{i}")
    return names


class StaticDecodeSession:
    """A patched model's decode loop over static pools sized for ``max_batch`` rows of ``max_len`` tokens."""

    def __init__(self, model: Any, max_batch: int, max_len: int, capture: str = "eager") -> None:
        if capture not in CAPTURE_MODES:
            raise ValueError(f"capture must be one of {', '.join(CAPTURE_MODES)}, got {capture!r}")
        if not hasattr(getattr(model, "model", None), "layers"):
            raise ValueError(f"static_decode_session serves the text models (…ForCausalLM); {type(model).__name__} "
                             f"is not one (a vision-language model's decode positions follow its images: "
                             f"decode it with generate())")
        unpatched = _unpatched_mixers(model)
        if unpatched:
            raise ValueError(f"static_decode_session needs every token mixer on TileOPs (apply_tileops(model) first); "
                             f"not routed: {', '.join(unpatched)}")
        device = next(model.parameters()).device
        if capture != "eager" and device.type != "cuda":
            raise ValueError(f"capture={capture!r} needs a CUDA model; this one is on {device}")
        if capture != "eager" and contents_checking_default():
            raise ValueError("TILEOPS_CHECK_CONTENTS=1 makes ops read tensor contents on the host, which a captured "
                             "step cannot do; unset it for a captured session")
        self.model, self.capture = model, capture
        self.pools = StaticPools(model, max_batch, max_len)
        self._step = StaticStep(model, self.pools)
        self._batch = 0
        self._tokens = 0  # tokens a row holds, padding counted: a bound on every row's cache length
        self._graph: Any = None
        self._graph_batch = 0
        self._graph_logits: torch.Tensor | None = None
        self._compiled: Callable[[int], torch.Tensor] | None = None

    @property
    def batch(self) -> int:
        return self._batch

    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Run the prompt (left padding allowed) through the model; its states go to the pools.
        Returns the logits at each row's last position, ``[B, V]``."""
        if input_ids.dim() != 2:
            raise ValueError(f"prefill takes input_ids [B, T], not {list(input_ids.shape)}")
        B, T = input_ids.shape
        for name, given in (("attention_mask", attention_mask), ("position_ids", position_ids)):
            # (found in review: a mask a token short was refused as "not causal with left padding"; positions a
            # token short met a bare expand error)
            if given is not None and given.dim() == 2 and tuple(given.shape) != (B, T):
                raise ValueError(f"prefill: {name} {list(given.shape)} is not the prompt's [B, T] = [{B}, {T}]")
        p = self.pools
        if not 0 < B <= p.max_batch or not 0 < T < p.max_len:  # (an empty prompt wiped the batch: found in review)
            raise ValueError(f"a prompt of {B} rows x {T} tokens does not fit the session's {p.max_batch} rows x "
                             f"{p.max_len} tokens (one left for the first step)")
        _refuse_hooks(self.model)
        if position_ids is not None and position_ids.dim() != 2:
            raise NotImplementedError("prefill takes position_ids [B, T] (one row); multimodal position rows are not "
                                      "continued by the static step")
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True)
        last = out.logits[:, -1]  # (taken before the pools are written: nothing after this can fail on the prompt)
        cache = cache_of(out)
        for i, g in p.gdn.items():
            g.conv[:B].copy_(cache.layers[i].conv_states[0])
            g.ssm[:B].copy_(cache.layers[i].recurrent_states[0])
        real = attention_mask.sum(-1) if attention_mask is not None else torch.full((B,), T, device=input_ids.device)
        for i, kv in p.kv.items():
            # The attention adapter keeps each row's real tokens left-aligned behind HF's [B, NKV, S, D] views.
            layer = cache.layers[i]
            kv.keys[:B].zero_()
            kv.values[:B].zero_()
            kv.keys[:B, :T].copy_(layer.keys.transpose(1, 2))
            kv.values[:B, :T].copy_(layer.values.transpose(1, 2))
            kv.lengths[:B].copy_(real)
        if position_ids is None:
            p.positions[:B].fill_(T)
        else:
            p.positions[:B].copy_(position_ids[:, -1] + 1)
        self._batch, self._tokens = B, T
        self._step.start(B, static=self.capture == "reduce_overhead")
        return last

    @torch.no_grad()
    def step(self, next_ids: torch.Tensor) -> torch.Tensor:
        """One token per row (``[B]`` or ``[B, 1]``) -> logits ``[B, V]`` (overwritten by the next step)."""
        B = self._batch
        if B == 0:
            raise RuntimeError("step() before prefill(): the session holds no batch")
        if self._tokens >= self.pools.max_len:
            raise ValueError(f"the rows hold {self._tokens} tokens, the session's max_len")
        if next_ids.shape not in ((B,), (B, 1)) or next_ids.dtype.is_floating_point or next_ids.is_complex():
            # (found in review: a bare reshape error for another batch size; float ids were truncated silently)
            raise ValueError(f"step() takes one token id a row of the prefilled batch, an integer tensor [{B}] or "
                             f"[{B}, 1], not {next_ids.dtype} {list(next_ids.shape)}: prefill() the new batch first "
                             "to change its size")
        self.pools.ids[:B].copy_(next_ids.reshape(B))
        if self.capture == "cuda_graph":
            if self._graph is None or self._graph_batch != B:
                self._capture(B)
            self._graph.replay()
            assert self._graph_logits is not None
            logits = self._graph_logits
        elif self.capture == "reduce_overhead":
            logits = self._compiled_step()(B)
        else:
            logits = self._step(B)
        self._tokens += 1  # (counted once the step ran: a failed capture or compile leaves the count as it was)
        return logits

    @property
    def step_function(self) -> Callable[[int], torch.Tensor]:
        """The step itself, ``batch -> logits``, reading ``pools.ids`` and advancing the pools: what
        ``capture`` records, for a caller's own capture or compile (it traces as one graph)."""
        return self._step

    def addresses(self) -> list[int]:
        """The static buffers' addresses (constant for the session's life)."""
        return self.pools.addresses()

    def _warm_up(self, B: int, run: Callable[[int], Any], check_syncs: bool = False) -> None:
        """Run the step on a side stream (lazy inits, kernel builds, allocator pools) and put the
        state back as it was: the next step starts from the prefill's state. ``check_syncs``: the
        second run raises at the first host synchronisation (which capture could not hold)."""
        saved = self.pools.snapshot()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(side):
                run(B)  # the first call plans and builds kernels, which may synchronise
                previous = torch.cuda.get_sync_debug_mode()
                if check_syncs:
                    torch.cuda.set_sync_debug_mode("error")
                try:
                    run(B)
                except RuntimeError as exc:
                    if not check_syncs:
                        raise
                    raise RuntimeError(
                        "the decode step synchronises with the host, which a CUDA graph cannot hold (the traceback "
                        "shows where; a reference kernel serving the conv1d update, RGDR, attention decode or the MoE "
                        "permute / grouped experts reads its metadata on the host: see apply_tileops' report for the "
                        f"kernels here): {exc}") from exc
                finally:
                    torch.cuda.set_sync_debug_mode(previous)
        finally:  # a failed warm-up leaves the state as the prefill left it too (found in review: two steps ahead)
            torch.cuda.current_stream().wait_stream(side)
            self.pools.restore(saved)

    def _capture(self, B: int) -> None:
        self._warm_up(B, self._step, check_syncs=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._graph_logits = self._step(B)
        self._graph, self._graph_batch = graph, B

    def _compiled_step(self) -> Callable[[int], torch.Tensor]:
        if self._compiled is None:
            for t in self.pools.tensors():
                torch._dynamo.mark_static_address(t)
            # One graph per batch size is inherent (the step is specialised on it): a session serving more
            # sizes than dynamo's default recompile limit (8) would hit it with fullgraph=True (found in
            # review), so the limit is raised to what this session can ask for.
            limit = torch._dynamo.config.recompile_limit
            torch._dynamo.config.recompile_limit = max(limit, self.pools.max_batch + 8)
            compiled = torch.compile(self._step, mode="reduce-overhead", fullgraph=True)

            def run(B: int) -> torch.Tensor:
                torch.compiler.cudagraph_mark_step_begin()
                return compiled(B)
            self._warm_up(self._batch, run)
            self._compiled = run
        return self._compiled


def _refuse_hooks(model: Any) -> None:
    """The step calls the decoder layers' pieces and the token mixers' forwards itself (a CUDA graph
    holds no Python hook): a forward hook on one of them would be skipped silently (found in review:
    logits 0.01 off a hooked generate()), so it is refused, as global forward hooks are; so is one on a mixer's
    out projection, whose output the step writes the residual add into."""
    hooked = [f"model.layers.{i}{part}" for i, layer in enumerate(model.model.layers)
              for part, m in (("", layer), (".linear_attn", getattr(layer, "linear_attn", None)),
                              (".self_attn", getattr(layer, "self_attn", None)))
              if m is not None and (m._forward_hooks or m._forward_pre_hooks)]
    if hooked or _global_forward_hooks or _global_forward_pre_hooks:
        raise ValueError(f"static_decode_session runs the decoder layers' pieces itself, so forward hooks on "
                         f"{', '.join(hooked) or 'every module (global hooks)'} would not run: remove them, or "
                         "decode with generate()")
    # The step adds the residual into the mixer's output in place, as the patched layer does where no hook holds
    # it; that output is the out projection's (found in review: an activation kept on o_proj was 0.06 off HF's)
    projections = [f"model.layers.{i}.{mixer}.{proj}" for i, layer in enumerate(model.model.layers)
                   for mixer, proj in (("linear_attn", "out_proj"), ("self_attn", "o_proj"))
                   if getattr(getattr(layer, mixer, None), proj, None) is not None
                   and getattr(getattr(layer, mixer), proj)._forward_hooks]
    if projections:
        raise ValueError(f"static_decode_session's step adds the residual into the token mixers' output in place, "
                         f"which is the output of {', '.join(projections)}: a forward hook there would see (and keep) "
                         "the sum, not the projection's output: remove them, or decode with generate()")


def static_decode_session(model: Any, max_batch: int, max_len: int, capture: str = "eager") -> StaticDecodeSession:
    """A :class:`StaticDecodeSession` over ``model`` (already through ``apply_tileops``)."""
    return StaticDecodeSession(model, max_batch, max_len, capture)
