"""``apply_tileops``: walk a loaded Qwen3-Next / Qwen3.5 model and route each module it can.

The module classes come from the model's own modeling module (looked up by model type), so
a model is matched by what its modules are, never by names in its printout.
"""

from __future__ import annotations

import importlib
from typing import Any

from torch import nn

from ...ops.activation import SiluAndMulFwdOp
from ._attention import AttentionPatcher
from ._forward import ForwardChecks, autocast_check, gradients_check, packed_sequences_check
from ._gdn import GDNOps, _Metadata, patch_gated_delta_net
from ._mlp import patch_mlp
from ._moe import patch_experts, patch_router, patch_sparse_moe_block, use_tileops_experts
from ._norms import patch_decoder_layer, patch_rms_norm
from ._op_pool import OpPool
from ._plain import LinearOps, patch_embedding, patch_linear
from ._report import TileOpsReport
from ._serving import recording_calls
from ._state import cache_has_linear_attention_layers

__all__ = ["SUPPORTED_MODEL_TYPES", "apply_tileops"]

#: model_type -> (modeling module, class-name prefix)
_FAMILIES = {
    "qwen3_next": ("qwen3_next", "Qwen3Next"),
    "qwen3_5": ("qwen3_5", "Qwen3_5"),
    "qwen3_5_text": ("qwen3_5", "Qwen3_5"),
    "qwen3_5_moe": ("qwen3_5_moe", "Qwen3_5Moe"),
    "qwen3_5_moe_text": ("qwen3_5_moe", "Qwen3_5Moe"),
}
SUPPORTED_MODEL_TYPES = tuple(_FAMILIES)


def _classes(model_type: str) -> dict[str, type]:
    module_name, prefix = _FAMILIES[model_type]
    modeling = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    wanted = ("GatedDeltaNet", "MLP", "Experts", "TopKRouter", "SparseMoeBlock", "Attention", "RMSNorm",
              "DecoderLayer", "RotaryEmbedding", "TextRotaryEmbedding")
    return {role: getattr(modeling, prefix + role) for role in wanted if hasattr(modeling, prefix + role)}


def _containers(model: nn.Module) -> set[str]:
    """The modules that only call their children: the model wrappers and module lists."""
    inner = getattr(model, "model", None)
    text = getattr(inner, "language_model", None)  # the vision-language models' text decoder
    return {name for name, m in model.named_modules()
            if m is model or m is inner or m is text or isinstance(m, (nn.ModuleList, nn.ModuleDict))}


def apply_tileops(model: nn.Module, *, every_module: bool = False) -> TileOpsReport:
    """Move a loaded HF Qwen3-Next / Qwen3.5 / Qwen3.5-MoE model onto TileOPs ops, in place.

    Returns the report of which module went to which op and which kernel serves it on the
    model's device; modules TileOPs cannot serve stay as they were, with the reason.
    ``every_module=True`` also routes the plain layers torch serves with vendor libraries (the
    Linear layers and the embedding lookup, ``_plain``), so that every module runs on a TileOPs
    op; off, they stay torch's (cuBLAS' matmul is the faster one at decode sizes). A call the
    patched model cannot serve is refused before any layer runs, leaving the caller's cache as it
    was (``_forward``).
    """
    config: Any = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in _FAMILIES:
        raise ValueError(f"apply_tileops supports model types {', '.join(SUPPORTED_MODEL_TYPES)}; "
                         f"this model is {model_type!r} ({type(model).__name__})")
    device = next(model.parameters()).device
    classes = _classes(model_type)
    report = TileOpsReport(type(model).__name__, str(device),
                           modules=[(n, type(m).__name__) for n, m in model.named_modules()],
                           containers=_containers(model))
    with recording_calls() as calls:
        _walk(model, classes, report, every_module)
    report.kernel_calls = calls
    use_tileops_experts(model)
    _refuse_copies(model)
    _refuse_replaced_parameters(model)
    model.register_load_state_dict_pre_hook(_refuse_assigning_loads)
    return report


def _refuse_assigning_loads(module: nn.Module, state_dict: Any, prefix: str, local_metadata: dict[str, Any],
                            *args: Any) -> None:
    """``load_state_dict(..., assign=True)`` replaces the Parameter objects, while the adapters hold the ones they
    were made with (looked up once, to keep the host path short): the logits would mix old and new weights
    (found in review). Refused before anything is loaded; in-place loads are followed."""
    if local_metadata.get("assign_to_params_buffers"):
        raise RuntimeError("load_state_dict(..., assign=True) on a model moved onto TileOPs: its adapters hold the "
                           "Parameters they were made with; load in place (assign=False), or load before "
                           "apply_tileops")


def _refuse_replaced_parameters(model: nn.Module) -> None:
    """A conversion that replaces the Parameter objects (to or from ``meta``, or any conversion under
    ``torch.__future__.set_overwrite_module_params_on_conversion(True)``) leaves the adapters on the ones
    they were made with (found in review: logits 0.5 off after ``to("meta")``, ``to_empty``, a load). The
    model's ``_apply`` raises after such a conversion, naming the way that works; the Parameters it
    compares with are the latest ``apply_tileops``' (an instance attribute: applying again refreshes them)."""
    setattr(model, "_tileops_parameters",
            [(m, name, p) for m in model.modules() for name, p in m._parameters.items() if p is not None])
    if "_apply" in vars(model):
        return  # wrapped by an earlier apply_tileops
    convert = model._apply  # the class's, bound to the model

    def _apply(fn: Any, recurse: bool = True) -> Any:
        out = convert(fn, recurse)
        held = getattr(model, "_tileops_parameters", [])
        replaced = [f"{type(m).__name__}.{name}" for m, name, p in held if m._parameters.get(name) is not p]
        if replaced:
            raise RuntimeError(
                f"this conversion replaced the Parameters of a model moved onto TileOPs ({replaced[0]} and "
                f"{len(replaced) - 1} more), while its adapters hold the ones they were made with (a move to or from "
                "'meta', or torch.__future__.set_overwrite_module_params_on_conversion(True)): convert or load the "
                "model first and apply_tileops after, or call apply_tileops(model) again now")
        return out

    setattr(model, "_apply", _apply)  # (an instance attribute: nn.Module keeps it as given)


