"""Kernel interfaces, the one registry of implementations, targets and the selection rule."""

from .contract import ContractWarning
from .interface import CallSpec, KernelEntry, KernelInterface, LaunchSignature, launch_signature
from .records import BackendInfo
from .registry import (Registration, Registry, active, backend_of, device_arch, register_arch_detector,
                       register_backend, register_kernel, use_registry)
from .select import Selection, kernel_for, select_kernel
from .targets import Target, current_target, parse_target, set_target, use_target

__all__ = [
    "BackendInfo", "CallSpec", "ContractWarning", "KernelEntry", "KernelInterface", "LaunchSignature", "Registration",
    "Registry", "Selection", "Target", "active", "backend_of", "current_target", "device_arch", "kernel_for",
    "launch_signature", "parse_target", "register_arch_detector",
    "register_backend", "register_kernel", "select_kernel", "set_target", "use_registry", "use_target",
]
