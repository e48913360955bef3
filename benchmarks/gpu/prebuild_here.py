"""Compile the attention GPU tests' kernels on this CPU machine, into a TileLang cache that the device carries.

A device call starts on a fresh machine with an empty kernel cache, so the first minutes of a test section are
compiling: the prefill tests' prebuild took 108 s of their 126 s on an H100 (forty-ninth session). TileLang's
disk cache keys a kernel by its PrimFunc's script, the target, the pass configs and TileLang's version, not by
the machine, and the executable it stores links nothing but libc, so kernels compiled here for ``sm_90a`` (nvcc 13
here and there) can be loaded there. This script runs the prebuild fixtures of the named test modules (each
module's ``prebuilt(arch, prebuild_all)``, so the keys are exactly the ones the tests build; the modules read
``PREFILL_TEST_SETTINGS`` as they do on the device) with ``TILELANG_CACHE_DIR`` pointing at a fresh directory,
then packs it into ``.device/tlcache.tar.xz``, which ``prefix.sh`` unpacks into the device's cache. A key that
misses there is compiled there as before; nothing depends on a hit.

Run from the repository root with the project's venv and tilelang 0.1.15 beside it (nvcc on the PATH), e.g.
``PATH=/usr/local/bin:$PATH PYTHONPATH=/work/tlvenv/lib/python3.11/site-packages .venv/bin/python
benchmarks/gpu/prebuild_here.py prefill``
(module names: ``prefill``, ``decode``, ``decode_small``, ``rgdr_table`` for the RGDR bench's kernels, and
``sweep:ONLY[:MOST[:FIELD]]`` for a ``layer_ops_sweep.py --only ONLY --candidates MOST --with-field FIELD`` call's;
``--keep`` adds to the archive instead of replacing it). A new checkout has no ``.device``: ``prepare_here.sh`` runs
this script with the targets of the queued calls. The prefill module with two settings
(``PREFILL_TEST_SETTINGS=default,overlap-writes-caches``) took 457 s on two cores: 26 kernels, 0.5 MiB packed,
and a build here from the unpacked archive loaded in 1.5 s, not compiled. The decode modules added to it
(``--keep decode decode_small``) compiled 32 more kernels in 97 s (58 in all, 1.4 MiB).

Kernels no test module's fixture names (the conv tests build theirs test by test) can come back from a device
call instead: ``KEEP_KERNELS=1 bash benchmarks/gpu/run.sh ...`` packs the kernels the call compiled into
``$OUT/tlcache_new.tar.xz`` (beside the call's ``logs.tar.gz``), and ``--merge`` adds them to the archive here.
Keep the archive and the bundle under the 64 MiB that travels (the bundle is 45 MiB).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULES = {"prefill": "test_attention_prefill_gpu", "decode": "test_attention_gpu",
           "decode_small": "test_attention_decode_small_batch_gpu"}
#: The arch the device's ``cuda_device`` fixture reports on an H100 or H200.
DEVICE_ARCH = "sm_90"


def _prebuild(module_name: str) -> None:
    """Run ``module_name``'s prebuild fixture body as its tests would on the device."""
    module = importlib.import_module(module_name)
    fixture = module.prebuilt
    body = getattr(getattr(fixture, "__pytest_wrapped__", None), "obj", None) or getattr(fixture, "__wrapped__", None)
    if body is None:
        raise SystemExit(f"{module_name}.prebuilt: cannot reach the fixture's function (pytest changed?)")
    body(DEVICE_ARCH, True)


def _prebuild_rgdr_table() -> None:
    """Compile the RGDR kernels ``bench_cuda.py`` builds before any row (``cuda_bench_common.rgdr_workload_keys``'
    default schedules). The programs only: ``build_rgdr`` would also make the launcher, which asks the GPU for its SM
    count."""
    sys.path.insert(0, str(ROOT / "backends" / "cuda" / "bench"))
    from cuda_bench_common import rgdr_workload_keys
    from tileops_cuda.kernels._common import compile_many, compile_prim_func
    from tileops_cuda.kernels.rgdr import default_schedule
    from tileops_cuda.kernels.rgdr_program import rgdr_program

    thunks = [lambda k=k, t=t: compile_prim_func(rgdr_program(k, t), k.arch)
              for k in rgdr_workload_keys() for t in default_schedule(k).tilings()]
    bad = [r for r in compile_many(thunks) if isinstance(r, Exception)]
    if bad:
        raise SystemExit(f"rgdr_table: {len(bad)} of {len(thunks)} builds failed; the first: {bad[0]!r}")


