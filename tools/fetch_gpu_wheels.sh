#!/usr/bin/env bash
# Downloads into .whl/ the pure-Python wheels the GPU machine lacks (it has no network):
# nox, scikit-build-core, pytest, expecttest and their dependencies, flag-gems and sqlalchemy,
# and the model zoo's diffusers, for its Python 3.12.
# .whl/ is ignored by git (add '/.whl/' to .git/info/exclude) and travels with `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
download() {
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 "$@"
}
# --newest: into .whl-newest/ instead, the newest releases the noxfile's ranges allow of
# transformers, accelerate and compressed-tensors, and what they need that the GPU machine
# lacks or has too old (huggingface-hub 2, kernels, pydantic, ...); tools/gpu_check.sh
# newest puts them before the machine's own packages.
if [[ ${1:-} == --newest ]]; then
  grep -qx '/.whl-newest/' .git/info/exclude 2>/dev/null || echo '/.whl-newest/' >> .git/info/exclude
  ranges=$(python3 -c "import ast
v = {}
for n in ast.parse(open('noxfile.py').read()).body:
    if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name):
        try:
            v[n.targets[0].id] = ast.literal_eval(n.value)
        except ValueError:
            pass
print(' '.join(s for s in [*v['MODEL_ZOO'], v['COMPRESSED_TENSORS']] if not s.startswith('diffusers')))")
  # shellcheck disable=SC2086
  download --no-deps -d .whl-newest $ranges "huggingface-hub>=2.4,<3" "kernels>=0.19.1,<0.20" \
    tomlkit pydantic==2.14.4 pydantic-core==2.50.5 annotated-types typing-inspection loguru \
    "regex>=2025.10.22" httpx2 httpcore2 anyio truststore h11 "typing-extensions>=4.16"
  ls .whl-newest
  exit 0
fi
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
# The ONNX exporter and the sim graph compiler (whole-graph offload, noxfile OFFLOAD), without
# dependencies beyond their own small ones (numpy and typing-extensions are on the machine).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl onnx==1.23.2 onnxscript==0.7.2 onnx-ir==1.1.0 \
  ml_dtypes==0.7.0 protobuf==7.36.2
ls .whl
