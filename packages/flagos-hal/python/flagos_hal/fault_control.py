"""The test control of a HAL built on the HAL kit (``flagos_hal/test_control.h``): fault
injection at run time and the live stream and event counts, on any kit HAL (sim, cuda,
a vendor's built from the scaffold).

``FLAGOS_<NAME>_FAULT`` (``FLAGOS_SIM_FAULT``, ``FLAGOS_CUDA_FAULT``) arms faults once,
when the library loads. Tests that fail HAL calls one after another in one process arm
them here instead, counting from now::

    faults = flagos_hal.fault_control.FaultControl(flagos_hal.load("cuda"))
    faults.arm("stream_synchronize:2")   # the 2nd stream_synchronize from now fails
    ...
    faults.disarm()

The control is the library file's: a process that loads the same file (flagos, and
``flagos_hal.load`` with the same path) shares it.
"""

from __future__ import annotations

import ctypes

from flagos_hal.binding import Hal, HalError, Status

CONTROL_SYMBOL = "flagos_hal_kit_test_control"
_U64P = ctypes.POINTER(ctypes.c_uint64)


class _Control(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("arm", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p)),
        ("calls", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, _U64P)),
        ("kinds", ctypes.c_char_p),
        ("live", ctypes.CFUNCTYPE(ctypes.c_int, _U64P, _U64P)),
    ]


class FaultControl:
    """A kit HAL's test control: injected faults, live objects (docs/hal/kit.md)."""

    def __init__(self, hal: Hal) -> None:
        try:
            entry = getattr(hal._lib, CONTROL_SYMBOL)
        except AttributeError:
            raise ValueError(f"{hal.path} exports no {CONTROL_SYMBOL}: not built on the HAL kit, "
                             f"or built before it had a test control (rebuild it)") from None
        entry.restype = ctypes.POINTER(_Control)
        entry.argtypes = []
        control = entry()
        if not control or control.contents.struct_size < ctypes.sizeof(_Control):
            raise ValueError(f"{hal.path}: test control of an older kit; rebuild the HAL")
        self._hal = hal
        self._c = control.contents
        self.kinds: tuple[str, ...] = tuple(self._c.kinds.decode().split(","))

    def _check(self, status: int) -> None:
        if status != Status.SUCCESS:
            raise HalError(Status(status),
                           f"{self._hal.name} fault injection: {self._hal.last_error_message()}")

    def arm(self, spec: str) -> None:
        """Replace the armed faults with ``spec`` (``"KIND:N,..."``, N counted from now)."""
        self._check(self._c.arm(spec.encode()))

    def disarm(self) -> None:
        """No call fails any more (the counts go on)."""
        self.arm("")

    def calls(self, kind: str) -> int:
        """How many calls of ``kind`` were counted so far."""
        out = ctypes.c_uint64()
        self._check(self._c.calls(kind.encode(), ctypes.byref(out)))
        return out.value

    def counts(self) -> dict[str, int]:
        """The count of every kind."""
        return {k: self.calls(k) for k in self.kinds}

    def live(self) -> tuple[int, int]:
        """``(streams, events)`` created and not destroyed (default streams included)."""
        streams, events = ctypes.c_uint64(), ctypes.c_uint64()
        self._check(self._c.live(ctypes.byref(streams), ctypes.byref(events)))
        return streams.value, events.value
