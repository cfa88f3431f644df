"""flagos' build in Inductor's FX graph cache key.

Inductor reuses compiled graphs from its on-disk cache by a key of the graph, the inputs,
torch's version and its config, not of the backend that generated the code or of the
device's kernels it calls. Code compiled with another flagos (other convolution layouts,
other patches) would be reused and fail its stride assertions. Every custom backend pass
registered for a device contributes its uuid() to the key of every graph
(torch._inductor.codecache.FxGraphHashDetails, ``custom_backend_passes``), so flagos
registers a pass that changes nothing and whose uuid names its build.
"""

from __future__ import annotations

import functools
import hashlib
import os

import torch
from torch._inductor.custom_graph_pass import CustomGraphModulePass


@functools.cache
def build_id() -> str:
    """A hash of flagos-compile's sources and of the flagos core library this process uses."""
    import flagos

    import flagos_compile

    h = hashlib.sha256(flagos_compile.__version__.encode())
    here = os.path.dirname(os.path.abspath(flagos_compile.__file__))
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    # the twin of each device decides the code (C++ or Triton) and the layouts
    twins = [torch.flagos.get_device_properties(i).twin_device
             for i in range(torch.flagos.device_count())]
    h.update(repr((twins, os.environ.get("FLAGOS_NO_TWIN"))).encode())
    lib = flagos.provider_api.extension_path()
    st = os.stat(lib)  # the core's engines decide the layouts the code asserts
    h.update(f"{os.path.basename(lib)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


class FlagosCacheKeyPass(CustomGraphModulePass):
    """Leaves the graph as it is; exists for its uuid() (the flagos build)."""

    def __call__(self, gm: torch.fx.GraphModule) -> None:
        return None

    def uuid(self) -> str:
        return build_id()
