"""An offloaded region at run time: one compiled graph loaded by the HAL, executed on the
current flagos stream of its device in place of the region's ATen ops."""

from __future__ import annotations

import torch


class OffloadedRegion(torch.nn.Module):
    """Calls the loaded graph with the region's non-frozen arguments.

    `frozen` maps argument positions to the weights compiled into the artifact; they are
    checked unchanged (same storage, same version counter) at every call, since the chip
    would otherwise compute with stale weights.
    """

    def __init__(self, name: str, graph, n_args: int, frozen: dict[int, torch.Tensor], tuple_out: bool):
        super().__init__()
        self.region_name = name
        self.graph = graph
        self.n_args = n_args
        self.frozen = {i: (w, w.data_ptr(), w._version) for i, w in frozen.items()}
        self.dynamic = [i for i in range(n_args) if i not in frozen]
        self.tuple_out = tuple_out
        self.device = torch.device("flagos", graph.device)
        self.out_specs = [(tuple(o["shape"]), o["dtype"]) for o in graph.outputs]
        self.workspace_size = graph.workspace_size

    def forward(self, *args):
        for i, (w, ptr, version) in self.frozen.items():
            a = args[i]
            if a.data_ptr() != ptr or a._version != version:
                raise RuntimeError(
                    f"flagos offload: a weight of region {self.region_name} changed after it was "
                    "compiled (weights are frozen into the artifact); call torch._dynamo.reset() "
                    "and compile again")
        inputs = [args[i].contiguous() for i in self.dynamic]
        outputs = [torch.empty(shape, dtype=dtype, device=self.device) for shape, dtype in self.out_specs]
        workspace = (torch.empty(self.workspace_size, dtype=torch.uint8, device=self.device)
                     if self.workspace_size else None)
        self.graph.execute(inputs, outputs, workspace)
        return tuple(outputs) if self.tuple_out else outputs[0]
