"""Workload rows made concrete: the one instantiator, torch-free.

The validator instantiates every row strictly (:func:`check_row`, every finding returned);
the benchmarks, the conformance tests and ``tileops explain`` leniently, one ``dtypes`` entry
at a time (:func:`instantiate_case`), then make tensors of the result
(:mod:`tileops_core.bench.workloads`). Both read the same :class:`RowInstance`, so there is
nothing to keep in step.
"""

from ..lang.tensor_meta import TensorMeta
from .instance import DTypeCase, GeneratedMeta, RowFinding, RowInstance
from .instantiate import analysis_of, check_row, instantiate_case
from .keys import RESERVED_KEYS, dtype_cases, generator_args, generator_name, row_presence

__all__ = [
    "RESERVED_KEYS", "DTypeCase", "GeneratedMeta", "RowFinding", "RowInstance", "TensorMeta", "analysis_of",
    "check_row", "dtype_cases", "generator_args", "generator_name", "instantiate_case", "row_presence",
]
