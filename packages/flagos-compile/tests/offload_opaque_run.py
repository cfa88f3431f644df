"""Run by test_offload.py with FLAGOS_NO_TWIN=1: the policy net eager through CPU
fallback and offloaded (one region; two regions and an eager LayerNorm), against the CPU,
on memory the host cannot address. Prints OPAQUE-OK when everything matched."""

import copy
import os

import flagos  # noqa: F401 - brings up the device
import torch
from flagos_compile.models import RobotPolicy
from flagos_compile.offload import OffloadBackend

assert torch.flagos.get_device_properties(0).twin_device == "none", "FLAGOS_NO_TWIN=1 is not in effect"
torch.manual_seed(0)
model = RobotPolicy().eval()
image, state = torch.randn(2, 3, 32, 32), torch.randn(2, 8)
with torch.no_grad():
    want = model(image, state)
    dev = copy.deepcopy(model).to("flagos")
    inputs = [image.to("flagos"), state.to("flagos")]
    torch.testing.assert_close(dev(*inputs).cpu(), want, atol=1e-5, rtol=1e-5)
    counts = []
    for unsupported in ("", "LayerNormalization"):
        os.environ["FLAGOS_SIM_GRAPH_UNSUPPORTED"] = unsupported
        torch._dynamo.reset()
        backend = OffloadBackend()
        got = torch.compile(dev, backend=backend)(*inputs)
        torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
        counts.append(sum(r.offloaded for r in backend.reports[0].regions))
        print(backend.explain())
assert counts == [1, 2], counts
print("OPAQUE-OK one region, split into 2 + eager")
