"""The HAL kit (include/flagos_hal/kit) on a vendor class of its own: the scaffold's,
compiled directly, with one runtime call changed to misbehave."""

import ctypes
import subprocess

import flagos_hal
import pytest
from flagos_hal import Status
from flagos_hal.scaffold import new_vendor
from hal_testutil import run_python


def _build(tmp_path, name: str, patch: tuple[str, str, str], includes: str = "") -> str:
    src = new_vendor(name, tmp_path) / "src"
    file, old, new = patch
    text = (src / file).read_text()
    assert old in text
    (src / file).write_text(includes + text.replace(old, new))
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
    # <stdexcept> by name: other standard libraries do not bring it in through <new>.
    lib = _build(tmp_path, "throwy", ("memory.cpp", "size_t total = 0, free_bytes = 0;", throwing),
                 includes="#include <new>\n#include <stdexcept>\n")
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


def test_every_kit_hal_takes_injected_faults(tmp_path):
    """Fault injection is the kit's: a vendor HAL built from the scaffold has it too, armed
    from its own environment variable at load and through the test control at run time."""
    from flagos_hal.fault_control import FaultControl

    lib = _build(tmp_path, "faulty", ("memory.cpp", "size_t total = 0, free_bytes = 0;",
                                      "size_t total = 0, free_bytes = 0;"))
    h = flagos_hal.load(lib)
    ctl = FaultControl(h)
    assert "malloc" in ctl.kinds and "stream_synchronize" in ctl.kinds
    streams, events = ctl.live()
    s = h.stream_create(0)
    e = h.event_create()
    assert ctl.live() == (streams + 1, events + 1)
    ctl.arm("stream_synchronize:2,malloc:1")
    with pytest.raises(flagos_hal.HalError, match=r"malloc: injected fault \(FLAGOS_FAULTY_FAULT\)"):
        h.malloc(0, 64)
    h.stream_synchronize(s)
    with pytest.raises(flagos_hal.HalError, match="stream_synchronize: injected fault") as info:
        h.stream_synchronize(s)
    assert info.value.status == Status.DEVICE_FAULT
    ctl.disarm()
    h.stream_synchronize(s)
    h.free(0, h.malloc(0, 64))
    h.event_destroy(e)
    h.stream_destroy(s)
    assert ctl.live() == (streams, events)
    # At load, from FLAGOS_<NAME>_FAULT, in a process of its own.
    r = run_python(
        "import flagos_hal\n"
        f"h = flagos_hal.load({lib!r})\n"
        "h.free(0, h.malloc(0, 64))\n"
        "try:\n"
        "    h.malloc(0, 64)\n"
        "except flagos_hal.HalError as e:\n"
        "    print('refused:', e)\n", env={"FLAGOS_FAULTY_FAULT": "malloc:2"})
    assert r.returncode == 0 and "refused:" in r.stdout and "FLAGOS_FAULTY_FAULT" in r.stdout, r


def test_a_hal_without_the_kit_has_no_test_control(tmp_path):
    from flagos_hal.fault_control import FaultControl

    class Plain:
        path = "plain.so"

        class _lib:
            pass
    with pytest.raises(ValueError, match="exports no flagos_hal_kit_test_control"):
        FaultControl(Plain())  # type: ignore[arg-type]
