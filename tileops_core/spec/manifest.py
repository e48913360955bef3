"""Finding, reading, merging and caching the manifest: the public read API.

The core's specs ship inside the wheel as the package ``tileops_manifest`` (one YAML file
per family); plugins contribute further directories. Files are merged into one mapping
from op name to :class:`OpSpec`; an op defined twice is an error naming both files.

Loading is lenient by default: a broken file or entry is recorded (``Manifest.problems``,
``OpSpec.problems``) and never stops the rest from loading, so importing an op cannot fail
on an unrelated entry. ``strict=True`` raises :class:`ManifestError` listing every problem;
the validator reads the same objects and reports them one by one. Parsed files are cached
by path, modification time and size, so a repeated load costs a few ``stat`` calls.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from ..errors import Location, SpecError
from .compile import compile_op
from .nodes import OpSpec, WorkloadRow
from .yamlbounds import MAX_FILE_BYTES, MAX_OPS_PER_FILE, oversize_problem
from .yamlload import LineDict, load_yaml_text

__all__ = [
    "Manifest", "ManifestError", "ManifestSource", "load_manifest", "load_workloads", "get_spec",
    "core_manifest_dir", "set_source_provider", "clear_cache", "manifest_sources", "load_files",
]

CORE_LABEL = "manifest"


@dataclass(frozen=True)
class ManifestSource:
    """A directory of YAML specs and the label its files are shown under (``manifest/x.yaml``)."""

    label: str
    directory: Path


class ManifestError(SpecError):
    """Raised by a strict load: every problem of the manifest, one per line."""

    def __init__(self, problems: list[SpecError]) -> None:
        self.problems = problems
        first = problems[0]
        super().__init__(f"{len(problems)} problem(s) in the manifest", first.location, rule=first.rule)
        # The text is the list itself: each line carries its own file:line, op and field
        # (SpecError would prefix the first problem's location to the count).
        self.args = (f"{len(problems)} problem(s) in the manifest:\n" + "\n".join(str(p) for p in problems),)


class Manifest(Mapping[str, OpSpec]):
    """The merged manifest: op name -> OpSpec, plus file-level problems."""

    def __init__(self, specs: dict[str, OpSpec], problems: list[SpecError], files: tuple[str, ...]) -> None:
        self._specs = specs
        self.problems = tuple(problems)
        self.files = files

    def __getitem__(self, name: str) -> OpSpec:
        return self._specs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def all_problems(self) -> list[SpecError]:
        """File-level problems and every entry's problems, in file order."""
        out = list(self.problems)
        for spec in self._specs.values():
            out.extend(spec.problems)
        return out


def core_manifest_dir() -> Path:
    """The directory of the core's YAML files (inside the installed package)."""
    return Path(str(resources.files("tileops_manifest")))


def _default_sources() -> list[ManifestSource]:
    sources = [ManifestSource(CORE_LABEL, core_manifest_dir())]
    if _source_provider is not None:
        sources.extend(_source_provider())
    return sources


def manifest_sources() -> list[ManifestSource]:
    """The directories :func:`load_manifest` reads by default: the core's, then plugins'."""
    return _default_sources()


_source_provider: Callable[[], list[ManifestSource]] | None = None


def set_source_provider(provider: Callable[[], list[ManifestSource]] | None) -> None:
    """Install the function that lists plugin-contributed manifest directories (the plugin manager)."""
    global _source_provider
    _source_provider = provider
    clear_cache()


_lock = threading.Lock()
#: Parsed files by (file stamp, the label the file is shown under): the label is part of every
#: location a parsed spec carries, so one file read under two labels is two entries.
_file_cache: dict[tuple[tuple[str, int, int], str], tuple[list[tuple[str, Any, int | None]], list[SpecError]]] = {}
_manifest_cache: dict[tuple[Any, ...], Manifest] = {}


def clear_cache() -> None:
    """Forget every parsed file (tests; a plugin set that changed)."""
    with _lock:
        _file_cache.clear()
        _manifest_cache.clear()


