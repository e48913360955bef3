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

__all__ = ["ForwardCall", "ForwardChecks", "gradients_check"]


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
                           embeds is not None and embeds.requires_grad)
        for check in self._checks.values():
            check(call)


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
