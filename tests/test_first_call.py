"""The first call of a process selects as a later one would: plugins and arch detectors first.

A fresh process builds an op and calls it before anything has loaded a plugin. The call
must see every installed backend, with the arch its own detector names, and never cache a
plan made from a registry that was not complete. The device here is ``meta`` with an arch
only the test plugin can name (``meta_v1``), standing in for CUDA and ``sm_90``: the
specialised kernel is available only once that detector is registered, and the reference
(``devices = ("*",)``) would otherwise serve the call, silently, forever.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from tileops_core import plugins
from tileops_core._version import CORE_MAJOR
from tileops_core.errors import KernelError
from tileops_core.ops.normalization import RMSNormFwdOp, RMSNormKernel

PLUGIN = f"""
from tileops_core.kernels import KernelEntry
from tileops_core.ops.normalization import RMSNormKernel


class MetaRMSNorm(RMSNormKernel):
    devices = ("meta",)
    supported_archs = ("meta_v1",)
    writes_outputs = True

    @classmethod
    def entry_for(cls, call):
        return KernelEntry(("meta", call.dtypes["x"]), lambda: (lambda x, weight, normalized_shape, eps, out=None: None))


def tileops_register(registrar):
    registrar.backend("metaback", device_types=("meta",), core_major={CORE_MAJOR})
    registrar.arch_detector("meta", lambda device: "meta_v1")
    registrar.kernels(MetaRMSNorm)
"""

FIRST_CALL = """
import warnings
warnings.simplefilter("error")  # a fallback warning would fail the call
import torch
from tileops_core.ops.normalization import RMSNormFwdOp, RMSNormKernel

op = RMSNormFwdOp(normalized_shape=[64])  # the first op instance of the process
y = op(torch.empty(4, 64, device="meta"), torch.empty(64, device="meta"))
kernels = op.last_plan.bound[None].kernels
print(kernels[RMSNormKernel].qualname(), op.last_plan.call_specs[RMSNormKernel].arch, tuple(y.shape), y.device)
"""


def _install(site: Path) -> None:
    (site / "metaplug").mkdir()
    (site / "metaplug" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    info = site / "tileops_metaplug-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tileops-metaplug\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[tileops]\nmetaplug = metaplug\n")


def test_first_call_of_a_fresh_process_selects_the_plugin_kernel_with_the_arch_its_detector_names(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install(site)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEOPS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-c", FIRST_CALL], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["metaplug:MetaRMSNorm", "meta_v1", "(4,", "64)", "meta"]


@pytest.mark.usefixtures("fresh_registry")
def test_a_plugin_loaded_after_a_call_makes_the_cached_plan_again(tmp_path, monkeypatch):
    import importlib

    (tmp_path / "late_metaplug.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("late_metaplug")
    op = RMSNormFwdOp(normalized_shape=[64])
    x, w = torch.empty(4, 64, device="meta"), torch.empty(64, device="meta")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference on meta: the fallback warning is not the point here
        op(x, w)
    assert op.last_plan.call_specs[RMSNormKernel].arch == "unknown"
    assert op.last_plan.bound[None].kernels[RMSNormKernel].general
    record = plugins.register_plugin(module, name="late_metaplug")
    assert record.status == "loaded", record.reason
    op(x, w)
    assert op.last_plan.call_specs[RMSNormKernel].arch == "meta_v1"
    assert op.last_plan.bound[None].kernels[RMSNormKernel].qualname() == "late_metaplug:MetaRMSNorm"


def test_a_kernel_that_raises_is_named_with_its_backend_and_call_spec(fake_backend):
    def broken(x, weight, normalized_shape, eps):
        raise ZeroDivisionError("tile size 0")

    impl = fake_backend.kernel(RMSNormKernel, broken, general=False)
    op = RMSNormFwdOp(normalized_shape=[8])
    with pytest.raises(KernelError) as info:
        op(torch.randn(2, 8), None)
    message = str(info.value)
    assert message.startswith(f"RMSNormFwdOp: kernel {impl.qualname()} [fake] raised ZeroDivisionError: tile size 0\n"
                              "  call spec: CallSpec(RMSNormFwdOp.RMSNormKernel on cpu/cpu")
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_a_writes_outputs_kernel_gets_outputs_of_the_planned_shape_dtype_and_device(fake_backend):
    seen = []

    def into(x, weight, normalized_shape, eps, out=None):
        seen.append((tuple(out.shape), out.dtype, out.device, out.is_contiguous()))
        out.copy_(x * 2)

    fake_backend.kernel(RMSNormKernel, into, general=False, writes_outputs=True)
    op = RMSNormFwdOp(normalized_shape=[8])
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    y = op(x, None)
    assert seen == [((3, 8), torch.bfloat16, torch.device("cpu"), True)]
    assert torch.equal(y, x * 2)
    assert y.untyped_storage()._cdata != x.untyped_storage()._cdata


def test_binding_an_op_class_from_many_threads_makes_one_definition_and_one_torch_library_op():
    import threading

    from tileops_core.op.base import Op
    from tileops_core.op.definition import definition_of

    # Defined under another name and bound to RMSNormFwdOp's spec by name: __init_subclass__
    # binds eagerly, so build the class unbound first (abstract), then race the binding.
    cls = type("RMSNormFwdOp", (Op,), {"interfaces": (RMSNormKernel,), "abstract": True})
    got: list[object] = []
    barrier = threading.Barrier(8)

    def bind() -> None:
        barrier.wait()
        got.append(definition_of(cls))

    threads = [threading.Thread(target=bind) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(d is got[0] for d in got)
    qualname = got[0].boundary.qualname  # type: ignore[attr-defined]
    same = [s.name for s in torch._C._jit_get_all_schemas() if s.name.startswith("tileops::rms_norm_fwd_op")]
    assert same.count(qualname) == 1