class _PickleRefusal:
    """Placed first in the ``__dict__`` of a moved model and of each module it patched: pickling one
    (``torch.save(layer)``) meets this before any closure the apply left there (a forward, a conversion
    hook, a deep-copy refusal) and raises by name (found in review: a bare "Can't pickle local object" for
    a single layer). A shallow ``copy.copy`` copies the dict without pickling it, so it still works."""

    def __reduce__(self) -> Any:
        raise TypeError("a model moved onto TileOPs cannot be pickled or deep-copied, nor can the modules it patched "
                        "(their forwards close over this model's modules): save model.state_dict(), load it into a "
                        "fresh model and call apply_tileops on that one")


def _refuse_copies(model: nn.Module) -> None:
    """A patched module's forward closes over the modules, weights and ops it was made from: a deep copy
    would carry the original's forwards and run on the original's weights (found in review: wrong logits
    once the copy's weights change), and a pickle cannot hold them. So the model and every module the
    apply patched refuse both, naming the way that works; ``copy.deepcopy`` reads ``__deepcopy__`` from the
    instance, and the pickler walks the instance's ``__dict__`` in order."""
    def refuse(memo: dict[int, Any]) -> Any:
        raise TypeError("a model moved onto TileOPs cannot be deep-copied (its adapters close over this model's "
                        "modules): copy the model before apply_tileops, then apply it to each copy")

    for m in model.modules():
        state = vars(m)
        if m is model or "forward" in state or "_apply" in state:
            setattr(m, "__deepcopy__", refuse)  # (an instance attribute: nn.Module keeps it as given)
            if "_tileops_pickle_refusal" not in state:
                rest = dict(state)
                state.clear()
                state["_tileops_pickle_refusal"] = _PickleRefusal()
                state.update(rest)


def _walk(model: nn.Module, classes: dict[str, type], report: TileOpsReport, every_module: bool) -> None:
    """Route every module of ``model``, parents first, into ``report``. The ops read the text decoder's
    config: a vision-language model (``qwen3_5``, ``qwen3_5_moe``: the published Qwen3.5 checkpoints)
    holds it as its ``text_config`` (found in review: its own config has no ``rms_norm_eps``); its
    vision tower's modules are other classes, and stay HF's."""
    model_config: Any = model.config
    config: Any = model_config.get_text_config(decoder=True)
    pool = OpPool()  # the norms', MoE blocks' and Linears' ops, one instance for every layer (planned once a shape)
    gdn_ops, metadata, silu_and_mul, linears = GDNOps(float(config.rms_norm_eps)), _Metadata(), SiluAndMulFwdOp(), \
        LinearOps(pool)
    cache_problem = cache_has_linear_attention_layers()
    rotaries = tuple(c for role, c in classes.items() if role.endswith("RotaryEmbedding"))
    text_name, text = _text_model(model, classes)
    checks = ForwardChecks.of(text)
    patch_attention = AttentionPatcher(model, config, rotaries, checks)
    covered: set[str] = set()  # modules an ancestor no longer calls (its routes do their work): not patched
    for name, m in model.named_modules():
        if name in covered:
            continue
        if isinstance(m, classes.get("GatedDeltaNet", ())):
            routes = patch_gated_delta_net(name, m, gdn_ops, metadata, cache_problem, checks)
        elif isinstance(m, classes.get("SparseMoeBlock", ())):
            routes = patch_sparse_moe_block(name, m, every_module, pool)
        elif isinstance(m, classes.get("MLP", ())):
            routes = patch_mlp(name, m, silu_and_mul, linears, every_module)
        elif isinstance(m, classes.get("Experts", ())):
            routes = patch_experts(name, m, pool)
        elif isinstance(m, classes.get("TopKRouter", ())):
            routes = patch_router(name, m, pool)
        elif isinstance(m, classes.get("RMSNorm", ())):
            routes = patch_rms_norm(name, m, pool)
        elif isinstance(m, classes.get("DecoderLayer", ())):
            routes = patch_decoder_layer(name, m, pool)
        elif isinstance(m, classes.get("Attention", ())):
            routes = patch_attention(name, m)
        elif type(m) is nn.Linear:
            routes = patch_linear(name, m, linears, every_module)
        elif type(m) is nn.Embedding:
            routes = patch_embedding(name, m, every_module)
        else:
            continue
        report.routes += routes
        covered.update(c for r in routes for c in r.covers)
    report.routes += patch_attention.finish()
    if report.served():
        checks.register("gradients", gradients_check(text_name, text))
        checks.register("packed sequences", packed_sequences_check)
        checks.register("autocast", autocast_check)


def _text_model(model: nn.Module, classes: dict[str, type]) -> tuple[str, nn.Module]:
    """The module that runs the decoder layers (its forward builds the masks and the cache, then calls
    them in turn), and its name: where a forward's checks run before any layer does."""
    decoder_layer = classes.get("DecoderLayer", ())
    return next(((name, m) for name, m in model.named_modules() if isinstance(getattr(m, "layers", None), nn.ModuleList)
                 and any(isinstance(layer, decoder_layer) for layer in m.layers)), ("", model))
