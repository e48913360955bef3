"""Kernel interfaces, the registry of implementations, targets and the selection rule."""

from .interface import CallSpec, KernelEntry, KernelInterface
from .registry import BackendInfo, device_arch, register_arch_detector, register_backend, register_kernel
from .select import Selection, kernel_for, select_kernel
from .targets import Target, current_target, parse_target, set_target, use_target

__all__ = [
    "BackendInfo", "CallSpec", "KernelEntry", "KernelInterface", "Selection", "Target", "current_target",
    "device_arch", "kernel_for", "parse_target", "register_arch_detector", "register_backend", "register_kernel",
    "select_kernel", "set_target", "use_target",
]
