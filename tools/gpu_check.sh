#!/usr/bin/env bash
# Builds flagos against the GPU machine's own torch and runs the CUDA checks, logging under
# $OUT (the device tool's output folder). Wheels the machine lacks are carried in .whl/
# (tools/fetch_gpu_wheels.sh fetches them; name .whl in the run's carry).
# Usage: tools/gpu_check.sh STEP...   steps: build conformance demo bench model sweep suite tests
#        report warm kernel-cache routes admit
#        cuda-faults nox compile dist profile gems gems-tests gems-bench gems-model gems-sweep
#        gems-no-twin gems-sweep-no-twin no-twin model-no-twin zoo zoo-gems native qwen-image
#        newest
#        tune tune-tests quant quant-sweep mxfp4 faults graphs
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/flagos-out}; mkdir -p "$OUT"
if [[ -d .whl ]]; then
  # once per machine (a step may run this script again, and a warm machine keeps /tmp)
  [[ -f /tmp/site/.installed ]] || { python3 -m pip install -q --no-index --no-deps --no-compile \
    --target /tmp/site .whl/*.whl && touch /tmp/site/.installed; }
  export PYTHONPATH=/tmp/site
fi
step() { echo "=== $1 ($(date +%T))"; }
# The commit the result tables name (FLAGOS_COMMIT: the copied tree's git may be older).
[[ -n ${FLAGOS_COMMIT:-} ]] && export FLAGOS_BENCH_COMMIT=${FLAGOS_BENCH_COMMIT:-$FLAGOS_COMMIT}
# The command the suite's table names: the outermost call's (steps call this script again).
export SUITE_COMMAND=${SUITE_COMMAND:-tools/gpu_check.sh $*}
KERNEL_CACHE=/tmp/kernel-cache
if [[ ! -d $KERNEL_CACHE ]]; then
  mkdir -p $KERNEL_CACHE/triton $KERNEL_CACHE/flaggems
  if compgen -G ".gpu-cache/kernel-cache.txz.*" > /dev/null; then
    cat .gpu-cache/kernel-cache.txz.* | tar xJf - -C $KERNEL_CACHE && echo "kernel caches from .gpu-cache"
  fi
fi
export TRITON_CACHE_DIR=$KERNEL_CACHE/triton FLAGGEMS_CACHE_DIR=$KERNEL_CACHE/flaggems
for s in "$@"; do
  case $s in
    build)
      step build
      nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__, 'cuda devices', torch.cuda.device_count())"
      # A warm machine keeps what it built: the same package sources are not built again.
      sources=$(find packages \( -name build -o -name __pycache__ -o -name tests -o -name '*.egg-info' \) -prune \
                -o -type f -not -name '*.so' -not -name _build_info.py -print0 \
                | sort -z | xargs -0 sha1sum | sha1sum | cut -c1-16)
      if [[ -f /tmp/flagos-built && $(cat /tmp/flagos-built) == "$sources" ]]; then
        echo "built already (package sources $sources)"; continue
      fi
      build_one() {
        [[ -f packages/$1/pyproject.toml ]] || return 0
        CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps "./packages/$1" \
          > "$OUT/build-$1.log" 2>&1 && echo "built $1" \
          || { echo "BUILD FAILED $1"; tail -30 "$OUT/build-$1.log"; touch /tmp/flagos-build-failed; }
      }
      rm -f /tmp/flagos-build-failed /tmp/flagos-built
      # flagos-hal's headers, then core's extension, before the packages that build against them.
      build_one flagos-hal; build_one flagos-core
      for p in flagos-ops-boxing flagos-ops-gems flagos-ops-native flagos-quant flagos-distributed flagos-compile; do
        build_one $p &
      done
      wait
      [[ -f /tmp/flagos-build-failed ]] || echo "$sources" > /tmp/flagos-built ;;
    native) step native  # after build: flagos-ops-native against this torch; sim tests, cuda routes
      CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps ./packages/flagos-ops-native \
        > "$OUT/build-flagos-ops-native.log" 2>&1 && echo "built flagos-ops-native" \
        || { echo "BUILD FAILED flagos-ops-native"; tail -30 "$OUT/build-flagos-ops-native.log"; }
      FLAGOS_HAL=cuda timeout 120 python3 -c "import torch, flagos; print(flagos.routing.explain('aten::mm.out'))" \
        2>&1 | tee "$OUT/native-cuda-routes.log" | tail -12
      FLAGOS_HAL=sim FLAGOS_NO_TWIN=1 timeout 400 python3 -m pytest -q -p no:cacheprovider \
        packages/flagos-ops-native/tests 2>&1 | tee "$OUT/native-tests.log" | tail -5
      FLAGOS_HAL=sim timeout 300 python3 packages/flagos-ops-native/benchmarks/native_overhead.py \
        2>&1 | tee "$OUT/native-bench.log" | tail -14
      FLAGOS_HAL=cuda timeout 300 python3 packages/flagos-ops-native/benchmarks/cublas_vs_boxing.py \
        2>&1 | tee "$OUT/native-cublas.log" | tail -24 ;;
    # The fault sweep (sim HAL, this machine's torch) and the memory soak on the CUDA HAL.
    faults) step faults; FLAGOS_HAL=sim timeout 400 python3 integration_tests/fault_sweep.py --first 3 \
             --json "$OUT/fault-sweep-sim.json" 2>&1 | tee "$OUT/faults.log" | tail -4
            FLAGOS_HAL=cuda timeout 300 python3 integration_tests/memory_soak.py --steps 1000 \
             --json "$OUT/memory-soak-cuda.json" 2>&1 | tee -a "$OUT/faults.log" | tail -3 ;;
    conformance) step conformance; python3 -m flagos_hal.conformance --hal cuda 2>&1 | tee "$OUT/conformance.log" | tail -8 ;;
    demo) step demo; FLAGOS_HAL=cuda timeout 300 python3 -m flagos.demo 2>&1 | tee "$OUT/demo.log" | tail -30 ;;
    qwen-image) step qwen-image; FLAGOS_HAL=cuda timeout ${QWEN_TIMEOUT:-300} python3 integration_tests/models/qwen_image_bench.py \
             --json "$OUT/qwen-image.json" 2>&1 | tee "$OUT/qwen-image.log" | tail -8 ;;
    # The newest releases of the libraries flagos integrates with (docs/compat.md), carried
    # in .whl-newest/ (tools/fetch_gpu_wheels.sh --newest) and put before the machine's own
    # for these folders only: the quantized checkpoints, the model zoo, the training steps.
    # Run it on a machine a suite step has set up (builds, /tmp/site), carrying .whl-newest
    # alone: with .whl as well the carry passes the device tool's 64 MiB.
    newest) step newest; J=/tmp/newest; rm -rf $J; mkdir -p $J
      [[ -f /tmp/site-newest/.installed ]] || { python3 -m pip install -q --no-index --no-deps \
        --no-compile --target /tmp/site-newest .whl-newest/*.whl && touch /tmp/site-newest/.installed; }
      libs=$(PYTHONPATH=/tmp/site-newest:${PYTHONPATH:-} python3 -c "import importlib.metadata as m
print(', '.join(f'{d} {m.version(d)}' for d in ('transformers', 'diffusers', 'accelerate', 'kernels',
      'huggingface_hub', 'safetensors', 'compressed-tensors', 'flag-gems')))")
      echo "libraries: $libs"
      for f in packages/flagos-quant/tests integration_tests/models integration_tests/test_model.py; do
        n=$(echo "$f" | tr '/' '-' | sed 's/-tests$//; s/\.py$//')
        ( FLAGOS_HAL=cuda FLAGOS_TEST_HW=cuda HF_HUB_OFFLINE=1 PYTHONPATH="/tmp/site-newest:$PWD/tools/pytest_plugins:${PYTHONPATH:-}" \
          timeout -k 10 ${NEWEST_TIMEOUT:-400} python3 -X faulthandler -m pytest -v -p no:cacheprovider -p flagos_instafail \
          -n ${SUITE_XDIST:-4} --junitxml=$J/$n.xml "$f" > $J/$n.log 2>&1; echo $? > $J/$n.rc
          echo "$n: exit $(cat $J/$n.rc), $(tail -1 $J/$n.log)" ) &
      done
      wait
      python3 tools/suite_report.py --junit-dir $J --hal cuda --benchmark cuda-newest-libraries \
        --title "The newest library releases on the cuda HAL: quantized checkpoints, model zoo, training steps" \
        --note "Libraries: $libs." --machine "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
        --command "tools/gpu_check.sh newest" --json "$OUT/cuda-newest-libraries.json" | tee "$OUT/newest.log"
      tar czf "$OUT/newest.tgz" -C $J . ;;
    # The benchmarks page's cuda table (docs/bench/results/cuda-nvidia-h200/flagos-bench.json).
    bench) step bench; FLAGOS_HAL=cuda timeout ${BENCH_TIMEOUT:-400} python3 -m flagos.bench --only ops,layers,model \
             --routes boxing --json "$OUT/flagos-bench.json" 2>&1 | tee "$OUT/bench.log" ;;
    model) step model; FLAGOS_HAL=cuda timeout 150 python3 -m flagos.bench --only model 2>&1 | tee "$OUT/model.log" ;;
    sweep) step sweep; FLAGOS_HAL=cuda timeout 420 python3 integration_tests/opinfo_sweep.py --route boxing \
             --max-samples 3 --jobs 14 --json "$OUT/sweep-cuda.json" > "$OUT/sweep.log" 2>&1; tail -40 "$OUT/sweep.log" ;;
    nox) step nox; PIP_NO_INDEX=1 PIP_FIND_LINKS="$PWD/.whl" timeout 580 python3 -m nox -s "tests(hw='cuda')" \
             2>&1 | tee "$OUT/nox.log" | tail -40 ;;
    # Everything the cuda suite's done-criteria need in one 10-minute command: build; then
    # one process compiles FlagGems' kernels of a training step (warm, at most WARM_BUDGET s)
    # while the seven folders that do not use FlagGems run; then the gems and integration
    # folders on the filled caches, with what is left of SUITE_BUDGET s (default 570); the
    # fault sweep beside it all; the kernel caches go back for the next machine.
    # FLAGOS_COMMIT names the commit in the tables (no .git there). SUITE_DEFER="integration"
    # leaves that folder to a next call on the warm machine (SUITE_APPEND=1
    # SUITE_FOLDERS=integration tools/gpu_check.sh tests), which adds it to the table.
    suite) step suite; t0=$(date +%s)
      "$0" build
      ( FAULT_FIRST=${FAULT_FIRST:-3} "$0" cuda-faults > /tmp/cuda-faults.out 2>&1 ) &
      ( WARM_TIMEOUT=${WARM_BUDGET:-200} "$0" warm > "$OUT/warm.log" 2>&1 ) & warm=$!
      left=$(( ${SUITE_BUDGET:-570} - ($(date +%s) - t0) ))
      echo "suite: ${left} s left after the build"
      SUITE_REPORT=0 SUITE_EXCEPT="gems integration" \
        SUITE_TIMEOUT=$(( left - 25 )) nice -n 5 "$0" tests &
      wait $warm; tail -4 "$OUT/warm.log"
      left=$(( ${SUITE_BUDGET:-570} - ($(date +%s) - t0) ))
      echo "suite: ${left} s left after the warm-up"
      late=" gems integration "; for d in ${SUITE_DEFER:-}; do late=${late/ $d / }; done
      SUITE_REPORT=0 SUITE_APPEND=1 SUITE_FOLDERS="$late" SUITE_TIMEOUT=$(( left - 25 )) \
        SUITE_XDIST=${SUITE_XDIST:-6} "$0" tests
      wait; tail -14 /tmp/cuda-faults.out
      "$0" report kernel-cache
      # the device tool brings back at most 8 files: all but the tables and the caches in one
      (cd "$OUT" && tar czf suite-files.tgz --remove-files build-*.log cuda-suite.log warm.log \
        warm-routes.json route-sweep-cuda-*.json cuda-faults.log 2>/dev/null) ;;
    # Kernel caches across machines: FlagGems compiles (and autotunes) each Triton kernel on
    # first use, into TRITON_CACHE_DIR and FLAGGEMS_CACHE_DIR, which this script points
    # under /tmp/kernel-cache, filled from .gpu-cache/ when the run carries it. kernel-cache
    # writes them back as kernel-cache.txz.* (parts under the tool's 16 MiB a file); put
    # them in .gpu-cache/ (ignored by git) and carry it. Triton loads a cached kernel from
    # its metadata (.json) and binary (.cubin) alone, and its group files list absolute
    # paths (hence the fixed folder): the intermediate IRs stay behind, they are most of
    # the bytes.
    kernel-cache) step kernel-cache
      find "$KERNEL_CACHE/triton" -type f \( -name '*.ttir' -o -name '*.ttgir' -o -name '*.llir' \
        -o -name '*.ptx' -o -name '*.source' \) -delete
      tar -I 'xz -T0 -9' -cf /tmp/kernel-cache.txz -C "$KERNEL_CACHE" . && rm -f "$OUT"/kernel-cache.txz.*
      split -b 15M /tmp/kernel-cache.txz "$OUT/kernel-cache.txz."; ls -l "$OUT"/kernel-cache.txz.* ;;
    # One process compiles the kernels of a training step through FlagGems, so that the
    # test processes do not all compile the same kernels at once.
    warm) step warm; FLAGOS_HAL=cuda timeout ${WARM_TIMEOUT:-400} python3 integration_tests/route_sweep.py \
             --memory host --only gems --jobs 1 --json "$OUT/warm-routes.json" 2>&1 | tail -8 ;;
    report) step report; python3 tools/suite_report.py --junit-dir /tmp/cuda-suite --hal cuda \
        --machine "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
        --command "$SUITE_COMMAND" --json "$OUT/cuda-suite.json" | tee "$OUT/cuda-suite.log"
      tar czf "$OUT/cuda-suite.tgz" -C /tmp/cuda-suite . ;;
    # The cuda suite: every test folder on the cuda HAL (one pytest each, as the noxfile
    # runs them), SUITE_JOBS folders at a time, each within SUITE_TIMEOUT s; JUnit files and
    # logs in $OUT/cuda-suite.tgz, the table in $OUT/cuda-suite.json (docs/benchmarks.md).
    tests) step tests; J=/tmp/cuda-suite; [[ ${SUITE_APPEND:-0} == 1 ]] || rm -rf $J; mkdir -p $J
      # The folders that take longest on a fresh machine (FlagGems compiles its kernels on
      # first use) run on several workers where pytest-xdist is installed.
      xdist() { python3 -c "import xdist" 2>/dev/null && [[ $1 == *gems* || $1 == integration_tests ]] \
                && echo "-n ${SUITE_XDIST:-4}"; }
      run_folder() {
        local f=$1 n; n=$(basename "$(dirname "$f")"); [[ $f == integration_tests ]] && n=integration_tests
        # flagos_instafail: a failure's traceback in the log at once (a folder may be cut off)
        FLAGOS_HAL=cuda FLAGOS_TEST_HW=cuda HF_HUB_OFFLINE=1 FLAGOS_ROUTE_SWEEP_JSON="$OUT/route-sweep-cuda" \
          PYTHONPATH="$PWD/tools/pytest_plugins${PYTHONPATH:+:$PYTHONPATH}" \
          timeout -k 10 ${SUITE_TIMEOUT:-500} python3 -X faulthandler -m pytest -v -p no:cacheprovider -p flagos_instafail \
          --durations=10 $(xdist "$f") -o faulthandler_timeout=$(( ${SUITE_TIMEOUT:-500} - 20 )) \
          --junitxml=$J/$n.xml "$f" > $J/$n.log 2>&1
        echo $? > $J/$n.rc; echo "$n: exit $(cat $J/$n.rc), $(tail -1 $J/$n.log)"
      }
      # SUITE_FOLDERS: only these, SUITE_EXCEPT: all but these (short names: core, gems,
      # integration, ...)
      short() { [[ $1 == integration_tests ]] && echo integration || basename "$(dirname "$1")" | sed 's/.*-//'; }
      folders=(); running=0
      for f in packages/*/tests integration_tests; do
        n=$(short "$f")
        [[ -z ${SUITE_FOLDERS:-} || " $SUITE_FOLDERS " == *" $n "* ]] || continue
        [[ " ${SUITE_EXCEPT:-} " == *" $n "* ]] && continue
        folders+=("$f")
      done
      for f in "${folders[@]}"; do
        run_folder "$f" & running=$((running + 1))
        if (( running >= ${SUITE_JOBS:-9} )); then wait -n; running=$((running - 1)); fi
      done
      wait
      [[ ${SUITE_REPORT:-1} == 0 ]] || "$0" report ;;
    # The route sweep and the fault sweep on the cuda HAL (benchmark-style JSON for the docs).
    routes) step routes; (cd integration_tests && FLAGOS_HAL=cuda timeout 500 python3 route_sweep.py --memory host \
             --jobs 6 --json "$OUT/route-sweep-cuda.json" 2>&1 | tee "$OUT/routes.log" | tail -30) ;;
    cuda-faults) step cuda-faults; FLAGOS_HAL=cuda timeout 500 python3 integration_tests/fault_sweep.py --hal cuda \
             --first ${FAULT_FIRST:-3} --json "$OUT/fault-sweep-cuda.json" 2>&1 | tee "$OUT/cuda-faults.log" | tail -12 ;;
    zoo) step zoo; FLAGOS_HAL=cuda FLAGOS_TEST_HW=cuda HF_HUB_OFFLINE=1 FLAGOS_ZOO_RESULTS="$OUT/zoo-cuda.json" \
           timeout 540 python3 -m pytest -q -p no:cacheprovider --durations=10 integration_tests/models \
           2>&1 | tee "$OUT/zoo.log" | tail -40
         python3 integration_tests/models/zoo_table.py "$OUT/zoo-cuda.json" | tee "$OUT/zoo-cuda.md" ;;
    zoo-gems) step zoo-gems  # a Transformers and a Diffusers model through the gems routes
      # FlagGems compiles and autotunes each kernel on first use (minutes on a fresh
      # machine, one compile at a time per process): one process per case, all at once, each
      # check's time logged as it ends, every thread's stack dumped once a test runs long
      for model in "UNet2DModel and not DDIM" DDIM Llama; do
        f=${model%% *}
        PYTHONPATH=/tmp/site FLAGOS_ROUTES_FILE=gems FLAGOS_HAL=cuda FLAGOS_TEST_HW=cuda HF_HUB_OFFLINE=1 \
          PYTHONUNBUFFERED=1 FLAGOS_ZOO_RESULTS="$OUT/zoo-gems-$f.json" timeout ${ZOO_GEMS_TIMEOUT:-500} \
          python3 -m pytest -v -p no:cacheprovider --log-cli-level=INFO -o faulthandler_timeout=450 \
          integration_tests/models/test_zoo.py -k "$model" > "$OUT/zoo-gems-$f.log" 2>&1 &
      done
      wait
      for f in UNet2DModel DDIM Llama; do
        tail -5 "$OUT/zoo-gems-$f.log"
        python3 integration_tests/models/zoo_table.py "$OUT/zoo-gems-$f.json" | tee "$OUT/zoo-gems-$f.md"
      done ;;
    compile) step compile; FLAGOS_HAL=cuda timeout ${COMPILE_TIMEOUT:-400} python3 packages/flagos-compile/benchmarks/compile_speedup.py --device cuda \
             2>&1 | tee "$OUT/compile.log" | tail -30 ;;
    profile) step profile; FLAGOS_HAL=cuda timeout 150 python3 tools/gpu_profile_model.py flagos 2>&1 | tee "$OUT/profile-flagos.log" | tail -60
             TORCH_DEVICE_BACKEND_AUTOLOAD=0 timeout 100 python3 tools/gpu_profile_model.py cuda 2>&1 | tee "$OUT/profile-cuda.log" | tail -30 ;;
    dist) step dist; FLAGOS_HAL=cuda timeout ${DIST_TIMEOUT:-300} python3 -X faulthandler packages/flagos-distributed/benchmarks/allreduce_bw.py \
             2>&1 | tee "$OUT/dist.log" | tail -30 ;;
    # FlagGems through flagos (flag-gems and sqlalchemy carried in .whl/, see fetch_gpu_wheels.sh).
    gems) step gems; FLAGOS_HAL=cuda timeout 300 python3 -c "
