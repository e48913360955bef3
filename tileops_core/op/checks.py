"""Every check of an op, generated from its spec: construction and seed 000's steps 1-5.

:class:`OpChecks` is built once per op class from the :class:`OpSpec` (it is part of the
class's :class:`~tileops_core.op.definition.OpDef`). It checks an op's construction
(:meth:`OpChecks.construct`) and, for a call with a key not seen before by that instance,
runs steps 1-5 as named methods (:meth:`OpChecks.plan_call`) and returns a
:class:`~tileops_core.op.plan.CallPlan`. Step 6 (the kernel) and step 7 (the outputs) live
with the plan.

Every failure raises :class:`CheckError` naming the op, the declaration as written in the
YAML with ``file:line``, and the actual values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from ..errors import Location, TileOpsError, fail
from ..kernels.interface import CallSpec, KernelInterface
from ..kernels.targets import current_target, default_device
from ..lang import ir
from ..lang.dtypes import DTypeExpr, DTypeIf, DTypeRef, DTypeSet, PromoteIntToFloat, SameAs, promote_int_to_float
from ..lang.evaluate import Unbound
from ..lang.shapes import Axis, ShapePattern
from ..lang.types import ADTRef, Enum, Prim, UnionT, is_maybe
from ..lang.unify import SolvePlan, UnifyError, plan_solve, run_solve
from ..spec.nodes import REQUIRED, Expr, FamilyRef, FamilySpec, OpSpec, TensorSpec
from .plan import CallPlan, TensorMeta, is_zero, numel
from .storage import check_buffer_storage
from .torchtypes import TORCH_DTYPES, name_of

__all__ = ["Branch", "OpChecks", "OutputTypes", "SymbolicDims", "contents_checking_default"]


def _fmt(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor{list(value.shape)}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_fmt(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


class SymbolicDims(TileOpsError):
    """A call spec asked for under a trace whose shapes are symbolic in a dim a kernel specialises on:
    no kernel can be selected for it there (a decomposition declines; eager calls never see it)."""


@dataclass(frozen=True)
class Branch:
    """What is fixed once the discriminants are: shapes, dtypes and the solve plan."""

    shapes: dict[str, ShapePattern | None]
    dtypes: dict[str, DTypeExpr]
    solve: SolvePlan
    rules: tuple[Expr, ...]
    lets: tuple[tuple[str, Expr], ...]


@dataclass(frozen=True)
class OutputTypes:
    """Per output, in manifest order: name, shape, dtype, its buffer's and alias's argument index."""

    names: tuple[str, ...]
    shapes: tuple[tuple[Any, ...], ...]
    dtypes: tuple[torch.dtype, ...]
    buffer_index: tuple[int | None, ...]
    alias_index: tuple[int | None, ...]
    contiguous: tuple[bool, ...]


class OpChecks:
    """The checks of one op class, generated from its spec once."""

    def __init__(self, spec: OpSpec) -> None:
        self.spec = spec
        self.op = spec.name
        self.loc = spec.location
        self.call_inputs = spec.call_inputs
        self.buffers = tuple(o for o in spec.outputs.values() if o.buffer)
        #: Per buffered output, the forward keyword of its buffer (``buffer: out``).
        self.buffer_names: tuple[str, ...] = tuple(o.buffer for o in self.buffers if o.buffer)
        self.arg_names: tuple[str, ...] = tuple(t.name for t in self.call_inputs) + self.buffer_names
        self.arg_index = {n: i for i, n in enumerate(self.arg_names)}
        # The plan key holds contiguity for these (the check of a contiguous: true input or
        # out buffer depends on it).
        self.contiguous_args = tuple(t.contiguous for t in self.call_inputs) + tuple(o.contiguous for o in self.buffers)
        self.any_contiguous_arg = any(self.contiguous_args)
        #: Positions of the forward arguments a kernel writes (mutated inputs, out buffers).
        self.written_args = tuple(i for i, n in enumerate(self.arg_names)
                                  if n in {t.name for t in self.call_inputs if t.mutated} or
                                  n in {o.buffer for o in self.buffers})
        mutated = [(i, t.loc) for i, t in enumerate(self.call_inputs) if t.mutated]
        #: Positions of the mutated inputs (out buffers are not among them) and their declarations.
        self.mutated_inputs = tuple(i for i, _ in mutated)
        self.mutated_locs = tuple(loc for _, loc in mutated)
        known = set(spec.params) | set(spec.static_dims)
        lets_of_params: list[tuple[str, Expr]] = []
        pending = dict(spec.lets)
        progress = True
        while progress:
            progress = False
            for name, e in list(pending.items()):
                if e.names <= known:
                    lets_of_params.append((name, e))
                    known.add(name)
                    del pending[name]
                    progress = True
        self.construction_lets = tuple(lets_of_params)
        self.call_lets = tuple(pending.items())
        self.construction_known = frozenset(known)
        tensors = set(spec.inputs) | set(spec.outputs)

        def decidable(e: Expr) -> bool:
            return e.names <= known and not (e.names & tensors)

        self.construction_rules = tuple(e for e in (*spec.requires, *spec.shape_rules) if decidable(e))
        self.call_requires = tuple(e for e in spec.requires if not decidable(e))
        self.call_rules = tuple(e for e in spec.shape_rules if not decidable(e))

    # -- construction -----------------------------------------------------------------------

    def construct(self, values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """Check and normalise construction arguments; return the env and construction tensors."""
        spec = self.spec
        known = set(spec.params) | set(spec.static_dims) | {t.name for t in spec.construction_inputs}
        for name in values:
            if name not in known:
                fail(self.op, f"unexpected argument {name!r} (the spec declares: {', '.join(sorted(known)) or 'none'})",
                     self.loc)
        env: dict[str, Any] = {}
        for name, param in spec.params.items():
            if name in values:
                value = values[name]
            elif param.default is not REQUIRED:
                value = param.default
            else:
                fail(self.op, f"param {name} ({param.type_text}) is required", param.loc)
            if not param.type.accepts(value):
                fail(self.op, f"param {name}={_fmt(value)} is not a {param.type_text}", param.loc)
            value = param.type.normalise(value)
            self._check_adt(name, value, param.type, param.loc)
            env[name] = value
        for name, sd in spec.static_dims.items():
            if name not in values:
                fail(self.op, f"static dim {name} (promised {sd.expr.text}) is a required keyword argument", sd.expr.loc)
            value = values[name]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                fail(self.op, f"static dim {name}={_fmt(value)} must be a non-negative int", sd.expr.loc)
            env[name] = value
        tensors: dict[str, torch.Tensor] = {}
        for t in spec.construction_inputs:
            given = self._given(t, values.get(t.name), "construction-time input", "is required")
            if given is not None:
                tensors[t.name] = given
        for name, e in self.construction_lets:
            env[name] = self._eval(e, env, f"let {name}")
        for e in self.construction_rules:
            if not self._eval(e, env, "rule"):
                fail(self.op, f"{e.text} does not hold with {self._values(e, env)}", e.loc)
        return env, tensors

    def _check_adt(self, name: str, value: Any, ptype: Any, loc: Location) -> None:
        options = ptype.options if isinstance(ptype, UnionT) else (ptype,)
        for option in options:
            if isinstance(option, ADTRef) and getattr(value, "adt", None) == option.name:
                adt = self.spec.types[option.name]
                variant = adt.variants.get(value.tag)
                if variant is None:
                    fail(self.op, f"param {name}: {option.name} has no variant {value.tag!r}", adt.loc)
                for fname, ftype in variant.fields.items():
                    if not ftype.accepts(getattr(value, fname, None)):
                        fail(self.op, f"param {name}: field {fname}={_fmt(getattr(value, fname, None))} of "
                                      f"{option.name}.{value.tag} is not a {ftype}", adt.loc)
                fenv = {f: getattr(value, f) for f in variant.fields}
                for inv in variant.invariants:
                    if not self._eval(inv, fenv, f"param {name}: invariant"):
                        fail(self.op, f"param {name}: invariant {inv.text} of {option.name}.{value.tag} does not "
                                      f"hold with {self._values(inv, fenv)}", inv.loc)

    def _eval(self, e: Expr, env: Mapping[str, Any], what: str) -> Any:
        try:
            return e.fn(env)
        except Unbound as exc:
            fail(self.op, f"{what} {e.text!r} refers to {exc.name}, which has no value on this call "
                          f"(guard it with present(...))", e.loc)
        except (ArithmeticError, TypeError, ValueError, LookupError, AttributeError, RuntimeError) as exc:
            fail(self.op, f"{what} {e.text!r} cannot be evaluated: {exc}", e.loc)

    def _values(self, e: Expr, env: Mapping[str, Any]) -> str:
        parts = []
        for n in sorted(e.names):
            if n in env:
                parts.append(f"{n}={_fmt(env[n])}")
        return ", ".join(parts) or "no values"

    # -- the discriminant branch ------------------------------------------------------------

    def branch(self, env: Mapping[str, Any], present: frozenset[str]) -> Branch:
        """Steps 2 and 3: the domain restriction, then each type family's case."""
        spec = self.spec
        denv = dict(env)
        for t in spec.inputs.values():
            denv[t.name] = True if t.name in present else None
        for e in self.call_requires:
            if not self._eval(e, denv, "requires"):
                fail(self.op, f"requires {e.text}: not satisfied with {self._presence(e, denv)}", e.loc)
        shapes: dict[str, ShapePattern | None] = {}
        dtypes: dict[str, DTypeExpr] = {}
        for t in [*spec.inputs.values(), *spec.outputs.values()]:
            if t.role == "input" and t.name not in present:
                continue
            shapes[t.name] = self._resolve(t.shape, denv, t) if t.shape is not None else None
            if t.dtype is not None:
                dtypes[t.name] = self._resolve(t.dtype, denv, t)
        patterns = {n: p for n, p in shapes.items() if p is not None and n in spec.inputs}
        solve = plan_solve(patterns, self.construction_known, {n: e.node for n, e in self.call_lets})
        if solve.unsolved:
            name = sorted(solve.unsolved)[0]
            if any(name in p.names() for p in patterns.values()):
                fail(self.op, f"index {name} cannot be inferred on this call: {solve.reasons[name]}", self.loc)
        return Branch(shapes, dtypes, solve, self.call_rules, self.call_lets)

    def _presence(self, e: Expr, denv: Mapping[str, Any]) -> str:
        parts = []
        for n in sorted(e.names):
            if n in self.spec.inputs:
                parts.append(f"{n} {'present' if denv.get(n) is not None else 'absent'}")
            elif n in denv:
                parts.append(f"{n}={_fmt(denv[n])}")
        return ", ".join(parts)

    def _resolve(self, decl: Any, denv: Mapping[str, Any], tensor: TensorSpec) -> Any:
        seen: list[str] = []
        while isinstance(decl, FamilyRef):
            if decl.name in seen:
                fail(self.op, f"type families refer to each other in a cycle: {' -> '.join(seen + [decl.name])}",
                     tensor.loc)
            seen.append(decl.name)
            family: FamilySpec = self.spec.families[decl.name]
            value = self._eval(family.match, denv, "family match")
            try:
                decl = family.case_for(value)
            except KeyError:
                keys = ", ".join(repr(k) for k, _ in family.cases)
                fail(self.op, f"{tensor.name}: match {family.match.text} = {_fmt(value)} has no case (cases: {keys})",
                     family.loc)
        return decl

    # -- a call with new shapes (steps 1-5) -------------------------------------------------

    def plan_call(self, op_obj: Any, values: Sequence[Any], env0: Mapping[str, Any],
                  construction: Mapping[str, torch.Tensor], interfaces: Sequence[type[KernelInterface]],
                  branches: dict[frozenset[str], Branch], arch_of: Callable[[torch.device], str]) -> CallPlan:
        """Seed 000's steps 1-5 for a call with new shapes, one named step each; the plan they give."""
        args = dict(zip(self.arg_names, values))
        presence = self.step1_presence(args, construction)
        branch = branches.get(presence)
        if branch is None:
            branch = self.branch(env0, presence)  # steps 2 and 3
            branches[presence] = branch
        device, device_by_default = self._calling_device(args, construction, env0, getattr(op_obj, "_target", None))
        env, tensors, converted, actual_dtypes, dtype_env = self.step4_infer(args, construction, env0, presence,
                                                                              branch, device)
        outputs = self.output_types(branch, env, env0, tensors, actual_dtypes, dtype_env, args)
        self.step5_out_buffers(outputs, args, tensors, device)
        out_names, out_shapes, out_dtypes = outputs.names, outputs.shapes, outputs.dtypes
        written = [s for s in out_shapes] + [tuple(tensors[t.name].shape) for t in self.spec.inputs.values()
                                             if t.mutated and t.name in tensors]
        empty = all(is_zero(numel(s)) for s in written)
        arch = arch_of(device) if interfaces else "unknown"
        call_specs = {i: self._call_spec(op_obj, i, device.type, arch, actual_dtypes, out_names, out_dtypes, env,
                                         presence, args) for i in interfaces}
        # The plan outlives the call: keep tensor metadata, never the tensors (their memory).
        kept_env = {k: TensorMeta.of(v) if isinstance(v, torch.Tensor) else v for k, v in env.items()}
        buffer_args = tuple(self.arg_index[b] for b in self.buffer_names if args.get(b) is not None)
        noncontiguous = tuple(i for i, v in enumerate(values)
                              if isinstance(v, torch.Tensor) and v.layout is torch.strided and not v.is_contiguous())
        return CallPlan(self.op, device, tuple(out_shapes), tuple(out_dtypes), tuple(out_names),
                        outputs.buffer_index, outputs.alias_index, outputs.contiguous, empty, call_specs, kept_env,
                        converted, self.loc, out_locs=tuple(o.loc for o in self.spec.outputs.values()),
                        n_buffers=len(self.buffers), buffer_args=buffer_args, arg_names=self.arg_names,
                        device_by_default=device_by_default, noncontiguous_args=noncontiguous,
                        written_args=self.written_args, reads_grad=any(
                            isinstance(v, torch.Tensor) and v.requires_grad
                            for v in (*values, *construction.values())),
                        mutated_inputs=self.mutated_inputs,
                        mutated_locs=self.mutated_locs)

    def step1_presence(self, args: Mapping[str, Any], construction: Mapping[str, torch.Tensor]) -> frozenset[str]:
        """Step 1: which call-time tensors are present (None = absent); every given one is a tensor."""
        present = set(construction)
        for t in self.call_inputs:
            if self._given(t, args.get(t.name), "input", "is required but was not given") is not None:
                present.add(t.name)
        for o, b in zip(self.buffers, self.buffer_names):
            v = args.get(b)
            if v is not None and not isinstance(v, torch.Tensor):
                fail(self.op, f"out buffer {b} must be a tensor, got {type(v).__name__}", o.loc)
        return frozenset(present)

    def _given(self, t: TensorSpec, value: Any, what: str, missing: str) -> torch.Tensor | None:
        """Input ``t`` as given (a tensor), or None when absent, which only an optional one may be."""
        if value is None:
            if not t.optional:
                fail(self.op, f"{what} {t.name} {missing}", t.loc)
            return None
        if not isinstance(value, torch.Tensor):
            fail(self.op, f"{what} {t.name} must be a tensor, got {type(value).__name__}", t.loc)
        return value

    def step4_infer(self, args: Mapping[str, Any], construction: Mapping[str, torch.Tensor], env0: Mapping[str, Any],
                    presence: frozenset[str], branch: Branch, device: torch.device
                    ) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, str],
                               dict[str, str]]:
        """Step 4: input dtypes, construction tensors moved and cast, placement, then the indices,
        static dims, lets and refinements. Returns the env and what the output step reads."""
        spec = self.spec
        tensors: dict[str, torch.Tensor] = {n: args[n] for n in presence if n in args}
        dtype_env: dict[str, str] = {}
        converted: dict[str, torch.Tensor] = {}
        actual_dtypes = {n: name_of(v.dtype) for n, v in tensors.items()}
        for n, v in construction.items():
            actual_dtypes[n] = name_of(v.dtype)
        for decl in spec.inputs.values():
            if decl.name not in presence:
                continue
            expr = branch.dtypes.get(decl.name)
            if expr is None:
                continue
            if decl.construction:
                want = self._dtype_value(expr, actual_dtypes, dtype_env, env0, tensors, decl)
                if want is not None:
                    actual_dtypes[decl.name] = want
                continue
            self._check_dtype(decl, expr, actual_dtypes[decl.name], actual_dtypes, dtype_env, env0, tensors)
        for n, ctensor in construction.items():
            want_dtype = TORCH_DTYPES[actual_dtypes[n]]
            target_device = torch.device("cpu") if spec.inputs[n].device == "cpu" else device
            converted[n] = ctensor.to(device=target_device, dtype=want_dtype)
            tensors[n] = converted[n]
        self._check_combos(actual_dtypes)
        self._check_placement(tensors, args)
        env: dict[str, Any] = dict(env0)
        env.update(tensors)
        for decl in spec.inputs.values():
            env.setdefault(decl.name, None)
        origin: dict[str, str] = {n: f"param {n}" for n in spec.params}
        origin.update({n: f"let {n} = {e.text}" for n, e in self.construction_lets})
        origin.update({n: f"static dim {n}" for n in spec.static_dims})
        shapes = {n: tuple(t.shape) for n, t in tensors.items()}
        patterns = {n: p for n, p in branch.shapes.items() if p is not None and n in spec.inputs and n in presence}
        try:
            run_solve(branch.solve, patterns, shapes, env, origin)
        except UnifyError as exc:
            fail(self.op, exc.message, spec.inputs[exc.tensor].loc)
        except (Unbound, ArithmeticError, TypeError, ValueError, LookupError, AttributeError) as exc:  # (found in
            # review: an axis `N // M` with M = 0 raised ZeroDivisionError from inside the solver)
            fail(self.op, f"the input shapes {', '.join(f'{n}={list(s)}' for n, s in shapes.items())} cannot be "
                          f"solved against the signature: {type(exc).__name__}: {exc}", self.loc)
        self._check_static_dims(tensors, env)
        for name, e in branch.lets:
            if name not in env:
                env[name] = self._eval(e, env, f"let {name}")
        for e in branch.rules:
            holds = self._eval(e, env, "shape rule")
            if isinstance(holds, (tuple, list, str)):  # always true: "N > 2, M > 2" is a tuple (found in review)
                fail(self.op, f"shape rule {e.text!r} is not a condition (it gives a {type(holds).__name__}); "
                              "write one comparison a rule, or join them with 'and'", e.loc)
            if not holds:
                fail(self.op, f"{e.text} does not hold with {self._values(e, env)}", e.loc)
        return env, tensors, converted, actual_dtypes, dtype_env

    def _check_static_dims(self, tensors: Mapping[str, torch.Tensor], env: Mapping[str, Any]) -> None:
        for name, sd in self.spec.static_dims.items():
            tensor = tensors.get(sd.tensor)
            if tensor is None:
                continue
            axis = self._eval(Expr(sd.axis, ir.unparse(sd.axis), sd.expr.loc), env, "static dim axis")
            if not -tensor.dim() <= axis < max(tensor.dim(), 1):
                fail(self.op, f"static dim {name}: {sd.expr.text} with axis {axis} is out of range for "
                              f"{sd.tensor} of rank {tensor.dim()}", sd.expr.loc)
            size = tensor.shape[axis] if tensor.dim() else 1  # (a 0-d tensor's one axis, as torch counts it)
            if size != env[name]:
                fail(self.op, f"static dim {name} was promised as {env[name]} at construction, but {sd.expr.text} is "
                              f"{size}", sd.expr.loc)

    def output_types(self, branch: Branch, env: Mapping[str, Any], env0: Mapping[str, Any],
                     tensors: Mapping[str, torch.Tensor], actual_dtypes: Mapping[str, str],
                     dtype_env: Mapping[str, str], args: Mapping[str, Any]) -> "OutputTypes":
        """The outputs' shapes and dtypes on this call (an output whose dtype is a choice takes its buffer's)."""
        spec = self.spec
        out_shapes: list[tuple[Any, ...]] = []
        out_dtypes: list[torch.dtype] = []
        for o in spec.outputs.values():
            if o.alias:
                src = tensors[o.alias]
                out_shapes.append(tuple(src.shape))
                out_dtypes.append(src.dtype)
                continue
            out_shapes.append(self._output_shape(o, branch.shapes[o.name], env))
            want = self._dtype_value(branch.dtypes[o.name], actual_dtypes, dtype_env, env0, tensors, o)
            if want is None:
                buf = args.get(o.buffer) if o.buffer else None
                options = self._dtype_options(branch.dtypes[o.name])
                if buf is None or name_of(buf.dtype) not in options:
                    fail(self.op, f"output {o.name} dtype {o.dtype_text} is not determined by the inputs; pass an "
                                  "out buffer of one of " + ", ".join(options), o.loc)
                want = name_of(buf.dtype)
            out_dtypes.append(TORCH_DTYPES[want])
        outs = list(spec.outputs.values())
        return OutputTypes(tuple(o.name for o in outs), tuple(out_shapes), tuple(out_dtypes),
                           tuple(self.arg_index.get(o.buffer) if o.buffer else None for o in outs),
                           tuple(self.arg_index.get(o.alias) if o.alias else None for o in outs),
                           tuple(o.contiguous for o in outs))

    def step5_out_buffers(self, outputs: "OutputTypes", args: Mapping[str, Any], tensors: Mapping[str, torch.Tensor],
                          device: torch.device) -> None:
        """Step 5: a passed out buffer has the output's shape, dtype, device, layout and its own storage."""
        for i, o in enumerate(self.spec.outputs.values()):
            if not o.buffer:
                continue
            buf = args.get(o.buffer)
            if buf is None:
                continue
            if buf.layout is not torch.strided or buf.is_nested:  # (before its shape: a nested one has none)
                fail(self.op, f"out buffer {o.buffer} {_layout(buf)}, expected strided", o.loc)
            if tuple(buf.shape) != outputs.shapes[i]:
                fail(self.op, f"out buffer {o.buffer} has shape {list(buf.shape)}, output {o.name} {o.shape_text} is "
                              f"{list(outputs.shapes[i])}", o.loc)
            if buf.dtype != outputs.dtypes[i]:
                fail(self.op, f"out buffer {o.buffer} has dtype {name_of(buf.dtype)}, output {o.name} "
                              f"{o.dtype_text} is {name_of(outputs.dtypes[i])}", o.loc)
            if buf.device != device:
                fail(self.op, f"out buffer {o.buffer} is on {buf.device}, the call is on {device}", o.loc)
            if o.contiguous and not buf.is_contiguous():
                fail(self.op, f"out buffer {o.buffer} must be contiguous", o.loc)
            check_buffer_storage(self.op, o.buffer, o.loc, buf, tensors.values())

    def _calling_device(self, args: Mapping[str, Any], construction: Mapping[str, torch.Tensor],
                        env0: Mapping[str, Any], op_target: Any = None) -> tuple[torch.device, bool]:
        """Seed 000 §4: the tensors' common device; else a device param or an out buffer; else the
        device the effective target's class points to (the process accelerator when none)."""
        voters: dict[str, torch.device] = {}
        for t in self.spec.inputs.values():
            v = construction.get(t.name) if t.construction else args.get(t.name)
            if v is None or t.device == "cpu":
                continue
            voters[t.name] = v.device
        devices = set(voters.values())
        if len(devices) > 1:
            listed = ", ".join(f"{n} on {d}" for n, d in voters.items())
            fail(self.op, f"inputs are on different devices: {listed}", self.loc)
        if devices:
            return devices.pop(), False
        for name, p in self.spec.params.items():
            opts = p.type.options if isinstance(p.type, UnionT) else (p.type,)
            if any(isinstance(o, Prim) and o.kind == "device" for o in opts) and env0.get(name) is not None:
                return torch.device(env0[name]), False
        for b in self.buffer_names:
            buf = args.get(b)
            if buf is not None:
                return buf.device, False
        return default_device(current_target(op_target)), True

    def _check_placement(self, tensors: Mapping[str, torch.Tensor], args: Mapping[str, Any]) -> None:
        for t in self.spec.inputs.values():
            v = tensors.get(t.name)
            if v is None:
                continue
            if t.device == "cpu" and v.device.type != "cpu":
                fail(self.op, f"input {t.name} is declared device: cpu but is on {v.device}", t.loc)
            if t.contiguous and not v.is_contiguous():
                fail(self.op, f"input {t.name} is declared contiguous: true but is not contiguous "
                              f"(strides {list(v.stride())})", t.loc)
            if v.layout is not torch.strided or v.is_nested:
                fail(self.op, f"input {t.name} {_layout(v)}, expected strided", t.loc)
            if t.mutated and v.requires_grad:
                fail(self.op, f"input {t.name} is mutated (written in place) and requires grad: no kernel records "
                              "that write for autograd; pass a tensor with requires_grad=False (e.g. .detach())",
                     t.loc)

    def _check_dtype(self, t: TensorSpec, expr: DTypeExpr, actual: str, actual_dtypes: Mapping[str, str],
                     dtype_env: dict[str, str], env0: Mapping[str, Any], tensors: Mapping[str, Any]) -> None:
        if isinstance(expr, DTypeSet):
            if actual not in expr.names:
                fail(self.op, f"input {t.name} has dtype {actual}, expected {expr}", t.loc)
            return
        if isinstance(expr, DTypeRef) and expr.name not in self.spec.params and expr.name not in dtype_env:
            dtype_env[expr.name] = actual  # a DType index binds to the first dtype it meets
            return
        want = self._dtype_value(expr, actual_dtypes, dtype_env, env0, tensors, t)
        if want is None:
            options = self._dtype_options(expr)
            if actual not in options:
                fail(self.op, f"input {t.name} has dtype {actual}, expected {' | '.join(options)}", t.loc)
        elif want != actual:
            fail(self.op, f"input {t.name} has dtype {actual}, but {t.dtype_text} is {want}", t.loc)

    def _dtype_value(self, expr: DTypeExpr, actual: Mapping[str, str], dtype_env: Mapping[str, str],
                     env0: Mapping[str, Any], tensors: Mapping[str, Any], t: TensorSpec) -> str | None:
        """The single dtype a declaration gives on this call (None when it is a choice)."""
        if isinstance(expr, DTypeSet):
            return expr.names[0] if len(expr.names) == 1 else None
        if isinstance(expr, SameAs):
            return actual.get(expr.tensor)
        if isinstance(expr, PromoteIntToFloat):
            src = actual.get(expr.tensor)
            return None if src is None else promote_int_to_float(src)
        if isinstance(expr, DTypeRef):
            if expr.name in self.spec.params:
                return env0.get(expr.name)
            return dtype_env.get(expr.name)
        denv = dict(env0)
        for n in self.spec.inputs:
            denv[n] = tensors.get(n)
        test = Expr(expr.test, ir.unparse(expr.test), t.loc)
        branch = expr.body if self._eval(test, denv, "dtype condition") else expr.orelse
        return self._dtype_value(branch, actual, dtype_env, env0, tensors, t)

    def _dtype_options(self, expr: DTypeExpr) -> list[str]:
        if isinstance(expr, DTypeSet):
            return list(expr.names)
        if isinstance(expr, DTypeIf):
            return self._dtype_options(expr.body) + self._dtype_options(expr.orelse)
        return []

    def _check_combos(self, actual: Mapping[str, str]) -> None:
        combos = self.spec.dtype_combos
        if not combos:
            return
        for combo in combos:
            if all(actual.get(t) == d for t, d in combo.items()):
                return
        listed = "; ".join(", ".join(f"{t}={d}" for t, d in c.items()) for c in combos)
        got = ", ".join(f"{t}={actual.get(t)}" for t in combos[0])
        fail(self.op, f"dtypes {got} are not one of the dtype_combos ({listed})", self.loc.child("signature.dtype_combos"))

    def _output_shape(self, o: TensorSpec, pattern: ShapePattern | None, env: Mapping[str, Any]) -> tuple[int, ...]:
        if pattern is None:
            fail(self.op, f"output {o.name} has no shape declaration", o.loc)
        dims: list[Any] = []
        for item in pattern.items:
            try:
                if isinstance(item, Axis):
                    value = Expr(item.node, item.text, o.loc).fn(env)
                    dims.append(value)
                else:
                    dims.extend(env[item.name])
            except (Unbound, KeyError) as exc:
                name = exc.name if isinstance(exc, Unbound) else exc.args[0]
                fail(self.op, f"output {o.name} shape {o.shape_text} needs {name}, which no input determines", o.loc)
            except (ArithmeticError, TypeError, ValueError, AttributeError, RuntimeError) as exc:  # (found in review)
                fail(self.op, f"output {o.name} shape {o.shape_text} cannot be evaluated: {type(exc).__name__}: "
                              f"{exc}", o.loc)
        for d in dims:
            if isinstance(d, bool) or not isinstance(d, (int, torch.SymInt)):  # (N / 2 is a float: found in review)
                fail(self.op, f"output {o.name} shape {o.shape_text} = {dims} has an axis that is not an integer", o.loc)
            if isinstance(d, int) and d < 0:
                fail(self.op, f"output {o.name} shape {o.shape_text} = {dims} has a negative axis", o.loc)
        return tuple(dims)

    def _call_spec(self, op_obj: Any, interface: type[KernelInterface], device_type: str, arch: str,
                   actual_dtypes: Mapping[str, str], out_names: Sequence[str], out_dtypes: Sequence[torch.dtype],
                   env: Mapping[str, Any], presence: frozenset[str], args: Mapping[str, Any]) -> CallSpec:
        dtypes = dict(actual_dtypes)
        for name, dt in zip(out_names, out_dtypes):
            dtypes[name] = name_of(dt)
        dims = {k: tuple(v) if isinstance(v, list) else v for k, v in op_obj.specialisation(interface, env).items()}
        symbolic = [k for k, v in dims.items() if any(isinstance(x, torch.SymInt) for x in (v if isinstance(v, tuple)
                                                                                            else (v,)))]
        if symbolic:
            raise SymbolicDims(f"{self.op}: {interface.__name__} specialises on {', '.join(symbolic)}, symbolic here")
        flags: dict[str, Any] = {}
        for t in self.spec.inputs.values():
            if t.optional:
                flags[f"has_{t.name}"] = t.name in presence
        for b in self.buffer_names:
            flags[f"has_{b}"] = args.get(b) is not None
        for name, p in self.spec.params.items():
            value = env.get(name)
            options = p.type.options if isinstance(p.type, UnionT) else (p.type,)
            if any(isinstance(o, Prim) and o.kind == "bool" for o in options) or any(isinstance(o, Enum)
                                                                                  for o in options):
                flags[name] = value
            elif is_maybe(p.type):
                flags[f"has_{name}"] = value is not None
            if any(isinstance(o, ADTRef) for o in options) and value is not None:
                flags[f"{name}.tag"] = value.tag
        return CallSpec(self.op, interface.__name__, device_type, arch, dtypes, dims, flags)


def _layout(t: torch.Tensor) -> str:
    """What a refusal says of a tensor that is not strided: its layout, or that it is nested (a nested
    tensor of the strided layout has no sizes for the shape checks to read; found in review)."""
    return "is a nested tensor" if t.is_nested and t.layout is torch.strided else f"has layout {t.layout}"


def contents_checking_default() -> bool:
    """``TILEOPS_CHECK_CONTENTS=1`` turns on the checks that read tensor contents (a sync); off are unset,
    "", 0, false, no and off, in any case and spacing (as the plugin switches read; found in review:
    ``False`` turned them on)."""
    return os.environ.get("TILEOPS_CHECK_CONTENTS", "").strip().lower() not in ("", "0", "false", "no", "off")
