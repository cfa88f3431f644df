"""Developer sessions for the flagos monorepo.

Every session makes its own virtual environment and installs what it needs, so the
commands in README.md work on a fresh machine with only Python and pip.
Compiled packages build against the torch installed in that environment, without
build isolation (a build-isolated environment would pull a different torch).
"""

from __future__ import annotations

import os
import pathlib
import sys

import nox

ROOT = pathlib.Path(__file__).parent
nox.options.default_venv_backend = "venv"
nox.options.sessions = ["lint", "tests(hw='sim')"]
nox.options.reuse_existing_virtualenvs = False

# The CPU machines take this build from local disk; newer ranges pull a CUDA build.
TORCH_CPU = "torch==2.13.0"
# The release of each torch minor that the compat session tests (its latest patch).
TORCH_RELEASES = {"2.9": "2.9.1", "2.10": "2.10.0", "2.11": "2.11.0", "2.12": "2.12.1",
                  "2.13": "2.13.0", "2.14": "2.14.1"}
# setuptools builds the pure-Python packages (no build isolation: it must be installed;
# 70.1 has bdist_wheel built in, older ones need the wheel package).
BUILD_TOOLS = ["scikit-build-core>=0.10", "setuptools>=70.1", "ninja", "pytest", "numpy",
               "expecttest"]
# Triton for the gems provider's tests on sim (its interpreter, on CPU tensors), and
# FlagGems with the one dependency it imports that the machines may lack.
TRITON_CPU = "triton==3.6.0"
FLAG_GEMS = ["flag-gems>=5.0.2,<5.1", "sqlalchemy>=2.0"]
# The model zoo (integration_tests/models): the library ranges it is tested with. Neither
# library depends on torch, so installing them leaves the session's torch as it is.
MODEL_ZOO = ["transformers>=5.17,<5.26", "diffusers>=0.42,<0.43",
             # from_pretrained(..., device_map="flagos") (flagos-quant's checkpoint tests)
             "accelerate>=1.1,<2"]
# compressed-tensors: only for flagos-quant's tests that a compressed-tensors checkpoint
# loaded anywhere but flagos still goes through transformers' own quantizer (flagos reads
# the format without it). Needs torch>=2.10: sim only (the GPU machine has no network).
COMPRESSED_TENSORS = "compressed-tensors>=0.19,<0.21"
# Whole-graph offload: torch's ONNX exporter (flagos-compile[offload]) and the sim graph
# compiler (flagos-hal[graph]). Neither depends on torch.
OFFLOAD = ["onnx>=1.17,<1.24", "onnxscript>=0.7,<0.8"]
# The libraries flagos integrates with, in the ranges it is tested in: the tests session
# installs the newest release each range allows, the libraries session also the oldest.
LIBRARIES = [*MODEL_ZOO, *OFFLOAD, COMPRESSED_TENSORS, "safetensors>=0.8,<1"]
# The test folders that exercise them (model zoo, quantized checkpoints, graph export).
LIBRARY_TESTS = ["integration_tests/models", "packages/flagos-quant/tests",
                 "packages/flagos-compile/tests"]
# What transformers' own test modules import beyond pytest (its "testing" extra, less what
# the model tests do not use).
TRANSFORMERS_TESTING = ["pytest-xdist", "parameterized", "pytest-timeout", "pytest-order",
                        "pytest-rerunfailures", "timeout-decorator"]
# The benchmarks page's plots.
MATPLOTLIB = "matplotlib>=3.8,<4"

# Packages with a C++ extension linked against torch: their wheels pin the torch release
# they were built with (tools/pin_wheel_torch.py), their sources the tested range.
TORCH_LINKED = {"packages/flagos-core", "packages/flagos-distributed"}
# Install order follows the dependency graph; every package is a separate wheel.
PACKAGES = [
    "packages/flagos-hal",
    "packages/flagos-core",
    "packages/flagos-ops-boxing",
    "packages/flagos-ops-gems",
    "packages/flagos-ops-native",
    "packages/flagos-quant",
    "packages/flagos-distributed",
    "packages/flagos-compile",
]


def _install_torch(session: nox.Session, hw: str) -> None:
    if hw == "cuda":
        # GPU machines bring their own CUDA torch; the venv sees it (system site packages).
        session.run("python", "-c", "import torch; assert torch.cuda.is_available(), 'no CUDA'")
    else:
        session.install(TORCH_CPU)


