"""The HAL kit (include/flagos_hal/kit) on a vendor class of its own: the scaffold's,
compiled directly, with one runtime call changed to misbehave."""

import ctypes
import subprocess

import flagos_hal
from flagos_hal import Status
from flagos_hal.scaffold import new_vendor
from hal_testutil import run_python


def _build(tmp_path, name: str, patch: tuple[str, str, str]) -> str:
    src = new_vendor(name, tmp_path) / "src"
    file, old, new = patch
    text = (src / file).read_text()
    assert old in text
    (src / file).write_text(text.replace(old, new))
    lib = tmp_path / f"libflagos_hal_{name}.so"
    subprocess.run(["g++", "-std=c++17", "-O1", "-shared", "-fPIC", "-fvisibility=hidden",
                    "-I", flagos_hal.get_include(), *map(str, sorted(src.glob("*.cpp"))),
                    f"-Wl,--version-script={src / 'exports.map'}", "-o", str(lib), "-lpthread"],
                   check=True)
    return str(lib)


def test_an_exception_in_a_runtime_call_is_a_status(tmp_path):
    throwing = ("if (size == 12345) throw std::bad_alloc();\n"
                "  if (size == 777) throw std::runtime_error(\"runtime broke\");\n"
                "  size_t total = 0, free_bytes = 0;")
    lib = _build(tmp_path, "throwy", ("memory.cpp", "size_t total = 0, free_bytes = 0;", throwing))
    # In a child: an exception escaping through the C ABI would abort the process.
    r = run_python(
        "import ctypes, flagos_hal\n"
        "from flagos_hal import Status\n"
        f"h = flagos_hal.load({lib!r})\n"
        "out = ctypes.c_void_p(0xDEAD)\n"
        "assert h.raw('malloc', 0, 12345, ctypes.byref(out)) == Status.OUT_OF_MEMORY\n"
        "assert 'out of host memory' in h.last_error_message() and out.value == 0xDEAD\n"
        "assert h.raw('malloc', 0, 777, ctypes.byref(out)) == Status.UNKNOWN\n"
        "assert 'runtime broke' in h.last_error_message()\n"
        "p = h.malloc(0, 4096)\n"  # still usable, and the failed calls registered nothing
        "assert h.pointer_attributes(p).size == 4096\n"
        "h.free(0, p)\n"
        "print('ok')\n")
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_open_failure_means_no_device_with_the_reason(tmp_path):
    lib = _build(tmp_path, "absent", ("device.cpp", "*device_count = kPlaceholderDevices;\n  return FLAGOS_SUCCESS;",
                                      "return kit::fail(FLAGOS_ERROR_NO_DEVICE, \"acme runtime not installed\");"))
    h = flagos_hal.load(lib)
    assert h.device_count() == 0 and "unavailable: acme runtime not installed" in h.version
    out = ctypes.c_void_p()
    assert h.raw("malloc", 0, 64, ctypes.byref(out)) == Status.NO_DEVICE
    assert h.last_error_message() == "flagos absent HAL: acme runtime not installed"
    assert h.raw("free", 0, None) == Status.SUCCESS  # needs no runtime
