"""One region of an ATen graph to ONNX, with torch's own exporter.

The region (a GraphModule of the partitioned graph) is exported on the CPU with its frozen
weights as constants (ONNX initializers) and its other inputs as graph inputs, at the
static shapes the graph was captured with.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Sequence

import torch

ONNX_OPSET = 18


def exporter_missing() -> str | None:
    """Why ONNX export cannot run here (a missing package), or None."""
    for mod, extra in (("onnx", "onnx"), ("onnxscript", "onnxscript")):
        try:
            __import__(mod)
        except ImportError:
            return (f"the ONNX exporter needs the '{extra}' package, which is not installed: "
                    "pip install 'flagos-compile[offload]'")
    return None


class _Frozen(torch.nn.Module):
    """The region with its weights held as buffers: forward takes the other inputs only."""

    def __init__(self, region: torch.fx.GraphModule, n_args: int, frozen: dict[int, torch.Tensor]):
        super().__init__()
        self.region = region
        self.n_args = n_args
        self.slots = []
        for i, w in frozen.items():
            self.register_buffer(f"w{i}", w)
            self.slots.append(i)

    def forward(self, *inputs):
        it = iter(inputs)
        args = [getattr(self, f"w{i}") if i in self.slots else next(it) for i in range(self.n_args)]
        out = self.region(*args)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def to_onnx(region: torch.fx.GraphModule, n_args: int, frozen: dict[int, torch.Tensor],
            inputs: Sequence[torch.Tensor]) -> bytes:
    """The serialized ONNX model of `region`: `frozen` maps argument positions to their
    (CPU) weights, `inputs` are CPU tensors of the other arguments' shapes and dtypes."""
    module = _Frozen(region, n_args, frozen).eval()
    names = [f"input_{i}" for i in range(len(inputs))]
    # The exporter reports its progress on stdout, and warns through warnings and logging.
    with warnings.catch_warnings(), torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        logger = logging.getLogger("torch.onnx")
        level = logger.level
        logger.setLevel(logging.ERROR)
        try:
            program = torch.onnx.export(module, tuple(inputs), dynamo=True, input_names=names,
                                        opset_version=ONNX_OPSET, verbose=False, optimize=True)
        finally:
            logger.setLevel(level)
    return program.model_proto.SerializeToString()