def _install_flagos(session: nox.Session, packages: list[str] = PACKAGES) -> None:
    session.install(*BUILD_TOOLS)
    for pkg in packages:
        if (ROOT / pkg / "pyproject.toml").exists():
            session.install("--no-build-isolation", "--no-deps", f"./{pkg}")


def _use_system_torch(session: nox.Session) -> None:
    """Re-create the session's venv with the system site packages, where a GPU machine's
    CUDA build of torch lives (it cannot be pip-installed there: no network)."""
    session.run(sys.executable, "-m", "venv", "--system-site-packages", "--clear",
                session.virtualenv.location, external=True, silent=True)
    # A venv made from inside another venv (GPU images keep torch in one) sees the base
    # interpreter's packages, not that venv's: point it at the directory that holds torch.
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        torch_site = pathlib.Path(spec.origin).resolve().parent.parent
        purelib = session.run("python", "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                              silent=True).strip()
        (pathlib.Path(purelib) / "flagos-system-torch.pth").write_text(f"{torch_site}\n")


def _prepare(session: nox.Session, hw: str | None = None) -> str:
    """An environment with torch and every flagos package for HAL `hw` (default: what
    FLAGOS_HAL names, else sim); returns that HAL's name."""
    hw = hw or os.environ.get("FLAGOS_HAL", "sim")
    if hw == "cuda":
        _use_system_torch(session)
    _install_torch(session, hw)
    _install_flagos(session)
    return hw


@nox.session
@nox.parametrize("hw", ["sim", "cuda"])
def tests(session: nox.Session, hw: str) -> None:
    """Every package's tests and the integration tests on the sim (or cuda) HAL."""
    _prepare(session, hw)
    # The gems provider's tests: Triton (its interpreter runs their kernels on sim; the GPU
    # machine's torch brings it) and FlagGems without its pinned dependencies (on sim its
    # kernels do not run: it is loaded as for a chip without a twin, its op table and
    # guards read against the models' calls).
    if hw == "sim":
        session.install(TRITON_CPU)
    session.install("--no-deps", *FLAG_GEMS)
    session.install(*MODEL_ZOO, *OFFLOAD,
                    *([] if hw == "cuda" else [COMPRESSED_TENSORS, TORCH_CPU]))
    env = {"FLAGOS_TEST_HW": hw, "FLAGOS_HAL": hw, "HF_HUB_OFFLINE": "1"}
    session.run("python", "-m", "flagos_hal.conformance", "--hal", hw, env=env)
    if hw == "sim":
        session.run("python", "-m", "flagos_hal.conformance", "--hal", "sim", "--asan", env=env)
    # The torch.cuda table of docs/python_api.md, generated from the installed torch and
    # flagos (so here, not in lint, whose environment has neither).
    session.run("python", "tools/cuda_parity.py", "--check", "docs/python_api.md", env=env)
    _run_test_folders(session, env)


def _test_folders() -> list[str]:
    return [f for f in [p + "/tests" for p in PACKAGES] + ["integration_tests"]
            if (ROOT / f).is_dir()]


def _run_test_folders(session: nox.Session, env: dict, junit_dir: pathlib.Path | None = None,
                      folders: list[str] | None = None) -> None:
    """One pytest run per test folder (`folders`, default all): each folder's helpers
    (conftest, test utilities) are imported by plain name, which only works with that folder
    first on sys.path. With `junit_dir`, every folder runs (failures do not stop the
    session) and writes its results there."""
    for folder in folders or _test_folders():
        extra, codes = [], [0]
        if junit_dir is not None:
            extra = [f"--junitxml={junit_dir / (folder.replace('/', '_') + '.xml')}"]
            codes = [0, 1]  # 1: some tests failed (recorded); anything else still stops
        session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "--durations=5", *extra, folder, *session.posargs, env=env,
                    success_codes=codes)


