"""The sim HAL's test control (``flagos_hal/sim_runtime.h``): fault injection at run time
and the live stream and event counts.

``FLAGOS_SIM_FAULT`` arms faults once, when the library loads. Tests that fail HAL calls
one after another in one process arm them here instead, counting from now::

    faults = flagos_hal.sim_control.SimControl(flagos_hal.load("sim"))
    faults.arm("stream_synchronize:2")   # the 2nd stream_synchronize from now fails
    ...
    faults.disarm()

The controls come from the sim runtime stream every sim stream hands out as its native
handle, so they are those of the library instance that ``hal`` opened: the one flagos
uses when it is the same library file.
"""

from __future__ import annotations

import ctypes

from flagos_hal.binding import Hal, HalError, Status

_U64P = ctypes.POINTER(ctypes.c_uint64)


class _Control(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("arm", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p)),
        ("calls", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, _U64P)),
        ("kinds", ctypes.c_char_p),
        ("live", ctypes.CFUNCTYPE(ctypes.c_int, _U64P, _U64P)),
    ]


class _SimStream(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("stream", ctypes.c_void_p),
        ("launch_host_func", ctypes.c_void_p),
        ("control", ctypes.POINTER(_Control)),
    ]


class SimControl:
    """The sim HAL's test control: injected faults, live objects (docs/hal/sim.md)."""

    def __init__(self, hal: Hal) -> None:
        if hal.name != "sim":
            raise ValueError(f"fault injection at run time is a sim HAL feature; {hal!r} is not sim")
        handle = hal.stream_native_handle(hal.default_stream(0))
        stream = _SimStream.from_address(handle)
        if stream.struct_size < ctypes.sizeof(_SimStream) or not stream.control:
            raise ValueError(f"{hal.path} predates run-time fault injection (sim runtime struct of "
                             f"{stream.struct_size} bytes); rebuild flagos-hal")
        self._hal = hal
        self._c = stream.control.contents
        self.kinds: tuple[str, ...] = tuple(self._c.kinds.decode().split(","))

    def arm(self, spec: str) -> None:
        """Replace the armed faults with ``spec`` (``"KIND:N,..."``, N counted from now)."""
        status = self._c.arm(spec.encode())
        if status != Status.SUCCESS:
            raise HalError(Status(status), f"sim fault injection: {self._hal.last_error_message()}")

    def disarm(self) -> None:
        """No call fails any more (the counts go on)."""
        self.arm("")

    def calls(self, kind: str) -> int:
        """How many calls of ``kind`` were counted so far."""
        out = ctypes.c_uint64()
        status = self._c.calls(kind.encode(), ctypes.byref(out))
        if status != Status.SUCCESS:
            raise HalError(Status(status), f"sim fault injection: {self._hal.last_error_message()}")
        return out.value

    def counts(self) -> dict[str, int]:
        """The count of every kind."""
        return {k: self.calls(k) for k in self.kinds}

    def live(self) -> tuple[int, int]:
        """``(streams, events)`` created and not destroyed (default streams included)."""
        streams, events = ctypes.c_uint64(), ctypes.c_uint64()
        self._c.live(ctypes.byref(streams), ctypes.byref(events))
        return streams.value, events.value
