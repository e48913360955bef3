"""``tileops backends``: what is installed, what it sees, and what failed to load.

Lists every registered backend (distribution, version, device types, kernels, ops it
ships, the devices its ``detect()`` reports), the plugins that the environment disabled,
and every load failure with its reason, and what loading noticed (an allow-list naming no
installed plugin, a plugin spec that does not load, a ``preferred_over`` naming no kernel).
Exit code 1 when a plugin failed to load, loading noticed something, or a backend's
``detect()`` raised or returned something other than a list of devices (a backend broken
on this machine: it lists no devices, and shows ``detected: error``), so CI can assert a
clean install; 2 for a ``--kernels`` or ``--lock`` that cannot be used.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from .._version import CORE_MAJOR, __version__
from ..kernels import registry
from ..kernels.records import BackendInfo
from ..plugins import ENV_NO_AUTOLOAD, plugin_records
from ..kernels.steering import steering_layers
from ..kernels.targets import target_layers
from .main import EXIT_FINDINGS, EXIT_OK
from .steer_options import add_kernels_argument, kernels_argument, steering_lines

__all__ = ["NAME", "HELP", "add_arguments", "run", "collect"]

NAME = "backends"
HELP = "list installed backends, their versions, detected devices/archs and plugin load failures"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    add_kernels_argument(parser)


def _detected(info: BackendInfo) -> tuple[list[dict[str, Any]], str | None]:
    if info.detect is None:
        return [], None
    try:
        found = info.detect()
        devices = list(found) if isinstance(found, Iterable) and not isinstance(found, (str, bytes, Mapping)) else None
    except Exception as exc:  # a broken detect() is a finding about that backend, not a crash of the command
        return [], f"detect() raised {type(exc).__name__}: {exc}"
    if devices is None or not all(isinstance(d, Mapping) for d in devices):
        return [], (f"detect() returned {found!r}, not a list of mappings such as "
                    "[{'device': 'cuda:0', 'arch': 'sm_90'}]")
    # Values a backend reports (a torch.device, a number) are shown as text, in JSON too (found in review:
    # a torch.device made `--format json` a traceback).
    return [{str(k): v if isinstance(v, (str, int, float, bool)) or v is None else str(v) for k, v in d.items()}
            for d in devices], None


def collect() -> dict[str, Any]:
    """Everything the command shows, as JSON-friendly data."""
    backends = []
    profiles: dict[str, list[str]] = {}
    for profile in registry.active().hardware_profiles():
        profiles.setdefault(profile.backend, []).append(str(profile.path))
    for name, info in sorted(registry.backends().items()):
        devices, error = _detected(info)
        backends.append({
            "name": name, "distribution": info.distribution, "version": info.version,
            "device_types": list(info.device_types), "description": info.description,
            "kernels": [k.qualname() for k in sorted(info.kernels, key=lambda k: k.qualname())],
            "kernel_devices": sorted({d for k in info.kernels for d in k.devices}),
            "ops": list(info.ops), "hardware_profiles": profiles.get(name, []), "detected": devices,
            "detect_error": error,
        })
    records = plugin_records()
    return {
        "core": {"distribution": "tileops", "version": __version__, "major": CORE_MAJOR},
        "backends": backends,
        "disabled": [r.as_dict() for r in records if r.status == "disabled"],
        "failures": [{"name": f.name, "distribution": f.distribution, "version": f.version, "reason": f.reason}
                     for f in registry.failures()],
        "notices": list(registry.active().plugins.notices),
        "target_layers": {layer: None if value is None else str(value) for layer, value in target_layers()},
        "steering": steering_layers(registry.active()),
    }


def _text(data: dict[str, Any]) -> str:
    core = data["core"]
    lines = [f"tileops {core['version']} (core major {core['major']})", ""]
    if data["backends"]:
        lines.append(f"backends ({len(data['backends'])}):")
    else:  # (found in review: "none installed" where autoloading was off and the backends were installed)
        off = f" ({ENV_NO_AUTOLOAD} is set: installed plugins are not loaded)" if os.environ.get(ENV_NO_AUTOLOAD) else ""
        lines.append(f"backends: none loaded{off}")
    for b in data["backends"]:
        dist = f"{b['distribution']} {b['version']}" if b["distribution"] else f"in-process, version {b['version']}"
        lines.append(f"  {b['name']}  ({dist})")
        if b["description"]:
            lines.append(f"    {b['description']}")
        extra = [d for d in b["kernel_devices"] if d not in b["device_types"]]
        devices = ", ".join(b["device_types"]) + (f" (kernels also declare: {', '.join(extra)})" if extra else "")
        lines.append(f"    device types: {devices}")
        lines.append(f"    kernels: {len(b['kernels'])}" + (f"  ops shipped: {', '.join(b['ops'])}" if b["ops"] else ""))
        lines.extend(f"    hardware profile: {p}" for p in b["hardware_profiles"])
        if b["detect_error"]:
            lines.append(f"    detected: error: {b['detect_error']}")
        for d in b["detected"]:
            rest = ", ".join(f"{k}={v}" for k, v in d.items() if k not in ("device", "arch"))
            lines.append(f"    detected: {d.get('device', '?')}  arch {d.get('arch', 'unknown')}"
                         + (f"  ({rest})" if rest else ""))
    if data["disabled"]:
        lines.append("")
        lines.append("disabled plugins:")
        lines.extend(f"  {r['name']} ({r['distribution'] or r['origin']}): {r['reason']}" for r in data["disabled"])
    lines.append("")
    lines.append("selection layers (highest first): op target= (per op), use_target() (scope), per-op overrides, "
                 "process target, automatic")
    lines.append("  process target: " + "; ".join(f"{k} {v or '-'}" for k, v in data["target_layers"].items()
                                                 if k in ("set_target()", "TILEOPS_TARGET")))
    lines.extend("  " + line for line in steering_lines(data["steering"]))
    lines.append("")
    if data["failures"]:
        lines.append(f"load failures ({len(data['failures'])}):")
        for f in data["failures"]:
            dist = f" ({f['distribution']} {f['version']})" if f["distribution"] else ""
            lines.append(f"  {f['name']}{dist}: {f['reason']}")
    else:
        lines.append("load failures: none")
    if data["notices"]:
        lines.append(f"loading notices ({len(data['notices'])}):")
        lines.extend(f"  {n}" for n in data["notices"])
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    with kernels_argument(args):
        data = collect()
    print(json.dumps(data, indent=2) if args.format == "json" else _text(data))
    steering = data["steering"]
    problems = steering["override_problems"] or steering["lock_error"]
    broken = any(b["detect_error"] for b in data["backends"])  # (found in review: exit 0)
    return EXIT_FINDINGS if data["failures"] or data["notices"] or problems or broken else EXIT_OK
