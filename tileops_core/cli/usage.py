"""What the bench, calibrate, ops and docs commands share: turning what a user typed into
objects, and a usage error into one line and exit code 2.

A name that does not exist (an op, a workload label, a device, a baseline) is a usage
error, not a failure of the thing asked for: the command prints ``tileops CMD: error:
...`` on stderr and returns 2, the code argparse uses for a bad flag.
"""

from __future__ import annotations

import sys

import torch

from ..bench.catalog import UnknownName, UsageError
from .main import EXIT_USAGE

__all__ = ["UnknownName", "UsageError", "usage_error", "parse_device"]


def usage_error(command: str, message: str) -> int:
    """Print one line on stderr and return the usage exit code."""
    print(f"tileops {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def parse_device(text: str | None) -> torch.device:
    """``cpu``, ``cuda``, ``cuda:1``...: a device that exists in this process (default: cpu)."""
    if not text:
        return torch.device("cpu")
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise UnknownName(f"{text!r} is not a device (write cpu, cuda or cuda:N)") from None
    if device.type == "cpu":
        return device
    if device.type == "meta":
        raise UsageError("the meta device holds no data and cannot be timed; choose cpu or an accelerator")
    module = getattr(torch, device.type, None)
    available = getattr(module, "is_available", None)
    if available is None or not available():
        raise UnknownName(f"device {text!r} is not available in this process "
                          f"(torch.{device.type}.is_available() is False)")
    count = getattr(module, "device_count", lambda: 1)()
    if device.index is not None and device.index >= count:
        raise UnknownName(f"device {text!r} does not exist: this process sees {count} {device.type} device(s)")
    if device.index is None and device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    return device
