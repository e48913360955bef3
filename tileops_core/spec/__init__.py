"""Manifest loading: YAML with line numbers, typed structure, and compilation into OpSpec objects."""

from .manifest import Manifest, ManifestError, ManifestSource, get_spec, load_manifest, load_workloads
from .nodes import OpSpec, TensorSpec, ParamSpec, WorkloadRow

__all__ = [
    "Manifest", "ManifestError", "ManifestSource", "OpSpec", "ParamSpec", "TensorSpec", "WorkloadRow",
    "get_spec", "load_manifest", "load_workloads",
]
