"""The plain layers torch already serves with vendor libraries: ``nn.Linear`` and the embedding lookup.

``apply_tileops`` leaves them on torch by default: cuBLAS' matmul beats the TileLang GEMM at
decode sizes (``backends/cuda/NOTES.md``), and on the CPU only the reference kernel, torch's
own matmul, would serve them. With ``every_module=True`` they run on TileOPs ops too, so that
every module of the model is served by one:

- ``nn.Linear``: LinearFwdOp (one instance per pair of feature sizes, its params);
- ``nn.Embedding``: the lookup is a row gather, which is MoEUnpermuteFwdOp with one index and a
  unit weight per token (``out[t] = 1 · weight[ids[t]]`` in float32, rounded once: the row
  itself, bit for bit).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ...ops.gemm import LinearFwdOp
from ...ops.moe import MoEUnpermuteFwdOp
from ._op_pool import OpPool
from ._report import Route
from ._serving import Serving, serving

__all__ = ["LinearOps", "patch_embedding", "patch_linear"]

_KEPT = "every_module=True routes it"


class LinearOps:
    """One LinearFwdOp per ``(in_features, out_features)`` (the op's params), shared by a model's Linears
    (and its MoE blocks' router logits): ``pool``'s."""

    def __init__(self, pool: OpPool) -> None:
        self._pool = pool

    def __call__(self, in_features: int, out_features: int) -> LinearFwdOp:
        return self._pool.get(LinearFwdOp, in_features=int(in_features), out_features=int(out_features))

    def serving_for(self, weight: torch.Tensor, used: bool) -> tuple[LinearFwdOp, Serving]:
        """The op for a ``[out, in]`` weight and the kernel that would serve it (planned, never run;
        ``used``: the model will call it, so ``build_kernels`` builds it)."""
        op = self(weight.shape[1], weight.shape[0])
        x = torch.empty(1, weight.shape[1], dtype=weight.dtype, device=weight.device)
        return op, serving(op, x, weight, record=used)


def kept_on_torch(answer: Serving, what: str) -> str:
    """Why a plain layer stays torch's when ``every_module`` is off (or why no kernel serves it)."""
    if not answer.ok:
        return answer.reason
    if answer.general:
        return f"torch's {what} kept: only the reference kernel ({answer.kernel}) would serve it here ({_KEPT})"
    return f"torch's {what} kept: {answer.kernel} would serve it ({_KEPT})"


def _linear_forward(op: LinearFwdOp, weight: torch.Tensor, bias: torch.Tensor | None) -> Callable[..., torch.Tensor]:
    def forward(x: torch.Tensor) -> torch.Tensor:
        return op(x, weight, bias)
    return forward


def patch_linear(name: str, m: Any, ops: LinearOps, every_module: bool) -> list[Route]:
    """An ``nn.Linear`` on LinearFwdOp with ``every_module`` where a kernel serves it; its route either way."""
    op, answer = ops.serving_for(m.weight, every_module)
    if not every_module or not answer.ok:
        return [Route(name, type(m).__name__, "matmul", "LinearFwdOp", None, kept_on_torch(answer, "matmul"))]
    m.forward = _linear_forward(op, m.weight, m.bias)
    return [Route(name, type(m).__name__, "matmul", "LinearFwdOp", answer.kernel, "")]


def _lookup_forward(op: MoEUnpermuteFwdOp, weight: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """The lookup as a gather with a unit weight a token, the unit on the device the table is on now: a
    model moved after ``apply_tileops`` (``.to("cuda")`` converts the Parameter in place) brings its table,
    and the unit follows (found in review: it stayed on the device of the apply)."""
    ones: dict[torch.device, torch.Tensor] = {}
    H = weight.shape[1]

    def forward(ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1, 1)
        one = ones.get(weight.device)
        if one is None:
            one = ones.setdefault(weight.device, torch.ones(1, 1, dtype=torch.float32, device=weight.device))
        return op(weight, flat, one.expand(flat.shape[0], 1)).view(*ids.shape, H)
    return forward


def patch_embedding(name: str, m: Any, every_module: bool) -> list[Route]:
    """An ``nn.Embedding``'s lookup as MoEUnpermuteFwdOp's gather with ``every_module`` where a kernel
    serves it; its route either way."""
    kind, piece, op_name = type(m).__name__, "lookup", "MoEUnpermuteFwdOp"
    if m.max_norm is not None:
        return [Route(name, kind, piece, None, None, "max_norm renormalises the rows it reads; no op does that")]
    op, w = MoEUnpermuteFwdOp(), m.weight
    answer = serving(op, w, torch.zeros(1, 1, dtype=torch.int64, device=w.device),
                     torch.ones(1, 1, dtype=torch.float32, device=w.device), record=every_module)
    if not every_module or not answer.ok:
        return [Route(name, kind, piece, op_name, None, kept_on_torch(answer, "embedding lookup"))]
    m.forward = _lookup_forward(op, w)
    return [Route(name, kind, piece, op_name, answer.kernel, "a row gather: one index and a unit weight per token")]
