"""Hardware profiles: the ceilings a roofline efficiency is measured against.

A profile is a small YAML file: the device it describes (``device_type`` and substrings of
the device name in ``match``, or ``generic: true`` for any device of that type), memory
bandwidth and peak FLOP/s per dtype, each as a datasheet ``peak`` and/or a ``measured``
figure. Three sources, each visible in ``tileops bench`` output as the profile's origin:

* ``shipped``: the files in ``tileops_core/profiles/`` (inside the wheel);
* ``plugin``: files backends contribute through ``registrar.hardware_profile(path)``;
* ``user``: profiles written by ``tileops calibrate --save`` into the user profile
  directory (``$TILEOPS_PROFILE_DIR``, else ``$XDG_CONFIG_HOME/tileops/profiles``, else
  ``~/.config/tileops/profiles``).

For a device, an explicit ``--profile`` (a name or a path) wins; otherwise profiles whose
``match`` names the device beat ``generic`` ones, and among equals user beats plugin beats
shipped (a calibration of this very machine is the best ceiling there is). Efficiencies
use the ``measured`` figure where one exists (what the hardware really sustains) unless
the caller asks for the datasheet ``peak``.
"""

from __future__ import annotations

import os
import platform
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import SpecError, TileOpsError, UsageError
from ..spec.yamlload import load_yaml_text
from .catalog import UnknownName

__all__ = [
    "Rate", "HardwareProfile", "ProfileEntry", "Basis", "SHIPPED_DIR", "user_profile_dir", "load_profile",
    "available_profiles", "profile_for", "device_name", "dump_profile",
]

#: Which figure a ceiling uses: what was measured (falling back to the datasheet) or the datasheet.
Basis = Literal["measured", "peak"]

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "profiles"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Rate(_Strict):
    """A rate (bytes/s or FLOP/s): the datasheet ``peak``, a ``measured`` figure, or both."""

    peak: float | None = Field(default=None, gt=0)
    measured: float | None = Field(default=None, gt=0)
    note: str | None = None

    @model_validator(mode="after")
    def _one_figure(self) -> "Rate":
        if self.peak is None and self.measured is None:
            raise ValueError("give peak, measured or both")
        return self

    def value(self, basis: Basis) -> tuple[float, str]:
        """The figure for ``basis`` and which one it is (``measured`` falls back to ``peak``)."""
        if basis == "measured" and self.measured is not None:
            return self.measured, "measured"
        if self.peak is not None:
            return self.peak, "peak"
        assert self.measured is not None  # _one_figure: a Rate has at least one
        return self.measured, "measured"


class HardwareProfile(_Strict):
    """One device's ceilings (see the module docstring for the file format)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    device_type: str
    match: list[str] = Field(default_factory=list)
    generic: bool = False
    memory: Rate
    compute: dict[str, Rate]
    l2_bytes: int | None = Field(default=None, gt=0)
    sources: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _matches_something(self) -> "HardwareProfile":
        if not self.match and not self.generic:
            raise ValueError("a profile names the devices it describes (match: [...]) or is generic: true")
        if not self.compute:
            raise ValueError("compute lists the FLOP/s of at least one dtype")
        return self

    def describes(self, device_type: str, name: str) -> int:
        """How well this profile fits a device: 2 by name, 1 as the generic profile, 0 not at all."""
        if device_type != self.device_type:
            return 0
        if any(m.lower() in name.lower() for m in self.match):
            return 2
        return 1 if self.generic else 0

    def bandwidth(self, basis: Basis = "measured") -> tuple[float, str]:
        """Memory bandwidth in bytes/s and which figure it is."""
        return self.memory.value(basis)

    def compute_rate(self, dtype: str, basis: Basis = "measured") -> tuple[float, str, str] | None:
        """(FLOP/s, figure, dtype used) for ``dtype``; a dtype the profile does not list uses
        float32's figure (integer and promoted ops run on the float32 units), None if neither."""
        rate = self.compute.get(dtype)
        used = dtype
        if rate is None:
            rate, used = self.compute.get("float32"), "float32"
        if rate is None:
            return None
        value, figure = rate.value(basis)
        return value, figure, used


@dataclass(frozen=True)
class ProfileEntry:
    """A loaded profile and where it came from (``shipped``, ``plugin:<backend>``, ``user``, ``file``)."""

    profile: HardwareProfile
    origin: str
    path: Path | None