@nox.session
@nox.parametrize("torch", list(TORCH_RELEASES))
def compat(session: nox.Session, torch: str) -> None:
    """Build flagos against one torch release and run the sim suite on it; writes
    docs/compat/torch-<release>.json, from which tools/compat_table.py makes docs/compat.md.
    Not part of CI: the registries serve CUDA builds of torch for releases other than the
    CPU machines' own (several GB each, which run on a CPU-only machine)."""
    import json
    import re
    import subprocess

    version = TORCH_RELEASES[torch]
    out = ROOT / "docs" / "compat"
    out.mkdir(exist_ok=True)
    junit = pathlib.Path(session.create_tmp()) / "junit"
    junit.mkdir(exist_ok=True)
    result: dict = {"release": torch, "torch": version, "commit": _commit(),
                    "command": f"nox -s \"compat(torch='{torch}')\""}

    def write() -> None:
        (out / f"torch-{torch}.json").write_text(json.dumps(result, indent=1) + "\n")

    session.install(f"torch=={version}" if torch != "2.13" else TORCH_CPU, *BUILD_TOOLS)
    result["torch"] = session.run("python", "-c", "import torch; print(torch.__version__)",
                                  silent=True).strip().splitlines()[-1]
    session.install(*BUILD_TOOLS)
    for pkg in PACKAGES:  # as _install_flagos, keeping the first compiler error
        if not (ROOT / pkg / "pyproject.toml").exists():
            continue
        build = subprocess.run([str(pathlib.Path(session.bin) / "python"), "-m", "pip", "install",
                                "--no-build-isolation", "--no-deps", f"./{pkg}"],
                               cwd=ROOT, capture_output=True, text=True, check=False)
        if build.returncode != 0:
            lines = (build.stdout + build.stderr).splitlines()
            # the compiler's first error (file:line:col: error: ...), else pip's
            errors = [ln.strip().replace(f"{ROOT}/", "") for ln in lines
                      if re.search(r":\d+:\d+: (fatal )?error: ", ln)] or [
                ln.strip() for ln in lines if " error: " in ln]
            result["build"] = f"{pkg} failed: " + (errors[0] if errors else "see the log")
            write()
            session.error(f"torch {version}: {result['build']}")
    result["build"] = "ok"
    # The CUDA results allocator: does this release's interface match the wrapper's?
    check = out / f"cuda-allocator-{torch}.json"
    session.run("python", "tools/check_cuda_allocator.py", "--json", str(check),
                success_codes=[0, 1, 2])
    cca = json.loads(check.read_text())
    check.unlink()
    result["cuda_allocator"] = ("error: " + cca["error"] if "error" in cca else
                                "missing: " + ", ".join(cca["missing"]) if cca["missing"] else
                                "interface forwarded")
    # The tests' own dependencies, as the tests session installs them; a CUDA build of torch
    # brings its own Triton (the gems provider's tests run its interpreter).
    pin = TORCH_CPU if torch == "2.13" else f"torch=={version}"
    session.install(*MODEL_ZOO, *OFFLOAD, *([TRITON_CPU] if torch == "2.13" else []), pin)
    # FLAGOS_COMPAT_RUN: the check that every tested release has results on record skips
    # (this run is making them).
    env = {"FLAGOS_TEST_HW": "sim", "FLAGOS_HAL": "sim", "HF_HUB_OFFLINE": "1",
           "FLAGOS_COMPAT_RUN": torch}
    try:
        session.run("python", "-m", "flagos_hal.conformance", "--hal", "sim", env=env)
        result["conformance"] = "passed"
    except nox.command.CommandFailed:
        result["conformance"] = "failed"
    _run_test_folders(session, env, junit_dir=junit)
    result["tests"] = _junit_results(junit, _test_folders())
    write()
    if result["conformance"] != "passed" or any(t["failed"] for t in result["tests"].values()):
        session.error(f"torch {version}: failures recorded in docs/compat/torch-{torch}.json")


def _junit_results(junit: pathlib.Path, folders: list[str]) -> dict:
    """{folder: {passed, skipped, failed: [test ids]}} from _run_test_folders' JUnit files."""
    import xml.etree.ElementTree as ET

    out = {}
    for folder in folders:
        xml = junit / (folder.replace("/", "_") + ".xml")
        if not xml.exists():
            continue
        suite = ET.parse(xml).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        failed = [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
                  if c.find("failure") is not None or c.find("error") is not None]
        n = int(suite.get("tests", 0))
        skipped = int(suite.get("skipped", 0))
        out[folder] = {"passed": n - skipped - len(failed), "skipped": skipped, "failed": failed}
    return out


