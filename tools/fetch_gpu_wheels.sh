#!/usr/bin/env bash
# Downloads into .whl/ the pure-Python wheels the GPU machine lacks (it has no network):
# nox, scikit-build-core, pytest, expecttest and their dependencies, flag-gems and sqlalchemy,
# and the model zoo's diffusers, for its Python 3.12.
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
# The model zoo's diffusers (the machine has transformers 5.17, which needs
# huggingface-hub <2, and no diffusers, which needs >=1.32) and what diffusers imports
# that transformers does not (requests, Pillow): without dependencies, so the machine's
# own packages (torch above all) stay as they are.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl diffusers==0.42.1 huggingface-hub==1.33.0 \
  click hf-xet importlib_metadata zipp pillow requests charset_normalizer idna urllib3 certifi
# accelerate for from_pretrained(..., device_map="flagos") in flagos-quant's tests and
# benchmark (without dependencies: torch stays the machine's), and psutil, which it imports.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl accelerate==1.15.0 psutil
ls .whl
