"""Run by test_offload_hals.py under a HAL without a usable graph runtime (FLAGOS_HAL set
to the wrapping HAL of flagos-hal's tests): the offload backend must run the policy net
eagerly with the reason in explain(), and raise it in strict mode. Prints
HAL-RUN-OK and the reason."""

import torch
from flagos_compile.models import RobotPolicy
from flagos_compile.offload import OffloadBackend, OffloadError

torch.manual_seed(0)
model = RobotPolicy().eval()
image, state = torch.randn(1, 3, 32, 32), torch.randn(1, 8)
with torch.no_grad():
    want = model(image, state)
    model.to("flagos")
    inputs = [image.to("flagos"), state.to("flagos")]
    backend = OffloadBackend(cache_dir=False)
    got = torch.compile(model, backend=backend)(*inputs)
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    report = backend.reports[0]
    assert not report.regions and report.whole_graph_reason, backend.explain()
    torch._dynamo.reset()
    try:
        torch.compile(model, backend=OffloadBackend(cache_dir=False, strict=True))(*inputs)
        raise SystemExit("strict mode did not raise")
    except (OffloadError, torch._dynamo.exc.BackendCompilerFailed) as e:  # Dynamo wraps it
        cause = e if isinstance(e, OffloadError) else e.__cause__
        assert isinstance(cause, OffloadError) or "OffloadError" in str(e), repr(e)
        assert report.whole_graph_reason in str(e), str(e)
print("HAL-RUN-OK", report.whole_graph_reason)
