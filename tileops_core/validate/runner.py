"""Run the validator over the manifest, or over given files and directories.

Which checks run depends on the spec's ``status`` (seed 001): ``spec-only`` gets the pure
lint, ``implemented`` the lint and the conformance pass (the op class, its generated
checks on every workload row, its compile boundary, its benchmark); ``check_op`` forces
everything for one op and reports only that op. The conformance pass imports torch and
op modules, so it is imported only when some spec needs it; ``conformance=False`` (or no
torch installed) runs the lint alone without importing torch: plugins are then not loaded,
and their specs are read from the directories they declare in package metadata
(:mod:`tileops_core.spec.declared`). With the conformance pass, a plugin that failed to load
is an error (``L1.plugin``), and the specs it declares in package metadata get the lint alone.
The report's notes say what was skipped and why.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

from ..errors import Location, SpecError, UsageError
from ..plugins.hookspecs import ENTRY_POINT_GROUP
from ..spec.declared import MANIFEST_ENTRY_POINT_GROUP, declared_sources
from ..spec.manifest import Manifest, ManifestSource, core_manifest_dir, load_files, manifest_sources
from .diagnostics import ERROR, Diagnostic, from_spec_error, merge, sort_key
from .lint import DEFAULT_MAX_COMBINATIONS, LintResult, lint_spec

__all__ = ["Report", "UsageError", "validate", "target_files"]


@dataclass
class Report:
    """Everything one validator run found, and what it looked at."""

    diagnostics: list[Diagnostic]
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)  # shown label -> path on disk
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)  # what did not run, and why (the conformance pass, plugins)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == ERROR]

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        counts = {s: sum(1 for d in self.diagnostics if d.severity == s) for s in ("error", "warning", "advisory")}
        return {"ok": self.ok, "counts": counts, "seconds": round(self.seconds, 3), "files": sorted(self.files),
                "notes": self.notes, "ops": self.ops, "diagnostics": [d.as_dict() for d in self.diagnostics]}


def target_files(paths: Sequence[str | Path] | None,
                 sources: Sequence[ManifestSource] | None = None) -> list[tuple[Path, str]]:
    """(path, label) of every YAML file to validate: those under ``paths``, else the manifest's (or ``sources``')."""
    if not paths:
        out: list[tuple[Path, str]] = []
        for source in (manifest_sources() if sources is None else sources):
            if source.directory.is_dir():
                out.extend((p, f"{source.label}/{p.name}") for p in sorted(source.directory.glob("*.yaml")))
        return out
    files: list[tuple[Path, str]] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(path.glob("*.yaml"))
            if not found:  # (found in review: a folder of .yml files passed, having checked nothing)
                raise UsageError(f"no *.yaml file in {raw}: nothing to validate (specs are read from files ending "
                                 "in .yaml)")
            files.extend((p, str(Path(raw) / p.name)) for p in found)
        elif path.is_file():
            files.append((path, str(raw)))
        else:
            raise UsageError(f"no such file or directory: {raw}")
    return files


def torch_available() -> bool:
    """Whether torch can be imported here (found by its finder; nothing is imported)."""
    if "torch" in sys.modules:
        return sys.modules["torch"] is not None  # None: blocked on purpose (``import torch`` raises)
    return importlib.util.find_spec("torch") is not None


def validate(paths: Sequence[str | Path] | None = None, *, check_op: str | None = None,
             max_combinations: int = DEFAULT_MAX_COMBINATIONS, conformance: bool = True) -> Report:
    """Validate the manifest (or ``paths``); see the module docstring for what runs on which spec."""
    start = time.perf_counter()
    notes: list[str] = []
    if not conformance:
        notes.append("conformance pass skipped: not asked for (--no-conformance); the spec lint ran alone, "
                     "without importing torch")
    elif not torch_available():
        conformance = False
        notes.append("conformance pass skipped: torch is not installed; the spec lint ran alone")
    sources: list[ManifestSource] | None = None
    problems: list[SpecError] = []
    lint_only: tuple[str, ...] = ()  # labels of spec folders whose op classes are not checked
    if not paths and conformance:
        from ..plugins import ensure_plugins_loaded

        ensure_plugins_loaded()  # the manifest is the core's specs and those installed plugins ship
        problems = _undeclared_plugin_specs() + _failed_plugins()
        sources, lint_only, note = _unloaded_plugin_sources()
        if note:
            notes.append(note)
    elif not paths:
        sources, problems, note = _lint_sources()
        notes.append(note)
    files = target_files(paths, sources)
    manifest = load_files(files)
    if check_op is not None and check_op not in manifest:
        raise UsageError(f"no op named {check_op!r} in {len(files)} file(s) (known: {', '.join(sorted(manifest))})")
    diagnostics = [from_spec_error(p) for p in [*problems, *manifest.problems]] if check_op is None else []
    report = Report([], files={shown: path for path, shown in files}, notes=notes)
    modules: dict[str, Any] = {}
    for name, spec in manifest.items():
        if check_op is not None and name != check_op:
            continue
        result = lint_spec(spec, max_combinations=max_combinations)
        diagnostics.extend(result.diagnostics)
        full = conformance and (spec.status == "implemented" or name == check_op) \
            and not spec.file.startswith(lint_only)
        if full:
            diagnostics.extend(_conformance(result, manifest if not paths else None, modules))
        report.ops[name] = {"file": spec.file, "line": spec.line, "status": spec.status,
                            "checks": "all" if full else "spec", "combinations": result.combinations,
                            "checked": result.checked, "coverage": result.coverage, "excluded": result.excluded,
                            "solve_orders": [list(o) for o in dict.fromkeys(result.solve_orders)]}
    report.diagnostics = sorted(merge(diagnostics), key=sort_key)
    report.seconds = time.perf_counter() - start
    return report


def _undeclared_plugin_specs() -> list[SpecError]:
    """A loaded plugin's spec directory that its metadata does not declare: the lint alone would miss it."""
    declared, problems = declared_sources()
    seen = {s.directory for s in declared} | {core_manifest_dir().resolve()}
    for source in manifest_sources():
        if source.directory.resolve() not in seen:
            plugin = source.label.split(":")[0]
            problems.append(SpecError(
                f"plugin {plugin} contributes the spec directory {source.directory} from its hook only; the lint "
                f"alone (--no-conformance, or where torch is not installed) cannot see it", Location(source.label),
                rule="L0.undeclared-specs",
                fix=f'declare it: [project.entry-points."{MANIFEST_ENTRY_POINT_GROUP}"] {plugin} = '
                    f'"<package>.{source.directory.name}"'))
    return problems


