#!/usr/bin/env bash
# In-tree development build of flagos_distributed._C: configures CMakeLists.txt once in
# build/dev, rebuilds incrementally, and copies the module next to the Python package so
# that PYTHONPATH=packages/flagos-distributed/python picks it up. Wheels are built by
# scikit-build-core (pip install --no-build-isolation ./packages/flagos-distributed).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PY=${PYTHON:-python3}
mkdir -p "$HERE/build/dev"
exec 9>"$HERE/build/dev/.lock"
flock 9
if [[ ! -f "$HERE/build/dev/CMakeCache.txt" ]]; then
  GEN=()
  command -v ninja >/dev/null && GEN=(-G Ninja)
  cmake -S "$HERE" -B "$HERE/build/dev" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$(command -v "$PY")" >/dev/null
fi
cmake --build "$HERE/build/dev" -j "${JOBS:-2}"
cp "$HERE"/build/dev/_C*.so "$HERE/python/flagos_distributed/"
echo "built $(ls "$HERE"/python/flagos_distributed/_C*.so)"
