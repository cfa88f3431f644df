import json
import os
import shutil
import subprocess
import sys
import textwrap

import flagos_hal
import pytest
from flagos_hal.checks import CHECKS
from flagos_hal.scaffold import new_vendor
from hal_testutil import run_python


def conformance(*args, env=None, timeout=600):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "flagos_hal.conformance", *args], env=full_env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_at_least_30_checks():
    assert len(CHECKS) >= 30 and len({c.name for c in CHECKS}) == len(CHECKS)


def test_sim_passes_everything():
    r = conformance("--hal", "sim", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    results = json.loads(r.stdout)["results"]
    assert {x["result"] for x in results} == {"PASS"} and len(results) == len(CHECKS)


def test_one_device_skips_two_device_checks():
    r = conformance("--hal", "sim", "--json", env={"FLAGOS_SIM_DEVICES": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    by = {x["check"]: x["result"] for x in json.loads(r.stdout)["results"]}
    assert by["device_isolation"] == by["memcpy_cross_device_sync"] == "SKIP"
    assert by["threads_alloc_free"] == "PASS"


def test_faulty_hal_fails_the_right_checks():
    # Every 3rd malloc and memcpy fails: the suite must notice (not crash, not pass).
    faults = ",".join(f"malloc:{i},memcpy:{i}" for i in range(3, 200, 3))
    r = conformance("--hal", "sim", "--json", "-k", "memcpy_h2d", env={"FLAGOS_SIM_FAULT": faults})
    assert r.returncode == 1
    results = json.loads(r.stdout)["results"]
    assert results and all(x["result"] == "FAIL" for x in results)
    assert "DEVICE_FAULT" in results[0]["detail"] or "OUT_OF_MEMORY" in results[0]["detail"]


CRASHING_HAL = r"""
#include <string.h>
#include "flagos_hal/flagos_hal.h"
typedef const flagos_hal_table_t* (*get_fn)(void);
static flagos_hal_table_t table;
static flagos_status_t crash(const char** name) { (void)name; *(volatile int*)0 = 1; return 0; }
static flagos_status_t count(int* n) { *n = 0; return FLAGOS_SUCCESS; }
FLAGOS_HAL_EXPORT flagos_status_t flagos_hal_get_table(uint32_t major,
                                                       const flagos_hal_table_t** out) {
  (void)major;
  const flagos_hal_table_t* real = 0;
  flagos_hal_get_table_fn sim = (flagos_hal_get_table_fn)SIM_ENTRY;
  sim(major, &real);
  memcpy(&table, real, sizeof table);
  table.get_native_device = (flagos_status_t (*)(flagos_native_device_t*))crash;
  table.get_device_count = count;
  *out = &table;
  return FLAGOS_SUCCESS;
}
"""


def test_crash_in_a_check_is_a_fail_not_the_end(tmp_path, sim_path):
    # A HAL whose get_native_device segfaults: 'identity' FAILs, the other checks still run.
    wrapper = tmp_path / "crash.c"
    wrapper.write_text(textwrap.dedent("""
        #include <dlfcn.h>
        #define SIM_ENTRY dlsym(dlopen("%s", RTLD_NOW | RTLD_LOCAL), "flagos_hal_get_table")
    """) % sim_path + CRASHING_HAL)
    lib = tmp_path / "libflagos_hal_crashy.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-I", flagos_hal.get_include(), str(wrapper),
                    "-o", str(lib), "-ldl"], check=True)
    r = conformance("--hal", str(lib), "--json", "-k", "i")
    assert r.returncode == 1
    by = {x["check"]: x for x in json.loads(r.stdout)["results"]}
    assert by["identity"]["result"] == "FAIL" and "SIGSEGV" in by["identity"]["detail"]
    assert by["error_strings"]["result"] == "PASS"
    assert by["device_isolation"]["result"] == "SKIP"  # 0 devices


def test_table_output_and_unknown_hal():
    r = conformance("--hal", "sim", "-k", "identity")
    assert r.returncode == 0 and "identity" in r.stdout and "1 passed" in r.stdout
    r = conformance("--hal", "nope")
    assert r.returncode == 2 and "unknown HAL 'nope'" in r.stderr


def test_asan_run_passes():
    r = conformance("--hal", "sim", "--asan", "-k", "memcpy")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "LD_PRELOAD=" in r.stderr and "no AddressSanitizer errors" in r.stderr


def test_asan_build_catches_an_overflow():
    # The ASan build poisons the padding after each allocation: a 1-byte overrun through the
    # HAL's own copy is reported. Proves the --asan run is not a no-op.
    from flagos_hal._bundled import ASAN_SIM, lib_dir
    from flagos_hal.conformance import asan_runtime

    lib = str(lib_dir() / ASAN_SIM)
    r = run_python(
        "import ctypes, flagos_hal\n"
        f"h = flagos_hal.load({lib!r})\n"
        "p = h.malloc(0, 100)\nsrc = ctypes.create_string_buffer(200)\n"
        "h.memcpy(p, ctypes.addressof(src), 101, flagos_hal.MemcpyKind.HOST_TO_HOST)\n",
        env={"LD_PRELOAD": asan_runtime(lib), "ASAN_OPTIONS": "detect_leaks=0"})
    assert r.returncode != 0 and "AddressSanitizer" in r.stderr, r.stderr[-2000:]


def test_new_vendor_scaffold_builds_and_passes(tmp_path):
    root = new_vendor("acme_npu", tmp_path)
    sources = {p.name: p.read_text() for p in (root / "src").iterdir() if p.suffix in (".cpp", ".hpp")}
    assert set(sources) == {"device.cpp", "memory.cpp", "stream.cpp", "acme_npu.hpp"}
    text = "\n".join(sources.values())
    assert "struct AcmeNpu : kit::VendorDefaults" in text and "@name@" not in text
    # Only runtime calls: every function of the contract is a TODO, and nothing the kit
    # does (checks, errors, registries, the table) is written out again.
    assert text.count("TODO(acme_npu)") >= 25 and "FLAGOS_HAL_KIT_ENTRY(flagos_acme_npu::AcmeNpu)" in text
    for kit_work in ("is NULL", "flagos_hal_table_t", "thread_local", "struct_size", "INVALID_HANDLE"):
        assert kit_work not in text, kit_work
    assert 'acme_npu = "flagos_hal_acme_npu:library_path"' in (root / "pyproject.toml").read_text()
    with pytest.raises(FileExistsError):
        new_vendor("acme_npu", tmp_path)
    with pytest.raises(ValueError):
        new_vendor("Bad-Name", tmp_path)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                    "--target", str(target), str(root)], check=True, capture_output=True)
    eps = next(target.glob("*.dist-info")) / "entry_points.txt"
    assert "[flagos.hal]" in eps.read_text()
    lib = target / "flagos_hal_acme_npu" / "lib" / "libflagos_hal_acme_npu.so"
    r = conformance("--hal", str(lib), "--json")
    results = json.loads(r.stdout)["results"]
    # A scaffolded HAL has no graph runtime, kernel extension, stream capture or host tasks
    # (all optional): their checks skip, all others pass.
    optional = ("graph_", "kernel_", "module_", "launch_kernel", "capture_", "host_tasks",
                "tensor_descriptor_")
    want = {x["check"]: "SKIP" if x["check"].startswith(optional) else "PASS" for x in results}
    assert r.returncode == 0 and {x["check"]: x["result"] for x in results} == want, r.stdout + r.stderr
    assert len(results) == len(CHECKS) and results[0]["detail"].startswith("acme_npu / ")
    shutil.rmtree(target)


def test_cli_new_vendor(tmp_path):
    r = subprocess.run([sys.executable, "-m", "flagos_hal", "new-vendor", "zed", "--dir",
                        str(tmp_path)], capture_output=True, text=True, check=False)
    assert r.returncode == 0 and (tmp_path / "flagos-hal-zed" / "src" / "zed.hpp").is_file()
    r = subprocess.run([sys.executable, "-m", "flagos_hal", "new-vendor", "sim"],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "not a valid HAL name" in r.stderr