def _commit() -> str:
    """The short commit of the tree, with "+" when tracked files have changes."""
    import subprocess

    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], check=True,
                           capture_output=True, text=True).stdout.strip()
    return commit + ("+" if dirty else "")


def _oldest(spec: str) -> str:
    """"name>=1.2,<2" -> "name==1.2": the oldest release a range allows."""
    import re

    m = re.match(r"([A-Za-z0-9_.\-\[\]]+)>=([^,]+)", spec)
    if m is None:
        raise ValueError(f"{spec!r} has no lower bound")
    return f"{m.group(1)}=={m.group(2)}"


@nox.session
@nox.parametrize("releases", ["newest", "oldest"])
def libraries(session: nox.Session, releases: str) -> None:
    """The sim tests that use the libraries flagos integrates with (model zoo, quantized
    checkpoints, graph export) with the newest or the oldest release of each that flagos
    allows (LIBRARIES); writes docs/compat/libraries-<releases>.json, from which
    tools/compat_table.py makes the library table of docs/compat.md."""
    import json

    _prepare(session, "sim")
    pins = LIBRARIES if releases == "newest" else [_oldest(s) for s in LIBRARIES]
    session.install(TRITON_CPU, *pins, TORCH_CPU)
    names = [s.split(">")[0].split("=")[0].split("<")[0] for s in LIBRARIES]
    code = ("import importlib.metadata as m, json; "
            f"print(json.dumps({{n: m.version(n) for n in {names!r}}}))")
    versions = json.loads(session.run("python", "-c", code, silent=True).strip().splitlines()[-1])
    junit = pathlib.Path(session.create_tmp()) / "junit"
    junit.mkdir(exist_ok=True)
    env = {"FLAGOS_TEST_HW": "sim", "FLAGOS_HAL": "sim", "HF_HUB_OFFLINE": "1"}
    _run_test_folders(session, env, junit_dir=junit, folders=LIBRARY_TESTS)
    result = {"releases": releases, "versions": versions,
              "allowed": dict(zip(names, LIBRARIES)), "commit": _commit(),
              "command": f"nox -s \"libraries(releases='{releases}')\"",
              "tests": _junit_results(junit, LIBRARY_TESTS)}
    out = ROOT / "docs" / "compat" / f"libraries-{releases}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    if any(t["failed"] for t in result["tests"].values()):
        session.error(f"{releases} releases: failures recorded in {out.relative_to(ROOT)}")


@nox.session(name="transformers-tests")
def transformers_tests(session: nox.Session) -> None:
    """transformers' own model tests on flagos (sim unless FLAGOS_HAL says otherwise),
    against the CPU, for the newest transformers flagos allows. Arguments after ``--`` go to
    integration_tests/models/transformers_model_tests.py; by default it downloads the
    release's repository at its tag from GitHub (``--fetch``), or takes ``--checkout PATH``."""
    hw = _prepare(session)
    session.install(*MODEL_ZOO, *([] if hw == "cuda" else [TORCH_CPU]), *TRANSFORMERS_TESTING)
    env = {"FLAGOS_HAL": hw, "HF_HUB_OFFLINE": "1"}
    session.run("python", "integration_tests/models/transformers_model_tests.py",
                *(session.posargs or ["--fetch"]), env=env)


@nox.session
def conformance(session: nox.Session) -> None:
    """Run the HAL conformance suite (pass --hal NAME|PATH after --)."""
    session.install(*BUILD_TOOLS)
    session.install("--no-build-isolation", "--no-deps", "./packages/flagos-hal")
    session.run("python", "-m", "flagos_hal.conformance", *(session.posargs or ["--hal", "sim"]))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree; no private part of flagos-core used outside it
    (tools/check_private_imports.py); the HAL line counts in the docs up to date
    (tools/hal_line_counts.py); core's C++ laid out as docs/architecture.md says
    (tools/check_core_layout.py); docs/benchmarks.md and README.md's summary up to date
    with docs/bench/results (they are generated: tools/bench_report.py); the docs free of
    issue numbers and of sittings of work (tools/check_docs.py)."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("python", "tools/check_private_imports.py")
    session.run("python", "tools/check_core_layout.py")
    session.run("python", "tools/hal_line_counts.py", "--check")
    session.run("python", "tools/bench_report.py", "--check")
    session.run("python", "tools/check_docs.py")