def user_profile_dir() -> Path:
    """Where ``tileops calibrate --save`` writes and the bench looks for calibrated profiles."""
    explicit = os.environ.get("TILEOPS_PROFILE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tileops" / "profiles"


def load_profile(path: str | Path) -> HardwareProfile:
    """Read and validate one profile file; errors name the file and the field."""
    p = Path(path)
    try:
        raw = load_yaml_text(p.read_text(), str(p))  # bounded like a manifest: a plugin ships profiles too
    except OSError as exc:
        raise TileOpsError(f"cannot read hardware profile {p}: {exc.strerror or exc}") from None
    except SpecError as exc:
        raise TileOpsError(f"hardware profile {exc}") from None
    try:
        return HardwareProfile.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or '<top>'}: {e['msg']}" for e in exc.errors())
        raise TileOpsError(f"hardware profile {p}: {problems}") from None


def _entry(path: Path, origin: str) -> ProfileEntry | None:
    """A plugin's or the user's profile that does not load is skipped with a warning naming the
    file and the field: it must not take the bench down for every other device."""
    try:
        return ProfileEntry(load_profile(path), origin, path)
    except TileOpsError as exc:
        if origin == "shipped":
            raise
        warnings.warn(f"skipping a hardware profile ({origin}): {exc}", RuntimeWarning, stacklevel=3)
        return None


def _dir_entries(directory: Path, origin: str) -> list[ProfileEntry]:
    if not directory.is_dir():
        return []
    found = (_entry(p, origin) for p in sorted(directory.glob("*.y*ml")))
    return [e for e in found if e is not None]


def available_profiles() -> list[ProfileEntry]:
    """Every profile: shipped, then plugin-contributed, then the user's calibrated ones."""
    from ..plugins import hardware_profiles

    entries = _dir_entries(SHIPPED_DIR, "shipped")
    for contributed in hardware_profiles():
        entry = _entry(contributed.path, f"plugin:{contributed.backend}")
        if entry is not None:
            entries.append(entry)
    entries.extend(_dir_entries(user_profile_dir(), "user"))
    return entries


_ORIGIN_RANK = {"user": 3, "plugin": 2, "shipped": 1}


def profile_for(device_type: str, name: str, explicit: str | None = None) -> ProfileEntry | None:
    """The profile for a device (see the module docstring for the order); None if none fits. A profile
    named by the user must be of the device's type (found in review: an H200's on a CPU run gave every
    row an efficiency of 0.0%)."""
    if explicit:
        entry = _named_profile(explicit)
        if entry.profile.device_type != device_type:
            raise UsageError(f"hardware profile {entry.profile.name!r} describes a {entry.profile.device_type} device; "
                             f"this run is on {device_type}")
        return entry
    best: tuple[int, int] = (0, 0)
    chosen = None
    for entry in available_profiles():
        fit = entry.profile.describes(device_type, name)
        rank = (fit, _ORIGIN_RANK.get(entry.origin.split(":")[0], 0))
        if fit and rank > best:
            best, chosen = rank, entry
    return chosen


def _named_profile(explicit: str) -> ProfileEntry:
    if explicit.endswith((".yaml", ".yml")) or os.sep in explicit:
        path = Path(explicit)
        if not path.is_file():
            raise UnknownName(f"hardware profile file {path} does not exist")
        return ProfileEntry(load_profile(path), "file", path)
    entries = available_profiles()
    for entry in entries:
        if entry.profile.name == explicit:
            return entry
    known = ", ".join(sorted({e.profile.name for e in entries}))
    raise UnknownName(f"no hardware profile named {explicit!r} (known: {known}); give a name or a .yaml path")


def device_name(device: Any) -> str:
    """A human name of a ``torch.device`` (the GPU's product name; the CPU's model name)."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            text = ""
        found = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        return (found.group(1).strip() if found else platform.processor() or platform.machine() or "cpu")
    return str(device)


def dump_profile(profile: HardwareProfile) -> str:
    """The profile as YAML text (what ``tileops calibrate`` writes)."""
    data = profile.model_dump(exclude_none=True, exclude_defaults=False)
    return yaml.safe_dump(data, sort_keys=False)