def _prebuild_sweep(only: str, most: int | None, with_field: str = "") -> None:
    """Compile the candidates ``layer_ops_sweep.py --only ONLY [--candidates MOST [--with-field FIELD]]`` builds on
    the device before it times any (the registered keys, flipped, then the candidates of every matching entry), for
    the arch the device reports: the conv sweep compiles every candidate first, most of a conv call's minutes on an
    empty cache."""
    sys.path.insert(0, str(ROOT / "backends" / "cuda" / "bench"))
    from layer_ops_sweep import build_all, plan_sweep

    rows = plan_sweep(DEVICE_ARCH, only, most, with_field=with_field)
    if not rows:
        raise SystemExit(f"sweep:{only}: no sweep entry matches")
    build_all(rows)
    # A candidate that fails to build here fails there too, where the sweep reports it: the others are still kept.
    for r in rows:
        for c in r.candidates:
            if isinstance(c.fn, Exception) and not str(c.fn).startswith("refused:"):
                print(f"sweep:{only}: {r.op} {r.label} {c.name} failed: {str(c.fn)[:200]}", flush=True)


def _sweep_target(name: str) -> Callable[[], None] | None:
    """``sweep:ONLY``, ``sweep:ONLY:MOST`` or ``sweep:ONLY:MOST:FIELD`` (the ``--only``, ``--candidates`` and
    ``--with-field`` of a device call's ``layer_ops_sweep.py``: ``sweep:CausalConv1d`` for ``run.sh conv``,
    ``sweep:MoETopK:2`` for ``routesweep`` with ``ROUTE_CANDIDATES=2``), or None for another name."""
    parts = name.split(":")
    if parts[0] != "sweep" or len(parts) not in (2, 3, 4) or not parts[1] or \
            (len(parts) >= 3 and not parts[2].isdigit()) or (len(parts) == 4 and not parts[3]):
        return None
    return functools.partial(_prebuild_sweep, parts[1], int(parts[2]) if len(parts) >= 3 else None,
                             parts[3] if len(parts) == 4 else "")


#: Targets that are no test module, by name: the RGDR kernels ``bench_cuda.py --no-sweep --no-others`` (``run.sh
#: rgdrtable``) compiles first, 22 of them in 32 s of an H100 call (s51e); and ``sweep:ONLY[:MOST[:FIELD]]``, a
#: ``layer_ops_sweep.py`` call's candidates (``_sweep_target``).
BENCH_TARGETS = {"rgdr_table": _prebuild_rgdr_table}


def _target(name: str) -> Callable[[], None] | None:
    """The function that compiles target ``name``'s kernels, or None where no module or target has that name."""
    if name in MODULES:
        return functools.partial(_prebuild, MODULES[name])
    return BENCH_TARGETS.get(name) or _sweep_target(name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="*", help="test modules whose kernels to compile: "
                    f"{', '.join(sorted(MODULES))}; or {', '.join(BENCH_TARGETS)}; or sweep:ONLY[:MOST[:FIELD]] "
                    "(a layer_ops_sweep.py call's candidates)")
    ap.add_argument("--out", default=str(ROOT / ".device" / "tlcache.tar.xz"))
    ap.add_argument("--keep", action="store_true",
                    help="start from the kernels already in --out, so the archive holds both (a union, not a rebuild)")
    ap.add_argument("--merge", nargs="+", default=[], metavar="ARCHIVE",
                    help="add the kernels of these archives (a device call's tlcache_new.tar.xz, from run.sh "
                         "with KEEP_KERNELS=1) to --out's, compiling nothing")
    args = ap.parse_args()
    if not args.modules and not args.merge:
        ap.error("name test modules to compile, or --merge archives")
    targets = {name: _target(name) for name in args.modules}
    unknown = [name for name, target in targets.items() if target is None]
    if unknown:
        ap.error(f"no test module {unknown}; the modules: {sorted(MODULES)}, {list(BENCH_TARGETS)}, and "
                 "sweep:ONLY[:MOST[:FIELD]]")
    sys.path.insert(0, str(ROOT / "backends" / "cuda" / "tests"))  # the test modules and their helpers
    with tempfile.TemporaryDirectory(prefix="tlcache-") as cache:
        os.environ["TILELANG_CACHE_DIR"] = cache  # before tilelang is imported
        for archive in ([args.out] if (args.keep or args.merge) and Path(args.out).exists() else []) + args.merge:
            with tarfile.open(archive) as tar:
                tar.extractall(cache, filter="data")
        t0 = time.time()
        for name, target in targets.items():
            assert target is not None  # the unknown names ended the run above
            target()
            print(f"{name}: compiled by {time.time() - t0:.0f} s", flush=True)
        entries = sorted(p.parent.name for p in Path(cache).rglob("executable.so"))
        if not entries:
            raise SystemExit("nothing compiled: no executable.so in the cache (see the errors above)")
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        with tarfile.open(partial, "w:xz") as tar:
            tar.add(cache, arcname=".")
        partial.replace(out)  # never a half-written archive where prefix.sh looks
    print(f"{out}: {len(entries)} kernels, {out.stat().st_size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