import time, flagos, torch
t = time.perf_counter(); p = flagos.routing.providers().get('gems'); print('gems provider:', p)
print('unavailable:', p and p.unavailable_on('cuda'), '(%.1fs to load FlagGems)' % (time.perf_counter() - t))
print('FlagGems ops served:', len(p.ops()) if p else 0)
flagos.routing.load('gems'); x = torch.randn(64, 64, device='flagos')
torch.testing.assert_close((x @ x + x).softmax(-1).cpu(), (x.cpu() @ x.cpu() + x.cpu()).softmax(-1), rtol=1e-3, atol=1e-4)
print(flagos.routing.explain('aten::mm')); print(flagos.routing.stats())" 2>&1 | tee "$OUT/gems.log" | tail -40
          FLAGOS_HAL=cuda timeout 200 python3 -m flagos info 2>&1 | tee "$OUT/gems-info.log" | grep -A2 "gems" ;;
    gems-tests) step gems-tests; FLAGOS_HAL=cuda FLAGOS_TEST_HW=cuda timeout 540 python3 -m pytest -v -p no:cacheprovider \
             --durations=10 packages/flagos-ops-gems/tests 2>&1 | tee "$OUT/gems-tests.log" | tail -40 ;;
    gems-bench) step gems-bench; FLAGOS_HAL=cuda timeout 560 python3 packages/flagos-ops-gems/benchmarks/gems_bench.py \
             --only host 2>&1 | tee "$OUT/gems-bench.log" | tail -20 ;;
    gems-model) step gems-model; FLAGOS_HAL=cuda timeout 560 python3 packages/flagos-ops-gems/benchmarks/gems_bench.py \
             --only model 2>&1 | tee "$OUT/gems-model.log" | tail -20 ;;
    gems-sweep) step gems-sweep; FLAGOS_HAL=cuda timeout 590 python3 packages/flagos-ops-gems/benchmarks/opinfo_vs_flaggems.py \
             --jobs 14 --max-samples ${SWEEP_SAMPLES:-3} --layouts "${SWEEP_LAYOUTS:-}" --json "$OUT/gems-sweep.json" --raw-json "$OUT/gems-sweep-raw.json" --log-dir "$OUT" > "$OUT/gems-sweep.log" 2>&1; tail -60 "$OUT/gems-sweep.log" ;;
    # The GPU as a chip without CUDA (FLAGOS_NO_TWIN=1): FlagGems on flagos tensors through
    # the HAL, its test, host cost beside FlagGems on CUDA tensors, the model step, the sweep.
    gems-no-twin) step gems-no-twin
      FLAGOS_HAL=cuda FLAGOS_TEST_HW=cuda timeout 300 python3 -m pytest -q -p no:cacheprovider \
             packages/flagos-ops-gems/tests/test_no_twin.py 2>&1 | tee "$OUT/gems-no-twin-tests.log" | tail -8
      FLAGOS_HAL=cuda FLAGOS_NO_TWIN=1 timeout 560 python3 packages/flagos-ops-gems/benchmarks/gems_bench.py \
             --only ${NO_TWIN_SECTIONS:-host} --json "$OUT/gems-no-twin-$(tr , - <<< "${NO_TWIN_SECTIONS:-host}").json" 2>&1 | tee "$OUT/gems-no-twin.log" | tail -24 ;;
    gems-sweep-no-twin) step gems-sweep-no-twin; FLAGOS_HAL=cuda timeout 590 python3 packages/flagos-ops-gems/benchmarks/opinfo_vs_flaggems.py \
             --no-twin --jobs 14 --max-samples ${SWEEP_SAMPLES:-3} --layouts "${SWEEP_LAYOUTS:-}" --json "$OUT/gems-sweep-no-twin.json" --raw-json "$OUT/gems-sweep-no-twin-raw.json" --log-dir "$OUT" > "$OUT/gems-sweep-no-twin.log" 2>&1; tail -60 "$OUT/gems-sweep-no-twin.log" ;;
    # The replay admission without a twin (flagos_ops_gems.replay_admission), for ADMIT_OPS
    # (default: a training step's ops, with ADMIT_SAMPLES OpInfo samples each: every new
    # shape of an autotuned op is compiled and tuned on first use, so each (op, dtype) is
    # checked in its own process, ADMIT_JOBS at a time, each stopped after ADMIT_TIMEOUT s,
    # all after ADMIT_DEADLINE s),
    # written into the installed package, so that the steps after it replay them, and under
    # $OUT (copy it to packages/flagos-ops-gems/python/flagos_ops_gems/replayable.toml);
    # then the kernel caches it filled, as kernel-cache.txz.* (put them in .gpu-cache/).
    admit) step admit
      FLAGOS_HAL=cuda FLAGOS_NO_TWIN=1 python3 -m flagos_ops_gems.replay_admission \
             --ops "${ADMIT_OPS:-training-step}" --max-samples ${ADMIT_SAMPLES:-2} \
             --jobs ${ADMIT_JOBS:-12} --task-timeout ${ADMIT_TIMEOUT:-240} \
             --deadline ${ADMIT_DEADLINE:-420} --write 2>&1 \
             | grep -v "Warning\|warnings.warn" | tee "$OUT/replay-admission.log" | tail -40
      cp "$(python3 -c 'import importlib.util as u; print(u.find_spec("flagos_ops_gems").submodule_search_locations[0])')/replayable.toml" \
         "$OUT/replayable.toml"
      bash "$0" kernel-cache ;;
    # The GPU as a chip without CUDA (after build, and admit where the admitted ops are to
    # be new): the no-twin gems tests and host table, flagos.bench's training step against
    # plain CUDA (the ops by provider, CPU fallback among them), the decode step against
    # plain CUDA.
    no-twin) step no-twin; NO_TWIN_SECTIONS=host bash "$0" gems-no-twin
      bash "$0" model-no-twin
      FLAGOS_HAL=cuda FLAGOS_NO_TWIN=1 timeout 300 python3 packages/flagos-quant/benchmarks/quant_bench.py \
             --only decode --json "$OUT/decode-no-twin.json" 2>&1 | tee "$OUT/decode-no-twin.log" | tail -14 ;;
    # flagos.bench's TinyLlama training step without a twin, FlagGems through the HAL (the
    # gems routing file) against the same GPU through plain PyTorch; then the same with the
    # matrix products on cuBLAS through flagos-ops-native's manifest (a vendor BLAS's place).
    model-no-twin) step model-no-twin
      FLAGOS_HAL=cuda FLAGOS_NO_TWIN=1 FLAGOS_ROUTES_FILE=gems timeout ${MODEL_TIMEOUT:-240} \
             python3 -m flagos.bench --only model --json "$OUT/flagos-bench-no-twin.json" 2>&1 \
             | tee "$OUT/model-no-twin.log" | tail -8
      blas="$(python3 -c 'import flagos_ops_native as n; print(n.manifest_dir() / "cublas.toml")')"
      FLAGOS_HAL=cuda FLAGOS_NO_TWIN=1 FLAGOS_ROUTES_FILE=gems FLAGOS_NATIVE_MANIFESTS="$blas" \
             FLAGOS_ROUTES="aten::mm=native,gems,cpu;aten::bmm=native,gems,cpu;aten::addmm=native,gems,cpu" \
             timeout ${MODEL_TIMEOUT:-240} python3 -m flagos.bench --only model \
             --json "$OUT/flagos-bench-no-twin-cublas.json" 2>&1 | tee -a "$OUT/model-no-twin.log" | tail -8 ;;
    # Route tuning (after build, native, and with flag-gems carried): tuned routes vs
    # single-provider routes for the TinyLlama training step; then the tuning and shadow tests.
    tune) step tune; FLAGOS_HAL=cuda timeout 590 python3 packages/flagos-core/benchmarks/tuned_routes.py \
             --size ${TUNE_SIZE:-default} --routes "$OUT/tuned-cuda.toml" --json "$OUT/tuned-routes.json" \
             2>&1 | tee "$OUT/tune.log" | tail -60 ;;
    tune-tests) step tune-tests; FLAGOS_HAL=cuda FLAGOS_TEST_HW=cuda timeout 400 python3 -m pytest -q -p no:cacheprovider \
             --durations=5 packages/flagos-core/tests/test_tuning.py packages/flagos-core/tests/test_shadow.py \
             2>&1 | tee "$OUT/tune-tests.log" | tail -30 ;;
    # FP8/NVFP4 emulation (flagos-quant; accelerate carried in .whl/ for device_map=):
    # its tests on the cuda HAL, then emulated vs bf16 vs the H200's native FP8 _scaled_mm.
    quant) step quant; FLAGOS_HAL=cuda FLAGOS_TEST_HW=cuda HF_HUB_OFFLINE=1 timeout 300 python3 -m pytest -q \
             -p no:cacheprovider --durations=5 packages/flagos-quant/tests 2>&1 | tee "$OUT/quant-tests.log" | tail -15
           FLAGOS_HAL=cuda timeout 400 python3 packages/flagos-quant/benchmarks/quant_bench.py \
             --json "$OUT/quant.json" 2>&1 | tee "$OUT/quant-bench.log" | tail -40 ;;
    # Graph capture: the decode step (static KV cache) eager and replayed through
    # torch.flagos.graph (bf16, FP8 weight-only fused), beside torch.cuda.graph on plain CUDA.
    graphs) step graphs; FLAGOS_HAL=cuda timeout 400 python3 packages/flagos-quant/benchmarks/quant_bench.py \
             --only graph --json "$OUT/graph-decode.json" 2>&1 | tee "$OUT/graph-decode.log" | tail -20 ;;
    # The packed linear kernels' tile shapes on the GPU's own tensors, against bf16.
    quant-sweep) step quant-sweep; FLAGOS_HAL=cuda timeout 500 python3 packages/flagos-quant/benchmarks/packed_kernel_sweep.py \
             --json "$OUT/packed-sweep.json" 2>&1 | tee "$OUT/packed-sweep.log" | tail -30 ;;
    mxfp4) step mxfp4; FLAGOS_HAL=cuda FLAGOS_TEST_HW=cuda timeout 200 python3 -m pytest -q -p no:cacheprovider \
             packages/flagos-quant/tests/test_mxfp4.py 2>&1 | tee "$OUT/mxfp4-tests.log" | tail -8
           FLAGOS_HAL=cuda timeout 300 python3 packages/flagos-quant/benchmarks/mxfp4_moe_bench.py \
             --json "$OUT/mxfp4-moe.json" 2>&1 | tee "$OUT/mxfp4-moe-bench.log" | tail -12 ;;
  esac
done
