"""The Op base class: checks generated from the spec, the two-phase call, the compile boundary."""

from .base import Op, current_call
from .generated import CallPlan, OpChecks

__all__ = ["CallPlan", "Op", "OpChecks", "current_call"]
