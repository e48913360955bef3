"""The full-attention adapter: a Qwen3-Next / Qwen3.5 ``*Attention`` layer on TileOPs ops.

HF's layer normalises q and k, rotates them from cos/sin tables, appends k/v to its cache
(``torch.cat`` every step, ``[B, NKV, S, D]``), calls the attention function registered for the
config's implementation with a 4-D mask, then gates the output. The attention function alone
(``AttentionInterface``) would get the cache's whole contents after HF has written them, in HF's
layout, so it could not use ops that own the cache write. So, like the GatedDeltaNet adapter, the
layer's ``forward`` is replaced on the instance, keeping the module's projections:

    q_proj -> query, gate (strided views, no copy); k_proj, v_proj
    -> QKNormRopeFwdOp (q_norm, k_norm, rotary from the integer positions)
    -> prefill: AttentionPrefillFwdOp over the rows' real tokens packed; decode: AttentionDecodeFwdOp
    -> SigmoidGateMulFwdOp -> o_proj

Positions: the model's rotary module is given a forward pre-hook that records the integer
positions it is called with (``[B, T]``, or ``[3, B, T]`` for Qwen3.5's MRoPE), which every
attention layer of that forward reads; HF's cos/sin are not used, and once every attention layer
is patched the rotary module no longer computes them (its forward returns None).

The mask: HF's, whose form depends on the attention implementation, is not read. The forward's
checks (``_forward``; :meth:`AttentionPatcher.check_forward`) read the mask the model was given,
before any layer runs, and record each row's count of real tokens for a cache's first call, which
every attention layer of that forward reads (:class:`CurrentForward`).

The static decode step (``_static_step``) shares :class:`AttentionLayer`, the two ends of the
forward, and writes and reads its own fixed-address cache through AttentionDecodeFwdOp.

The cache: each layer keeps a contiguous KV cache in the ops' layout (``[B, capacity, NKV, D]``,
row b = batch row b, grown by doubling) in its HF cache layer, with each row's real tokens
left-aligned (left padding is dropped at the prefill) and their count. The layer's ``keys`` /
``values`` are views of it shaped as HF's (``[B, NKV, S, D]``), so ``get_seq_length`` and the masks
HF builds stay right; only the patched layer reads the contents. Tokens after the prefill run as
decode steps, one per token (a continued prompt of T tokens is T steps). Padding after the
prompt (or left padding longer than generate's first prefill chunk), and a cache rearranged by HF
(beam search, cropping), are refused with the reason, before any layer of that forward runs.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, Callable

import torch

from ...ops.attention import AttentionDecodeFwdOp, AttentionPrefillFwdOp, QKNormRopeFwdOp, SigmoidGateMulFwdOp
from ._forward import ForwardCall, ForwardChecks
from ._report import Route
from ._serving import serving

__all__ = ["AttentionLayer", "AttentionOps", "AttentionPatcher", "CurrentForward", "patch_attention"]


class CurrentForward:
    """What the attention layers of the model's current forward read besides their arguments, recorded
    before any layer runs: the integer positions the model's rotary module received (its forward
    pre-hook), and, in a cache's first call, each row's count of real tokens
    (:meth:`AttentionPatcher.check_forward`, from the mask the model was given).

    Kept per thread: two threads running one model each read their own forward's (found in review:
    one model-wide slot gave a thread the other's rotary positions)."""

    def __init__(self) -> None:
        self._thread = threading.local()

    @property
    def positions(self) -> torch.Tensor | None:
        return getattr(self._thread, "positions", None)

    def record_positions(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._thread.positions = args[1] if len(args) > 1 else kwargs["position_ids"]

    def record_real_tokens(self, n: torch.Tensor | None) -> None:
        """``[B]`` for a cache's first call; None for a later one (its layers decode and read none)."""
        self._thread.real_tokens = n

    def real_tokens(self) -> torch.Tensor:
        n: torch.Tensor | None = getattr(self._thread, "real_tokens", None)
        if n is None:
            raise RuntimeError("the attention adapter's prefill ran without the check of the model's forward, which "
                               "counts each row's real tokens (call the model, not its layers)")
        return n

    def flat(self, batch: int, tokens: int, rows: int) -> torch.Tensor:
        """``[B · T]`` (NeoX) or ``[3, B · T]`` (MRoPE) positions of this forward."""
        p = self.positions
        if p is None:
            raise RuntimeError("the attention adapter ran before the model's rotary module recorded positions")
        if rows == 3:
            return p.expand(3, batch, tokens).reshape(3, batch * tokens)
        return p.expand(batch, tokens).reshape(batch * tokens)


class AttentionOps:
    """The op instances of one model's attention layers (plans are per shape).

    ``mrope_section`` is the rotary module's own (Qwen3.5's text rotary has one and rotates
    by three position rows, interleaved); None: NeoX from one row. ``options`` go to every op
    (the static decode step makes its own with ``check_contents=False``).
    """

    def __init__(self, config: Any, head_dim: int, mrope_section: Any = None, **options: Any) -> None:
        rope = dict(getattr(config, "rope_parameters", None) or {})
        self.rotary_dim = int(head_dim * float(rope.get("partial_rotary_factor", 1.0)))
        mrope = mrope_section is not None
        self.rows = 3 if mrope else 1
        self.norm_rope = QKNormRopeFwdOp(rotary_dim=self.rotary_dim, theta=float(rope.get("rope_theta", 10000.0)),
                                         eps=float(config.rms_norm_eps),
                                         rope_style="mrope_interleaved" if mrope else "neox",
                                         mrope_section=tuple(mrope_section) if mrope else (11, 11, 10), **options)
        self.rope_type = rope.get("rope_type", "default")
        self.prefill = AttentionPrefillFwdOp(scale=head_dim ** -0.5, **options)
        self.decode = AttentionDecodeFwdOp(scale=head_dim ** -0.5, **options)
        self.gate = SigmoidGateMulFwdOp(**options)


class AttentionLayer:
    """One attention layer's modules and weights, looked up once (nn.Module attribute lookups cost
    per call), and the two ends of its forward that the dynamic and the static decode paths share:
    the projections through the q/k norm and rotary, and the output gate through ``o_proj``."""

    def __init__(self, m: Any, ops: AttentionOps) -> None:
        self.ops = ops
        self.nq, self.nkv, self.d = m.config.num_attention_heads, m.config.num_key_value_heads, m.head_dim
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = m.q_proj, m.k_proj, m.v_proj, m.o_proj
        self.q_weight, self.k_weight = m.q_norm.weight, m.k_norm.weight
        self.layer_idx = m.layer_idx

    def project(self, hidden_states: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``[B, T, hidden]`` -> ``(query, key, value, gate)``, ``[B · T, heads, D]`` each: q_proj's
        query and gate halves as strided views (no copy), q and k normalised and rotated by
        ``positions`` (``[B · T]``, or ``[3, B · T]`` for MRoPE)."""
        B, T, _ = hidden_states.shape
        nq, nkv, d = self.nq, self.nkv, self.d
        qg = self.q_proj(hidden_states).view(B * T, nq, 2 * d)
        query, gate = qg[..., :d], qg[..., d:]
        key = self.k_proj(hidden_states).view(B * T, nkv, d)
        value = self.v_proj(hidden_states).view(B * T, nkv, d)
        query, key = self.ops.norm_rope(query, key, self.q_weight, self.k_weight, positions)
        return query, key, value, gate

    def output(self, out: torch.Tensor, gate: torch.Tensor, B: int, T: int) -> torch.Tensor:
        """The attention output ``[B · T, NQ, D]`` gated by ``sigmoid(gate)``, through ``o_proj``."""
        return self.o_proj(self.ops.gate(out, gate).reshape(B, T, self.nq * self.d))


class _KVStore:
    """One layer's KV cache in the ops' layout, each batch row's count of real tokens, and the
    largest count (kept on the host, so a decode step reads no tensor to size the cache)."""

    def __init__(self, batch: int, capacity: int, nkv: int, d: int, dtype: torch.dtype, device: torch.device) -> None:
        self.keys = torch.zeros(batch, capacity, nkv, d, dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self.lengths = torch.zeros(batch, dtype=torch.int32, device=device)
        self.longest = 0

    def reserve(self, capacity: int) -> None:
        """Room for ``capacity`` tokens a row, doubling (a copy only when it grows)."""
        have = self.keys.shape[1]
        if capacity <= have:
            return
        grown = max(capacity, 2 * have)
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = torch.zeros(old.shape[0], grown, *old.shape[2:], dtype=old.dtype, device=old.device)
            new[:, :have] = old
            setattr(self, name, new)


#: Cache layers whose own update() the adapter would have to follow, and does not: a static layer is
#: preallocated with full-length masks, a quantized one counts tokens only in its update() (found in
#: review: every decode step ran as a fresh one-token prefill), a sliding or indexed one drops keys.
_UNFOLLOWED_LAYER_KINDS = ("Static", "Quantized", "Sliding", "Indexed")


def _unfollowed_layer_kind(layer: Any) -> str | None:
    return next((kind for cls in type(layer).__mro__ for kind in _UNFOLLOWED_LAYER_KINDS if kind in cls.__name__),
                None)


def _cache_state(layer: Any) -> tuple[_KVStore | None, int]:
    """A cache layer's store (None until the adapter made one) and the tokens it holds, padding
    included, as HF counts them; a store that holds none is made again."""
    store = getattr(layer, "_tileops_kv", None)
    seen = layer.get_seq_length() if getattr(layer, "is_initialized", False) else 0
    return (store if seen else None), seen


def _held(cache: Any, layer_idx: int, batch: int) -> tuple[_KVStore | None, int]:
    """:func:`_cache_state` of a cache layer the adapter can write for ``batch`` rows; the cache layers
    it cannot follow are refused (before any layer runs: :meth:`AttentionPatcher.check_forward`)."""
    layer = cache.layers[layer_idx]
    store, seen = _cache_state(layer)
    if store is None:
        kind = _unfollowed_layer_kind(layer)
        if kind is not None:
            raise NotImplementedError(
                f"layer {layer_idx}: a {kind} cache layer ({type(layer).__name__}); the TileOPs attention adapter keeps "
                "its own left-aligned cache in a dynamic one: use the default dynamic cache, or static_decode_session "
                "for fixed shapes")
        if seen:
            raise ValueError(f"layer {layer_idx}: the cache holds {seen} tokens written by an unpatched forward")
    elif layer.keys is not getattr(layer, "_tileops_keys_view", None):
        raise NotImplementedError(
            f"layer {layer_idx}: HF rearranged the attention cache (beam search or cropping), which the TileOPs "
            "adapter's left-aligned cache cannot follow; call this model without apply_tileops for that")
    elif store.lengths.numel() != batch:
        raise ValueError(f"layer {layer_idx}: the cache holds {store.lengths.numel()} rows, and this call {batch}: a "
                         "cache continues the batch it was filled with")
    return store, seen


def _store_for(cache: Any, layer_idx: int, batch: int, tokens: int, nkv: int, d: int, like: torch.Tensor) -> tuple[
        _KVStore, int]:
    """The layer's store and the tokens (padding included, as HF counts them) already in it; made
    (and shown to HF as the layer's) on the cache's first call."""
    if cache is None:
        return _KVStore(batch, tokens, nkv, d, like.dtype, like.device), 0
    layer = cache.layers[layer_idx]
    store, seen = _cache_state(layer)
    if store is None:
        store = _KVStore(batch, tokens, nkv, d, like.dtype, like.device)
        layer._tileops_kv = store
        layer.is_initialized, layer.device = True, like.device
    return store, seen


def _publish(cache: Any, layer_idx: int, store: _KVStore, seen: int) -> None:
    """Show HF the cache as ``[B, NKV, S, D]`` views of the store (``S`` counts padding, as HF's does).

    HF's count can exceed what the store holds for the ops (its longest row's real tokens): where every
    row was left-padded, no row is as long as the prompt, so the store grows to ``S`` first (a slice
    past its end would be shorter than ``S`` and HF's next mask would no longer match)."""
    if cache is None:
        return
    store.reserve(seen)
    layer = cache.layers[layer_idx]
    layer.keys = store.keys[:, :seen].permute(0, 2, 1, 3)
    layer.values = store.values[:, :seen].permute(0, 2, 1, 3)
    layer._tileops_keys_view = layer.keys


def _last_query_row(attention_mask: Any, kv_length: int, device: torch.device) -> torch.Tensor | None:
    """The keys the forward's last query may attend to, ``[B, S]`` bool, from the mask the model was
    given, as HF's mask for the full-attention layers has them: a 4-D mask's last row (bool, or additive
    with 0 where allowed), or a 2-D padding mask's first ``kv_length`` columns (the cache's tokens and
    this call's; columns it lacks count as padding, as HF pads them). A dict holds one mask per layer
    type. None: no mask (no padding anywhere)."""
    mask = attention_mask.get("full_attention") if isinstance(attention_mask, dict) else attention_mask
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor) or mask.dim() not in (2, 4):
        form = f"{mask.dim()}-D tensor" if isinstance(mask, torch.Tensor) else f"type {type(mask).__name__}"
        raise NotImplementedError(f"an attention mask of {form}: the TileOPs attention adapter reads 2-D padding "
                                  "masks and 4-D tensor masks")
    if mask.dim() == 4:
        last = mask[:, 0, -1, :]
        return (last if last.dtype == torch.bool else last == 0).to(device)
    row = mask[:, :kv_length].to(device=device, dtype=torch.bool)
    return torch.nn.functional.pad(row, (0, kv_length - row.shape[1]))


def _real_tokens(row: torch.Tensor | None, batch: int, tokens: int, device: torch.device) -> torch.Tensor:
    """Each row's count of real tokens in a cache's first call: the keys its last query may attend to
    (``row``, :func:`_last_query_row`). They must be the row's last tokens (left padding); anything
    else is refused."""
    if row is None:
        return torch.full((batch,), tokens, dtype=torch.int32, device=device)
    n = row.sum(-1, dtype=torch.int32)
    suffix = torch.arange(tokens, device=device).unsqueeze(0) >= (tokens - n).unsqueeze(1)
    if not torch.equal(row, suffix):
        raise NotImplementedError("the attention mask is not causal with left padding; the TileOPs attention "
                                  "adapter packs each row's real tokens as its last ones")
    return n


def _prefill(ops: AttentionOps, store: _KVStore, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
             n: torch.Tensor) -> torch.Tensor:
    """Each row's real (last ``n[b]``) tokens packed, attended causally and written to an empty cache;
    padding positions get zeros (no real token attends to them)."""
    B, dev = n.numel(), key.device
    T = query.shape[0] // B
    counts = n.tolist()
    cu = torch.cat([torch.zeros(1, dtype=torch.int32, device=dev), torch.cumsum(n, 0, dtype=torch.int32)])
    store.reserve(T)
    if counts.count(T) == B:  # no padding: the rows are the packed prompts already
        out = ops.prefill(query, key, value, store.keys, store.values, cu)
    else:
        take = (torch.arange(B, device=dev) * T).repeat_interleave(n) + torch.cat(
            [torch.arange(T - k, T, device=dev) for k in counts])
        packed = ops.prefill(query[take], key[take], value[take], store.keys, store.values, cu)
        out = torch.zeros_like(query).index_copy_(0, take, packed)
    store.lengths.copy_(n)
    store.longest = max(counts, default=0)
    return out


def _check_new_tokens_real(row: torch.Tensor | None, lengths: torch.Tensor, tokens: int) -> None:
    """After a cache's first call every token of every row is real: the last query sees its row's
    count plus this call's tokens (``row``, :func:`_last_query_row`; None: no padding anywhere)."""
    if row is None:
        return
    padded = row.sum(-1, dtype=lengths.dtype).sub_(tokens) != lengths
    if bool(padded.any()):
        raise NotImplementedError(
            f"the mask pads tokens of a call after the first one (rows {padded.nonzero().flatten().tolist()}: padding "
            "after the prompt, or left padding longer than the first prefill chunk); the TileOPs attention adapter "
            "drops padding only in the first call of a cache: generate with a prefill_chunk_size at least as long as "
            "the longest left padding, or without one")


def _decode_steps(ops: AttentionOps, store: _KVStore, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  B: int, T: int) -> torch.Tensor:
    """``T`` new tokens a row after cached ones: one decode step per token (a continued prompt is
    ``T`` steps; generation's ``T == 1`` is one). The counts advance with each step the op has taken, so
    a step that raises leaves the host's longest count equal to the rows' (found in review: it was raised
    by ``T`` before the first step ran)."""
    store.reserve(store.longest + T)
    if T == 1:  # generation: one step, its output as the op returns it
        out = ops.decode(query, key, value, store.keys, store.values, store.lengths)
        store.lengths += 1
        store.longest += 1
        return out
    out = torch.empty_like(query).view(B, T, *query.shape[1:])
    q, k, v = (x.view(B, T, *x.shape[1:]) for x in (query, key, value))
    for t in range(T):
        out[:, t] = ops.decode(q[:, t], k[:, t], v[:, t], store.keys, store.values, store.lengths)
        store.lengths += 1
        store.longest += 1
    return out.view_as(query)


def _attention_forward(m: Any, ops: AttentionOps, current: CurrentForward) -> Callable[..., tuple[torch.Tensor, None]]:
    """The layer's forward. HF's mask is not read: its form depends on the attention implementation, and
    the forward's check (:meth:`AttentionPatcher.check_forward`) has read the mask the model was given,
    refused what this forward cannot serve, and counted the real tokens of a cache's first call."""
    layer = AttentionLayer(m, ops)
    nkv, d, layer_idx = layer.nkv, layer.d, layer.layer_idx

    def forward(hidden_states: torch.Tensor, position_embeddings: Any = None, attention_mask: Any = None,
                cache: Any = None, past_key_values: Any = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
        cache = cache if cache is not None else past_key_values
        B, T, _ = hidden_states.shape
        query, key, value, gate = layer.project(hidden_states, current.flat(B, T, ops.rows))
        store, seen = _store_for(cache, layer_idx, B, T, nkv, d, key)
        if seen == 0:
            out = _prefill(ops, store, query, key, value, current.real_tokens())
        else:
            out = _decode_steps(ops, store, query, key, value, B, T)
        _publish(cache, layer_idx, store, seen + T)
        return layer.output(out, gate, B, T), None

    return forward


def _example_calls(m: Any, ops: AttentionOps) -> list[tuple[str, Any, tuple[Any, ...]]]:
    """One small call of each op with the layer's sizes, dtype and device (planned, never run)."""
    nq, nkv, d = m.config.num_attention_heads, m.config.num_key_value_heads, m.head_dim
    w = m.q_norm.weight
    dt, dev = w.dtype, w.device
    q, k = torch.empty(1, nq, d, dtype=dt, device=dev), torch.empty(1, nkv, d, dtype=dt, device=dev)
    cache = torch.empty(1, 1, nkv, d, dtype=dt, device=dev)
    pos = torch.zeros((3, 1) if ops.rows == 3 else (1,), dtype=torch.int64, device=dev)
    one, zero = torch.tensor([0, 1], dtype=torch.int32, device=dev), torch.zeros(1, dtype=torch.int32, device=dev)
    return [
        ("q/k norm + rotary", ops.norm_rope, (q, k, w, m.k_norm.weight, pos)),
        ("attention prefill", ops.prefill, (q, k, k, cache, cache, one)),
        ("attention decode", ops.decode, (q, k, k, cache, cache, zero)),
        ("output gate", ops.gate, (q, q)),
    ]


def patch_attention(name: str, m: Any, ops: AttentionOps, current: CurrentForward) -> list[Route]:
    """Replace ``m.forward`` when every op of the layer has a kernel here; the routes either way."""
    kind = type(m).__name__
    if ops.rope_type != "default":
        return [Route(name, kind, "layer", None, None, f"rope_type {ops.rope_type!r}: the op rotates by "
                      "theta^(-2i / rotary_dim) only")]
    routes = []
    for piece, op, args in _example_calls(m, ops):
        answer = serving(op, *args)
        routes.append(Route(name, kind, piece, type(op).__name__, answer.kernel, answer.reason))
    if not all(r.served for r in routes):  # the cache's layout is all or nothing: leave the whole layer
        return [Route(name, kind, r.piece, r.op, None, r.reason or "another piece of the layer has no kernel here")
                for r in routes]
    m.forward = _attention_forward(m, ops, current)
    norms = (f"{name}.q_norm", f"{name}.k_norm")  # their work is the op's: their own forwards are no longer called
    return [replace(r, reason="q_norm and k_norm fused in", covers=norms) if r.op == "QKNormRopeFwdOp" else r
            for r in routes]


def _no_tables(x: Any, position_ids: Any = None) -> None:
    """A rotary module's forward once every attention layer forms its own cos/sin: nothing to compute
    (its forward pre-hook still records the positions)."""
    return None


class AttentionPatcher:
    """Patches a model's attention layers: one set of ops for all of them; once the first layer is
    patched, the positions recorded from the model's rotary module(s), and :meth:`check_forward`
    registered among the model's forward checks; :meth:`finish` routes the rotary module itself
    after the walk."""

    def __init__(self, model: Any, config: Any, rotary_classes: tuple[type, ...], checks: ForwardChecks) -> None:
        self._config = config
        self._rotaries: list[tuple[str, Any]] = [(n, x) for n, x in model.named_modules()
                                                 if rotary_classes and isinstance(x, rotary_classes)]
        self._checks = checks
        self._ops: AttentionOps | None = None
        self._current = CurrentForward()
        self._layers: list[int] = []  # the patched layers' indices
        self._attention_config: Any = None  # the layers' config (set_attn_implementation changes it in place)
        self._seen = 0
        self._rope_routes: list[Route] = []

    def __call__(self, name: str, m: Any) -> list[Route]:
        self._seen += 1
        if len(self._rotaries) != 1:
            return [Route(name, type(m).__name__, "layer", None, None,
                          f"{len(self._rotaries)} text rotary modules in the model, not one to record positions from")]
        if self._ops is None:
            self._ops = AttentionOps(self._config, m.head_dim, getattr(self._rotaries[0][1], "mrope_section", None))
        routes = patch_attention(name, m, self._ops, self._current)
        if all(r.served for r in routes):
            if not self._layers:
                self._rotaries[0][1].register_forward_pre_hook(self._current.record_positions, with_kwargs=True)
                self._checks.register("attention layers", self.check_forward)
                self._attention_config = m.config
            self._layers.append(m.layer_idx)
            self._rope_routes += [r for r in routes if r.op == "QKNormRopeFwdOp"]
        return routes

    def check_forward(self, call: ForwardCall) -> None:
        """The patched layers' refusals of one forward, made before any layer runs (``_forward``): attention
        weights asked of the eager implementation, cache layers the adapter cannot follow, and a mask it
        cannot serve; in a cache's first call, records each row's count of real tokens for the layers."""
        if call.output_attentions and self._attention_config._attn_implementation == "eager":
            # (HF's eager attention returns the weights, where ours would be collected as none: found in review)
            raise NotImplementedError("output_attentions: the TileOPs attention ops form no attention weights: call "
                                      "the model without apply_tileops for them")
        held = [_held(call.cache, i, call.batch) for i in self._layers] if call.cache is not None else []
        store, seen = held[0] if held else (None, 0)  # (the layers agree: each forward writes all of them)
        row = _last_query_row(call.attention_mask, seen + call.tokens, call.device)
        if store is None:
            self._current.record_real_tokens(_real_tokens(row, call.batch, call.tokens, call.device))
        else:
            _check_new_tokens_real(row, store.lengths, call.tokens)
            self._current.record_real_tokens(None)

    def finish(self) -> list[Route]:
        """The rotary module's route, once every attention layer was seen. When all of them run on
        TileOPs nothing reads its cos/sin tables, so it only records positions (its forward returns
        None); otherwise it stays HF's, since the layers left on HF's code read the tables."""
        if len(self._rotaries) != 1 or not self._seen:
            return []
        name, rotary = self._rotaries[0]
        kind = type(rotary).__name__
        if len(self._rope_routes) < self._seen:
            return [Route(name, kind, "cos/sin", None, None, "attention layers left on HF's code read its tables")]
        rotary.forward = _no_tables
        return [Route(name, kind, "cos/sin", "QKNormRopeFwdOp", self._rope_routes[0].kernel,
                      "each attention layer's op forms them from the positions this module records")]
