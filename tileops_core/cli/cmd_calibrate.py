"""``tileops calibrate``: measure a device's memory bandwidth and matmul FLOP/s, write a profile.

The profile it prints (YAML, or JSON with ``--format json``) has this machine's measured
figures and the datasheet peaks of the profile that already describes the device. Save
it with ``--out FILE`` (then pass ``tileops bench --profile FILE``) or ``--save`` (into the
user profile directory, where ``tileops bench`` finds it for this device by itself); a file
is replaced whole or not at all (:mod:`.output`).

Exit codes: 0 written (or printed); 1 a file could not be written; 2 a usage error (a size
or dtype it cannot measure, a device not here, an ``--out`` that is no ``.yaml`` file or lies
under a file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..bench.calibrate import CalibrationSizes, calibrate, default_sizes
from ..bench.catalog import UsageError
from ..bench.profiles import device_name, dump_profile, profile_for, user_profile_dir
from ..bench.timing import DEFAULT, QUICK
from .main import EXIT_FINDINGS, EXIT_OK
from .output import check_output_path, replacing
from .usage import parse_device, usage_error

__all__ = ["NAME", "HELP", "add_arguments", "run"]

NAME = "calibrate"
HELP = "measure a large copy and a large matmul on a device and print (or save) its hardware profile"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", metavar="D", help="cpu (default), cuda, cuda:N")
    parser.add_argument("--copy-mib", type=int, metavar="MIB", help="size of the copied buffer (default: 1024 on a "
                                                                    "GPU, 256 on a CPU)")
    parser.add_argument("--matmul-n", type=int, metavar="N", help="matmul size n x n x n (default: 8192 GPU, 1024 CPU)")
    parser.add_argument("--dtype", action="append", metavar="DTYPE",
                        help="matmul dtype, repeatable (default: bfloat16, float16, float32 on a GPU; float32 on a CPU)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--out", metavar="FILE", help="write the profile to FILE (.yaml)")
    parser.add_argument("--save", action="store_true", help="write it into the user profile directory "
                                                            f"({user_profile_dir()}), where bench finds it")
    parser.add_argument("--format", choices=("yaml", "json"), default="yaml", help="what to print on stdout")


def run(args: argparse.Namespace) -> int:
    from ..plugins import ensure_plugins_loaded

    ensure_plugins_loaded()  # plugin profiles give the peaks of devices they know
    try:
        device = parse_device(args.device)
        defaults = default_sizes(device.type)
        # (given sizes are taken as given, 0 included, and refused there: found in review, 0 meant the default)
        sizes = CalibrationSizes((args.copy_mib << 20) if args.copy_mib is not None else defaults.copy_bytes,
                                 args.matmul_n if args.matmul_n is not None else defaults.matmul_n,
                                 args.dtype or defaults.dtypes)
        if args.out and not args.out.endswith((".yaml", ".yml")):
            raise UsageError(f"--out writes a YAML profile; give a name ending in .yaml, got {args.out!r}")
        if args.out:
            check_output_path("--out", args.out)  # before calibrating, not after
    except UsageError as exc:
        return usage_error(NAME, str(exc))
    name = device_name(device)
    known = profile_for(device.type, name)
    if known is not None and known.profile.describes(device.type, name) != 2:
        known = None  # a generic profile's nominal figures are not this device's peaks
    print(f"calibrating {device} ({name}): copy {sizes.copy_bytes >> 20} MiB, matmul n={sizes.matmul_n} "
          f"in {', '.join(sizes.dtypes)}; peaks from {known.profile.name if known else 'no known profile'}",
          file=sys.stderr)
    profile = calibrate(device, sizes, QUICK if args.quick else DEFAULT, known.profile if known else None)
    text = dump_profile(profile)
    if args.format == "json":
        print(json.dumps(profile.model_dump(exclude_none=True), indent=2))
    else:
        print(text, end="")
    targets = ([Path(args.out)] if args.out else []) + ([user_profile_dir() / f"{profile.name}.yaml"]
                                                        if args.save else [])
    code = EXIT_OK
    for target in targets:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with replacing(target) as temporary:
                temporary.write_text(text)
            print(f"wrote {target}", file=sys.stderr)
        except OSError as exc:
            print(f"tileops calibrate: cannot write {target}: {exc.strerror or exc}", file=sys.stderr)
            code = EXIT_FINDINGS
    return code