def _read_file(path: Path, shown: str) -> tuple[list[tuple[str, Any, int | None]], list[SpecError]]:
    try:
        with path.open("rb") as f:
            head = f.read(MAX_FILE_BYTES + 1)  # never more: a 50 MB file costs what its limit does
            if len(head) > MAX_FILE_BYTES:
                return [], [oversize_problem(head, path.stat().st_size, shown)]
        text = head.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [], [SpecError(f"cannot read: {exc}", Location(shown), rule="L0.file")]
    try:
        data = load_yaml_text(text, shown)
    except SpecError as exc:
        return [], [exc]
    if data is None:
        return [], []
    if not isinstance(data, LineDict):
        return [], [SpecError("a manifest file maps op names to specs", Location(shown, 1), rule="L0.file")]
    if len(data) > MAX_OPS_PER_FILE:
        extra = list(data)[MAX_OPS_PER_FILE]
        return [], [SpecError(f"{len(data)} ops in one file, more than {MAX_OPS_PER_FILE}; split it, one family per "
                              "file", Location(shown, data.key_lines.get(extra), str(extra)), rule="L0.limit")]
    return [(str(name), raw, data.key_lines.get(name)) for name, raw in data.items()], []


def _stamp(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return (str(path), st.st_mtime_ns, st.st_size)


def load_manifest(*, strict: bool = False, sources: list[ManifestSource] | None = None) -> Manifest:
    """Load and merge every manifest file (the core's and plugins'), using the cache."""
    sources = _default_sources() if sources is None else sources
    files: list[tuple[Path, str]] = []
    for source in sources:
        if not source.directory.is_dir():
            continue
        for path in sorted(source.directory.glob("*.yaml")):
            files.append((path, f"{source.label}/{path.name}"))
    stamps = tuple((_stamp(p), shown) for p, shown in files)
    with _lock:
        cached = _manifest_cache.get(stamps)
    if cached is None:
        cached = _merge(files, stamps)
        with _lock:
            _manifest_cache[stamps] = cached
    if strict:
        problems = cached.all_problems()
        if problems:
            raise ManifestError(problems)
    return cached


def load_files(files: list[tuple[Path, str]]) -> Manifest:
    """Load and merge exactly these YAML files, each shown under its label (``tileops validate FILE``).

    Uses the same per-file cache as :func:`load_manifest`; the merged result is not cached.
    """
    return _merge(files, tuple((_stamp(p), shown) for p, shown in files))


def _merge(files: list[tuple[Path, str]], stamps: tuple[Any, ...]) -> Manifest:
    specs: dict[str, OpSpec] = {}
    problems: list[SpecError] = []
    for (path, shown), (stamp, _) in zip(files, stamps):
        with _lock:
            entry = _file_cache.get((stamp, shown))
        if entry is None:
            entries, file_problems = _read_file(path, shown)
            compiled = [(name, compile_op(name, raw, shown, line), line) for name, raw, line in entries]
            entry = (compiled, file_problems)
            with _lock:
                _file_cache[(stamp, shown)] = entry
        compiled, file_problems = entry
        problems.extend(file_problems)
        for name, spec, line in compiled:
            if name in specs:
                first = specs[name]
                problems.append(SpecError(f"op {name} is defined twice: first at {first.file}:{first.line}",
                                          Location(shown, line, name), rule="L0.duplicate-op"))
                continue
            specs[name] = spec
    return Manifest(specs, problems, tuple(shown for _, shown in files))


def get_spec(name: str) -> OpSpec:
    """The spec of op ``name``; a clear error when it is missing."""
    manifest = load_manifest()
    try:
        return manifest[name]
    except KeyError:
        known = ", ".join(sorted(manifest)) or "none"
        raise SpecError(f"no manifest entry named {name!r} (known: {known})", Location(op=name),
                        rule="L1.name") from None


def load_workloads(op: str) -> tuple[WorkloadRow, ...]:
    """The workload rows of ``op`` as written in the manifest."""
    return get_spec(op).workloads