@nox.session
def build(session: nox.Session) -> None:
    """A wheel per package into dist/ (each installed after it is built: the compiled
    packages build against the installed torch and flagos-hal headers)."""
    import tomllib

    session.install(TORCH_CPU, *BUILD_TOOLS)
    dist = ROOT / "dist"
    for pkg in PACKAGES + ["packages/meta/flagos-sim", "packages/meta/flagos-nvidia"]:
        pyproject = ROOT / pkg / "pyproject.toml"
        if not pyproject.exists():
            continue
        session.run("python", "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                    "-w", str(dist), f"./{pkg}")
        name = tomllib.loads(pyproject.read_text())["project"]["name"]
        if pkg in TORCH_LINKED:
            wheels = sorted(dist.glob(f"{name.replace('-', '_')}-*.whl"),
                            key=lambda w: w.stat().st_mtime)
            session.run("python", "tools/pin_wheel_torch.py", str(wheels[-1]))
        session.install("--no-deps", "--no-index", "--find-links", str(dist), name)


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: train a small transformer on flagos (sim by default) against CPU."""
    _prepare(session)
    session.run("python", "-m", "flagos.demo", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks: ratios against native PyTorch measured side by side in one run. Writes
    the results of this machine to docs/bench/results/<machine>/ and regenerates
    docs/benchmarks.md, its plots and README.md's summary (tools/bench_report.py).
    Arguments after -- go to flagos.bench."""
    hw = _prepare(session)
    session.install(MATPLOTLIB, *OFFLOAD)
    slug = session.run("python", "-c", "from flagos.bench_results import environment, "
                       "machine_slug; print(machine_slug(environment()))",
                       silent=True).strip().splitlines()[-1]
    out = ROOT / "docs" / "bench" / "results" / slug
    session.run("python", "-m", "flagos.bench", "--json", str(out / "flagos-bench.json"),
                *session.posargs)
    # torch.compile: compiled/eager speedup on flagos against the same ratio natively.
    session.run("python", "packages/flagos-compile/benchmarks/compile_speedup.py",
                "--device", "cuda" if hw == "cuda" else "cpu", "--rounds", "3",
                "--json", str(out / "compile.json"))
    # Route autotuning: tuned routes vs single-provider routes for a TinyLlama step.
    session.run("python", "packages/flagos-core/benchmarks/tuned_routes.py", "--size",
                "default" if hw == "cuda" else "tiny", "--json", str(out / "tuned-routes.json"))
    # FP8 / NVFP4 emulation vs bf16 (and native FP8 on a GPU that has it).
    session.run("python", "packages/flagos-quant/benchmarks/quant_bench.py",
                *([] if hw == "cuda" else ["--quick"]), "--json", str(out / "quant.json"))
    if hw == "sim":
        # The native path's host cost and a TinyLlama through simk, on opaque memory; a
        # robot policy net offloaded whole to the sim graph runtime.
        session.run("python", "packages/flagos-ops-native/benchmarks/native_overhead.py",
                    "--json", str(out / "native-overhead.json"))
        # A Python provider's HAL launches relaunched from C++ (replayable_ops) vs Python.
        session.run("python", "packages/flagos-core/benchmarks/provider_replay.py",
                    "--json", str(out / "provider-replay.json"))
        session.run("python", "packages/flagos-compile/benchmarks/offload_policy.py",
                    "--json", str(out / "offload-policy.json"))
    if hw == "cuda":
        gpus = int(session.run("python", "-c", "import torch; print(torch.cuda.device_count())",
                               silent=True).strip().splitlines()[-1])
        if gpus >= 2:  # all_reduce bus bandwidth, ProcessGroupFlagOS vs ProcessGroupNCCL
            session.run("python", "packages/flagos-distributed/benchmarks/allreduce_bw.py",
                        "--gpus", "2", "--json",
                        str(out.with_name(out.name.replace("cuda-", "cuda-2x-")) / "allreduce.json"))
        # FlagGems through flagos (gems) vs FlagGems itself vs native; skips itself when
        # FlagGems is not installed.
        session.run("python", "packages/flagos-ops-gems/benchmarks/gems_bench.py",
                    "--json", str(out / "gems.json"))
    session.run("python", "tools/bench_report.py")
