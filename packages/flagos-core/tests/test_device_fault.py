"""A device the HAL reports lost (a sticky fault): the error says the device is unusable,
later errors say why, torch.flagos.device_fault() and is_available() agree, and tensors on
it can still be freed. A transient fault leaves the device usable."""

from __future__ import annotations

import pytest
import torch

CODE = """
import flagos_hal, torch
from flagos_hal.sim_control import SimControl
spec = next(s for s in flagos_hal.discover() if s.name == 'sim')
ctl = SimControl(flagos_hal.load(spec.path))
x = torch.arange(6.0, device='flagos:0')
y = torch.arange(6.0, device='flagos:1')
print('BEFORE', torch.flagos.device_fault(0), torch.flagos.is_available())
ctl.arm('stream_synchronize:1:{mode}')
for i in range(2):
    try:
        x.cpu() if {opaque} else torch.flagos.synchronize(0) if i else x.sum().item()
        print('RAN', i)
    except RuntimeError as e:
        print('RAISED', i, str(e).replace(chr(10), ' '))
print('FAULT0', torch.flagos.device_fault(0))
print('FAULT1', torch.flagos.device_fault(1))
print('AVAILABLE', torch.flagos.is_available())
try:
    print('OTHER', (y * 2).cpu().tolist())
except RuntimeError as e:
    print('OTHER RAISED', 'unusable since an earlier error' in str(e))
del x  # freeing a tensor of a lost device works
print('DONE')
"""


@pytest.fixture
def sim_two_devices():
    if not all(torch.flagos.get_device_properties(i).hal == "sim"
               for i in range(torch.flagos.device_count())) or torch.flagos.device_count() < 2:
        pytest.skip("needs two sim devices")


def test_lost_device_is_reported_and_stays_reported(run_python, sim_two_devices):
    out = run_python(CODE.format(mode="lost", opaque=False), env={"FLAGOS_HAL": "sim"}).stdout
    assert "BEFORE None True" in out, out
    raised = [line for line in out.splitlines() if line.startswith("RAISED")]
    assert len(raised) == 2, out
    assert "stream_synchronize: injected fault" in raised[0], out
    assert "flagos:0, flagos:1 are unusable from now on" in raised[0], out
    assert "restart the process" in raised[0], out
    assert "are unusable since an earlier error" in raised[1], out  # every later error
    fault0 = next(line for line in out.splitlines() if line.startswith("FAULT0"))
    assert "stream_synchronize: injected fault" in fault0, out
    # the whole sim HAL is lost (one runtime): both devices say so, none is available
    assert "FAULT1 None" not in out and "AVAILABLE False" in out, out
    assert "OTHER RAISED True" in out, out
    assert "DONE" in out, out


def test_a_transient_fault_leaves_the_device_usable(run_python, sim_two_devices):
    out = run_python(CODE.format(mode="", opaque=False).replace(":1:'", ":1'"),
                     env={"FLAGOS_HAL": "sim"}).stdout
    assert "RAISED 0" in out and "RAN 1" in out, out
    assert "unusable" not in out, out
    assert "FAULT0 None" in out and "AVAILABLE True" in out and "OTHER [0.0, 2.0" in out, out