def _failed_plugins() -> list[SpecError]:
    """A plugin that failed to load: none of its op classes or kernels was checked, and the specs it
    ships from its hook alone were not even read (found in review: such a run passed clean)."""
    from ..plugins import plugin_records

    out = []
    for record in plugin_records():
        if record.status == "failed":
            dist = f" ({record.distribution} {record.version})" if record.distribution else ""
            out.append(SpecError(f"plugin {record.name}{dist} failed to load, so its op classes and kernels went "
                                 f"unchecked: {record.reason}", Location(record.origin), rule="L1.plugin",
                                 fix="`tileops backends` shows the failure; fix the plugin or uninstall it"))
    return out


def _unloaded_plugin_sources() -> tuple[list[ManifestSource], tuple[str, ...], str | None]:
    """The loaded manifest's folders, then those plugins declare in package metadata but that are not
    loaded (a plugin that failed or was switched off): the latter get the lint alone, since their op
    classes are not bound to them. Returns the sources, the labels of the latter, and a note naming them."""
    sources = manifest_sources()
    known = {s.directory.resolve() for s in sources}
    unloaded = [s for s in declared_sources()[0] if s.directory not in known]
    if not unloaded:
        return sources, (), None
    plugins = ", ".join(dict.fromkeys(s.label.split(":")[0] for s in unloaded))
    note = (f"plugins that did not load ({plugins}): the specs they declare got the spec lint alone, no "
            "conformance pass")
    return sources + unloaded, tuple(f"{s.label}/" for s in unloaded), note


def _lint_sources() -> tuple[list[ManifestSource], list[SpecError], str]:
    """The spec directories the lint reads without loading plugins, the problems finding them, and a note.

    The core's directory, those of plugins already loaded in this process, and those plugins
    declare in package metadata (:mod:`tileops_core.spec.declared`); a plugin that ships specs
    only through its hook cannot be seen without importing it, and the note says so.
    """
    sources = manifest_sources()
    known = {s.directory.resolve() for s in sources}
    declared, problems = declared_sources()
    sources.extend(s for s in declared if s.directory not in known)
    names = ", ".join(s.label for s in declared) or "none"
    plugins = sorted(ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP))
    note = (f"plugins not loaded: plugin specs read are those declared in the entry-point group "
            f"{MANIFEST_ENTRY_POINT_GROUP} ({names}); a plugin that adds specs only from its hook is not covered "
            f"(installed plugins: {', '.join(plugins) or 'none'})")
    return sources, problems, note


def _conformance(result: LintResult, catalogue: Manifest | None, modules: dict[str, Any]) -> list[Diagnostic]:
    """The code checks of one spec (imports torch and the op module on first use).

    ``catalogue`` is the whole manifest when that is what is validated: only then can an Op
    class without a spec be told apart from one whose spec is simply not among the files given.
    """
    from . import conformance as conf
    from .inference import check_inference, generator_rows

    ctx = result.context
    assert ctx is not None
    out: list[Diagnostic] = []
    cls, module, found = conf.find_op_class(ctx)
    out.extend(found)
    if catalogue is not None and module is not None and module.__name__ not in modules:
        modules[module.__name__] = module
        for orphan in conf.orphan_classes(module, set(catalogue)):
            out.append(ctx.diag("L1.orphan", f"{module.__name__}.{orphan.__name__} is an Op class with no manifest "
                                f"entry named {orphan.__name__}; it cannot bind a spec", field="source.op",
                                line=ctx.spec.field_lines.get("source"),
                                key=f"orphan:{module.__name__}.{orphan.__name__}"))
    out.extend(conf.check_bench(ctx))
    if cls is None:
        return out
    if not ctx.broken("signature.inputs", "signature.outputs", "signature.params", "signature.static_dims"):
        out.extend(conf.check_init(ctx, cls))
        out.extend(conf.check_forward(ctx, cls))
    if not ctx.spec.usable:
        return out
    with conf.bound_to(cls, ctx.spec) as bound:
        out.extend(conf.check_schema(ctx, bound))
        rows, found = generator_rows(ctx)
        out.extend(found)
        rows = result.rows + rows
        out.extend(check_inference(ctx, bound.op_cls, rows))
    return out
