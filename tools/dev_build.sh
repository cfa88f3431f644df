#!/usr/bin/env bash
# Incremental in-tree build of flagos-core's C++ extension for development:
# compiles changed csrc/*.cpp into build/dev/ and links python/flagos/_C*.so, so that
# PYTHONPATH=packages/flagos-core/python picks it up (flagos-hal installed with pip: its
# HAL libraries are built only into an installation).
# Serialized with flock so concurrent callers never link a half-built library.
# (Wheels are built by scikit-build-core through CMakeLists.txt; this is only a fast loop.)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CORE="$ROOT/packages/flagos-core"
OUT="$CORE/build/dev"
mkdir -p "$OUT"
exec 9>"$OUT/.lock"
flock 9
PY=${PYTHON:-python3}
TORCH_DIR=$($PY -c "import torch,os;print(os.path.dirname(torch.__file__))")
PYINC=$($PY -c "import sysconfig;print(sysconfig.get_paths()['include'])")
ABI=$($PY -c "import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))")
SUFFIX=$($PY -c "import sysconfig;print(sysconfig.get_config_var('EXT_SUFFIX'))")
# The C++ standard torch builds its extensions with (CMakeLists.txt): 20 from torch 2.12.
STD=$($PY -c "import torch; v=tuple(int(x) for x in torch.__version__.split('+')[0].split('.')[:2]); print('c++20' if v >= (2, 12) else 'c++17')")
FLAGS=(-std=$STD -O2 -g0 -fPIC -Wall -Wno-unused-parameter -Wno-sign-compare -I"$CORE/csrc" -I"$CORE/python/flagos/include"
       -I"$ROOT/packages/flagos-hal/include" -I"$TORCH_DIR/include"
       -I"$TORCH_DIR/include/torch/csrc/api/include" -I"$PYINC"
       -DTORCH_EXTENSION_NAME=_C -DTORCH_API_INCLUDE_EXTENSION_H -D_GLIBCXX_USE_CXX11_ABI=$ABI)
objs=()
fail=
pids=()
cd "$CORE"
for src in $(find csrc -name '*.cpp' | sort); do
  obj="$OUT/$(echo "$src" | tr / _).o"
  objs+=("$obj")
  newest_header=$(find csrc -name '*.h' -newer "$obj" 2>/dev/null | head -1 || true)
  if [[ ! -f "$obj" || "$src" -nt "$obj" || -n "$newest_header" ]]; then
    echo "compiling $src"
    g++ "${FLAGS[@]}" -c "$src" -o "$obj.tmp" && mv "$obj.tmp" "$obj" &
    pids+=($!)
    if (( ${#pids[@]} >= ${JOBS:-2} )); then wait "${pids[0]}" || fail=1; pids=("${pids[@]:1}"); fi
  fi
done
for p in "${pids[@]}"; do wait "$p" || fail=1; done
if [[ -n "${fail:-}" ]]; then echo "dev_build: compilation failed" >&2; exit 1; fi
g++ -shared -o "$CORE/python/flagos/_C$SUFFIX.tmp" "${objs[@]}" -L"$TORCH_DIR/lib" -lc10 -ltorch \
  -ltorch_cpu -ltorch_python -Wl,-rpath,"$TORCH_DIR/lib"
mv "$CORE/python/flagos/_C$SUFFIX.tmp" "$CORE/python/flagos/_C$SUFFIX"
# What a wheel records at build time (CMakeLists.txt): the torch compiled against.
$PY -c "import torch; print(f'\"\"\"Written when flagos-core was built.\"\"\"\\n\\nTORCH_VERSION = \"{torch.__version__}\"')" \
  > "$CORE/python/flagos/_build_info.py"
echo "built $CORE/python/flagos/_C$SUFFIX"
