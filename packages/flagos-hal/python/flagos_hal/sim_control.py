"""The sim HAL's test control: the kit's (:mod:`flagos_hal.fault_control`), which every
sim stream also carries in its runtime struct (``flagos_hal/sim_runtime.h``) for kernel
libraries written for the simulated device.

    faults = flagos_hal.sim_control.SimControl(flagos_hal.load("sim"))
    faults.arm("stream_synchronize:2")   # the 2nd stream_synchronize from now fails
"""

from __future__ import annotations

from flagos_hal.binding import Hal
from flagos_hal.fault_control import FaultControl


class SimControl(FaultControl):
    """The sim HAL's test control: injected faults, live objects (docs/hal/sim.md)."""

    def __init__(self, hal: Hal) -> None:
        if hal.name != "sim":
            raise ValueError(f"fault injection at run time is a sim HAL feature; {hal!r} is not sim")
        super().__init__(hal)
