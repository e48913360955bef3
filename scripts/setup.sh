#!/usr/bin/env bash
# Make (or refresh) .venv with everything TileOPs needs on a CPU machine: the CPU build of
# torch 2.13.0, the core and every backend installed editable, and the test tools.
# Idempotent: a second run only re-checks what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)
# The CPU build, pinned: an unpinned torch would pull a multi-GB CUDA build.
"${pip[@]}" torch==2.13.0
"${pip[@]}" -e ./backends/cpu_ref -e ".[dev]" -e ./backends/ascend
# The CUDA backend's plugin imports without tilelang or a GPU; tilelang (large) is only
# needed where kernels are built, so it is not installed here.
"${pip[@]}" --no-deps -e ./backends/cuda
# The Hugging Face integration's tests and the README's demo (the [transformers] extra), pinned to
# the version CI tests. transformers does not depend on torch, so the CPU torch above stays.
"${pip[@]}" transformers==5.24.0
