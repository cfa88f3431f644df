#!/usr/bin/env bash
# Downloads into .whl/ the pure-Python wheels the GPU machine lacks (it has no network):
# nox, scikit-build-core, pytest, expecttest and their dependencies, flag-gems and sqlalchemy,
# for its Python 3.12.
# .whl/ is ignored by git (add '/.whl/' to .git/info/exclude) and travels with `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl nox scikit-build-core pytest expecttest ninja
# FlagGems for the gems provider, without its pinned dependencies (numpy, PyYAML and
# packaging are on the machine; its pins would replace them); sqlalchemy it imports.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl flag-gems==5.0.2 sqlalchemy==2.0.48 greenlet
ls .whl
