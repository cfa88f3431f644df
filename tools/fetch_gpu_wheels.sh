#!/usr/bin/env bash
# Downloads into .whl/ the pure-Python wheels the GPU machine lacks (it has no network):
# nox, scikit-build-core, pytest, expecttest and their dependencies, for its Python 3.12.
# .whl/ is ignored by git (add '/.whl/' to .git/info/exclude) and travels with `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl nox scikit-build-core pytest expecttest ninja
ls .whl
