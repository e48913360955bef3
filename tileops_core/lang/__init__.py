"""The spec language: one closed expression language parsed into our own IR.

Public entry points: :func:`parse_expr`, :func:`parse_shape`, :func:`parse_dtype`,
:func:`parse_type`, :func:`compile_node`, and the unification of shapes/dtypes against
actual values (:mod:`tileops_core.lang.unify`), and :class:`TensorMeta`, what an expression
reads of a tensor. Nothing here imports torch.
"""

from .dtypes import DTypeExpr, parse_dtype
from .evaluate import Unbound, compile_node, evaluate
from .parse import PRIMITIVES, parse_expr
from .shapes import ShapePattern, affine_in, parse_shape
from .tensor_meta import TensorMeta
from .types import ParamType, parse_type

__all__ = [
    "DTypeExpr", "ParamType", "PRIMITIVES", "ShapePattern", "TensorMeta", "Unbound", "affine_in", "compile_node", "evaluate",
    "parse_dtype", "parse_expr", "parse_shape", "parse_type",
]
