"""The cuda HAL against a test double of the CUDA driver (tests/fake_cuda/fake_libcuda.c).

The double runs on host memory and enforces the driver rules the HAL relies on (a current
context, streams and events used in their own context), so these tests check the HAL's
driver usage on machines without a GPU; the real driver is checked by the conformance
suite on a GPU machine.
"""

import json
import os
import pathlib
import subprocess
import sys

import flagos_hal
import pytest
from hal_testutil import run_python

FAKE_SOURCE = pathlib.Path(__file__).parent / "fake_cuda" / "fake_libcuda.c"


def _build(directory: pathlib.Path, *defines: str) -> pathlib.Path:
    directory.mkdir(parents=True, exist_ok=True)
    lib = directory / "libcuda.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", *defines, str(FAKE_SOURCE), "-o", str(lib),
                    "-lpthread"], check=True)
    return directory


@pytest.fixture(scope="module")
def cuda_hal() -> str:
    try:
        return flagos_hal.library_path("cuda")
    except FileNotFoundError:
        pytest.skip("the cuda HAL is not built in this installation")


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory) -> dict:
    """Environment that makes dlopen("libcuda.so.1") find the double."""
    lib_dir = _build(tmp_path_factory.mktemp("fake_cuda"))
    return {"LD_LIBRARY_PATH": f"{lib_dir}:{os.environ.get('LD_LIBRARY_PATH', '')}"}


def test_conformance_on_the_fake_driver(cuda_hal, fake_driver):
    env = dict(os.environ, **fake_driver)
    r = subprocess.run([sys.executable, "-m", "flagos_hal.conformance", "--hal", cuda_hal, "--json"],
                       env=env, capture_output=True, text=True, timeout=600, check=False)
    results = json.loads(r.stdout)["results"]
    # The CUDA HAL has no graph runtime and no host tasks (optional; its kernels and copies
    # need none): their checks skip, as does the launch through a tensor descriptor (the
    # suite has no PTX kernel reading one); all others pass.
    optional = ("graph_", "host_tasks", "tensor_descriptor_launch")
    failed = [x for x in results if x["result"] != ("SKIP" if x["check"].startswith(optional) else "PASS")]
    assert r.returncode == 0 and not failed, failed or r.stderr


def test_tensor_descriptors_reach_the_driver_innermost_first(cuda_hal, fake_driver):
    # flagos' descriptions go outermost first with element strides; cuTensorMapEncodeTiled
    # takes dimensions innermost first and byte strides (the double echoes what it got).
    r = run_python(
        "import flagos_hal, struct\n"
        f"h = flagos_hal.load({cuda_hal!r})\n"
        "p = h.malloc(0, 64 * 48 * 2)\n"
        "info = h.tensor_descriptor_info(p, [64, 40], [48, 1], [32, 16], 2, element_type=10, swizzle=3,\n"
        "                                fill_nan=True)\n"
        "got = struct.unpack('<16Q', h.encode_tensor_descriptor(0, info))\n"
        "assert got[:5] == (p, 2, 10, 3, 1), got\n"
        "assert got[5:7] == (40, 64) and got[10:12] == (16, 32) and got[15] == 96, got\n"
        "print('ok')\n", env=fake_driver)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_events_across_devices(cuda_hal, fake_driver):
    # One HAL event recorded on streams of two devices: a CUevent per device context.
    r = run_python(
        "import flagos_hal\n"
        f"h = flagos_hal.load({cuda_hal!r})\n"
        "s0, s1 = h.stream_create(0), h.stream_create(1)\n"
        "e, f = h.event_create(), h.event_create()\n"
        "h.event_record(e, s0); h.event_record(e, s1)\n"  # re-recorded on another device
        "h.stream_wait_event(s0, e)\n"
        "h.event_synchronize(e); assert h.event_query(e)\n"
        "h.event_record(f, s0)\n"
        "st = h.raw('event_elapsed_time', __import__('ctypes').byref(__import__('ctypes').c_float()), e, f)\n"
        "assert st == flagos_hal.Status.INVALID_VALUE and 'different devices' in h.last_error_message(), st\n"
        "h.event_record(e, s0); assert h.elapsed_time(e, f) <= 0.0\n"
        "for x in (e, f): h.event_destroy(x)\n"
        "for s in (s0, s1): h.stream_destroy(s)\n"
        "print('ok')\n", env=fake_driver)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_forked_child_is_refused(cuda_hal, fake_driver):
    r = run_python(
        "import os, flagos_hal\n"
        f"h = flagos_hal.load({cuda_hal!r})\n"
        "p = h.malloc(0, 256)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    st = h.raw('set_device', 0)\n"
        "    ok = st == flagos_hal.Status.NO_DEVICE and 'spawn' in h.last_error_message()\n"
        "    os._exit(0 if ok else 1)\n"
        "assert os.waitpid(pid, 0)[1] == 0, 'child was not refused'\n"
        "h.free(0, p)\n"  # the parent still works
        "print('ok')\n", env=fake_driver)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_too_old_driver_names_the_missing_symbol(cuda_hal, tmp_path):
    lib_dir = _build(tmp_path, "-DFAKE_CUDA_TOO_OLD")
    r = run_python(
        "import ctypes, flagos_hal\n"
        f"h = flagos_hal.load({cuda_hal!r})\n"
        "assert h.device_count() == 0\n"
        "st = h.raw('malloc', 0, 64, ctypes.byref(ctypes.c_void_p()))\n"
        "print(int(st), h.last_error_message())\n", env={"LD_LIBRARY_PATH": str(lib_dir)})
    assert r.returncode == 0, r.stderr
    status, message = r.stdout.split(" ", 1)
    assert int(status) == flagos_hal.Status.NO_DEVICE
    assert "too old or not an NVIDIA driver: missing cuMemAlloc_v2" in message
