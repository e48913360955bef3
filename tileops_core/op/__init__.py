"""The Op base class, its definition (spec, checks, boundary, planning), and the call plan."""

from .base import Op, current_call
from .checks import OpChecks
from .definition import OpDef
from .plan import CallPlan

__all__ = ["CallPlan", "Op", "OpChecks", "OpDef", "current_call"]
