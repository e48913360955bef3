"""The refusals of a patched model's forward, made once at the text model's entry, before any layer runs.

A layer that refused in the middle of a forward left the caller's cache half-written: the
GatedDeltaNet layers before it had advanced their conv and recurrent states in place, and the
attention layers before it had appended their keys (found in review: generate's chunked prefill
with left padding longer than the first chunk was refused at the first attention layer of the
second chunk, after the linear-attention layers had run it). So every refusal that a forward's
inputs and cache decide is made here instead: the text model (the module that runs the decoder
layers) gets one forward pre-hook, which runs the checks the adapters registered for the layers
they patched; the layers do not repeat them.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from collections.abc import Hashable
from typing import Any, Callable

import torch
from torch import nn

__all__ = ["ForwardCall", "ForwardChecks", "autocast_check", "gradients_check", "packed_sequences_check"]

#: HF's keywords for sequences packed into one row (``FlashAttentionKwargs``, as ``DataCollatorWithFlattening``
#: passes them); the layers below the text model receive them through ``**kwargs``
_PACKING_KEYWORDS = ("cu_seq_lens_q", "cu_seq_lens_k")


@dataclass(frozen=True)
class ForwardCall:
    """What one forward of the text model was given, as its checks read it."""

    batch: int
    tokens: int
    device: torch.device  #: the input ids' or embeddings'
    #: as given: a 2-D padding mask, a 4-D mask, a dict of masks by layer type, or None
    attention_mask: Any
    #: the cache the layers will read and write; None: the forward makes a fresh one (no caller's state at stake)
    cache: Any
    #: whether the forward returns attention weights (the keyword, else the config's default, as HF reads it)
    output_attentions: bool
    inputs_embeds_require_grad: bool
    #: the text positions ``[B, T]`` where HF's masks read them for packed sequences: given (a 2-D
    #: ``position_ids``, or the text row of a four-row MRoPE one) to a forward with no attention mask that keeps
    #: no cache (``use_cache`` off, none passed); None otherwise
    packing_positions: torch.Tensor | None = None
    #: the packing keywords given (``_PACKING_KEYWORDS`` that are not None)
    packing_keywords: tuple[str, ...] = ()


class ForwardChecks:
    """The checks of one text model's forward, by key, run in the order their keys were first
    registered (the walk's, layer by layer); the first refusal raises before any layer runs.

    One per text model (:meth:`of`), hooked on its forward when made: a later ``apply_tileops``
    replaces the checks of the modules it patches again and leaves the others' (an apply under a
    target that serves fewer modules leaves the earlier forwards in place, and they need their checks).
    """

    def __init__(self, text_model: nn.Module) -> None:
        self._checks: dict[Hashable, Callable[[ForwardCall], None]] = {}
        signature = inspect.signature(text_model.forward)
        self._positional = [p.name for p in signature.parameters.values()
                            if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        self._config: Any = getattr(text_model, "config", None)
        text_model.register_forward_pre_hook(self._hook, with_kwargs=True)

    @classmethod
    def of(cls, text_model: nn.Module) -> ForwardChecks:
        """``text_model``'s checks: an earlier ``apply_tileops``' object, or a new one hooked on it."""
        checks = vars(text_model).get("_tileops_forward_checks")
        if checks is None:
            checks = cls(text_model)
            setattr(text_model, "_tileops_forward_checks", checks)  # (an instance attribute: nn.Module keeps it)
        return checks

    def __reduce__(self) -> Any:
        """Refused by name: the checks close over the patched model's modules, and pickling the model
        (``torch.save(model)``) reaches them first, through the text model's forward pre-hook (found in review:
        a bare "Can't pickle local object" error). A shallow ``copy.copy`` of the model does not get here."""
        raise TypeError("a model moved onto TileOPs cannot be pickled or deep-copied (its adapters close over this "
                        "model's modules): save model.state_dict(), load it into a fresh model and call "
                        "apply_tileops on that one")

    def register(self, key: Hashable, check: Callable[[ForwardCall], None]) -> None:
        """``check`` for the module(s) ``key`` names, in place of an earlier apply's."""
        self._checks[key] = check

    def _hook(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self._checks:
            return  # (an apply_tileops that served nothing)
        given = {**dict(zip(self._positional, args)), **kwargs} if args else kwargs
        ids, embeds = given.get("input_ids"), given.get("inputs_embeds")
        shaped = ids if ids is not None else embeds
        if shaped is None:
            return  # HF's forward refuses the call itself, before any layer
        cache = given.get("cache")  # (5.2x's name; 5.17's, and 5.2x's deprecated alias, below)
        call = ForwardCall(int(shaped.shape[0]), int(shaped.shape[1]), shaped.device, given.get("attention_mask"),
                           cache if cache is not None else given.get("past_key_values"),
                           bool(given.get("output_attentions", getattr(self._config, "output_attentions", False))),
                           embeds is not None and embeds.requires_grad, self._packing_positions(given, cache),
                           tuple(k for k in _PACKING_KEYWORDS if given.get(k) is not None))
        for check in self._checks.values():
            check(call)

    def _packing_positions(self, given: dict[str, Any], cache: Any) -> torch.Tensor | None:
        """The text positions where HF's mask functions look for packed sequences (``find_packed_sequence_indices``
        runs where the mask is None and the forward has no cache: one passed, or one it makes when ``use_cache``)."""
        if given.get("attention_mask") is not None or cache is not None or given.get("past_key_values") is not None:
            return None
        use_cache = given.get("use_cache")
        if use_cache if use_cache is not None else getattr(self._config, "use_cache", True):
            return None
        return _text_positions(given.get("position_ids"))


def gradients_check(name: str, text_model: nn.Module) -> Callable[[ForwardCall], None]:
    """The refusal of a call that asks for gradients, which TileOPs ops do not record (found in review: a
    plain call without ``torch.no_grad()`` met the fused add's write check, with advice that would break
    training; a trainable final norm silently got no gradient; with the norms and embeddings frozen, the
    first GatedDeltaNet layer ran into the cache before an op refused the call). With grad mode on, an input
    or a weight of the text model (``name`` in the model) that requires grad is refused; the weights are
    read per call, where grad mode is on only."""
    prefix = f"{name}." if name else ""

    def check(call: ForwardCall) -> None:
        if not torch.is_grad_enabled():
            return
        if call.inputs_embeds_require_grad:
            asking = "the input embeddings require grad"
        else:
            trainable = next((n for n, p in text_model.named_parameters() if p.requires_grad), None)
            if trainable is None:
                return
            asking = f"{prefix}{trainable} requires grad"
        raise NotImplementedError(
            f"{asking}: TileOPs ops record no gradients, and this call asks for them (grad mode on): call the model "
            "under torch.no_grad() or torch.inference_mode(), as generate() does, or train the model without "
            "apply_tileops")
    return check


def autocast_check(call: ForwardCall) -> None:
    """The refusal of a forward under ``torch.autocast`` for its device. HF's layers follow autocast's casts (a
    Linear or conv1d computes in the autocast dtype, a norm in float32); TileOPs ops run in the dtypes they are
    given, so the first op met mixed dtypes (found in review: a float32 model under CPU bfloat16 autocast was
    refused by ``CausalConv1dVarlenFwdOp`` naming its weight's dtype, after the layers before it had run)."""
    if not torch.is_autocast_enabled(call.device.type):
        return
    dtype = str(torch.get_autocast_dtype(call.device.type)).removeprefix("torch.")
    raise NotImplementedError(
        f"torch.autocast({call.device.type!r}, dtype=torch.{dtype}) is on: TileOPs ops do not follow autocast's "
        f"casts, they run in the dtypes they are given: cast the model instead (model.to(torch.{dtype})), or call "
        "it outside autocast")


def _text_positions(position_ids: Any) -> torch.Tensor | None:
    """The text positions of ``position_ids`` as HF's text models read them for the masks: a 2-D tensor as it
    is, the first row of a ``[4, B, T]`` one (Qwen3.5's text, temporal, height, width); None otherwise (a
    three-row MRoPE tensor has no text row: an image's positions are not consecutive)."""
    if not isinstance(position_ids, torch.Tensor):
        return None
    if position_ids.dim() == 2:
        return position_ids
    return position_ids[0] if position_ids.dim() == 3 and position_ids.shape[0] == 4 else None


def packed_sequences_check(call: ForwardCall) -> None:
    """The refusal of several sequences packed into one row, where HF keeps them apart: its varlen keywords,
    or positions that do not run on by one within a row in a forward with no mask and no cache, which HF's
    masks read as packed sequences (with a mask or a cache HF reads such positions as one sequence's, and so
    do the TileOPs layers). The TileOPs layers run one sequence a row, so they would attend and recur across
    the sequences' boundaries (found in review: two prompts packed with restarting positions were served with
    logits 0.29 off HF's). Positions are read on the host, which waits for the device, only in such a forward
    of several tokens, and never while compiling or capturing a CUDA graph."""
    reason = ""
    positions = call.packing_positions
    if call.packing_keywords:
        reason = f"{' and '.join(call.packing_keywords)} given"
    elif positions is not None and call.tokens > 1 and not torch.compiler.is_compiling() \
            and not (positions.is_cuda and torch.cuda.is_current_stream_capturing()):
        restarts = (positions[:, 1:] - positions[:, :-1] != 1).any(-1)
        if bool(restarts.any()):
            rows = restarts.nonzero().flatten().tolist()
            reason = f"position_ids that do not run on by one within rows {rows}, no attention mask and no cache"
    if reason:
        raise NotImplementedError(
            f"{reason}: packed sequences; the TileOPs layers run one sequence a row and would attend and recur "
            "across the packed sequences' boundaries: pass the sequences as rows of a batch (left-padded, with an "
            "attention mask), or call the model without apply_tileops")
