"""Which nodes of an ATen graph a HAL's graph compiler can take.

The compiler says which ONNX ops it supports (``op_support``); this module knows which
ONNX ops torch's exporter (``torch.onnx.export(..., dynamo=True)``) writes for each core
ATen op, so a node is offloadable when the exporter has a lowering for it and the
compiler supports every ONNX op of that lowering, for dtypes the compiler takes. A
region that still fails (the exporter wrote something else) falls back as a failed
compile does.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping

import torch
from torch.fx.passes.operator_support import OperatorSupportBase

# Core ATen op (overload packet) -> ONNX ops the exporter writes for it.
ATEN_TO_ONNX: Mapping[str, tuple[str, ...]] = {
    "aten.convolution": ("Conv",),
    "aten.relu": ("Relu",), "aten.sigmoid": ("Sigmoid",), "aten.tanh": ("Tanh",),
    "aten.exp": ("Exp",), "aten.neg": ("Neg",), "aten.sqrt": ("Sqrt",), "aten.abs": ("Abs",),
    "aten.log": ("Log",), "aten.erf": ("Erf",),
    "aten.add": ("Add",), "aten.sub": ("Sub",), "aten.mul": ("Mul",),
    "aten.div": ("Div",), "aten.maximum": ("Max",), "aten.minimum": ("Min",),
    "aten.pow": ("Pow",),
    "aten.mean": ("ReduceMean",), "aten.sum": ("ReduceSum",), "aten.amax": ("ReduceMax",),
    "aten.view": ("Reshape",), "aten._unsafe_view": ("Reshape",), "aten.reshape": ("Reshape",),
    "aten.squeeze": ("Squeeze",), "aten.unsqueeze": ("Unsqueeze",),
    "aten.permute": ("Transpose",), "aten.t": ("Transpose",),
    "aten.cat": ("Concat",),
    "aten.addmm": ("Gemm",), "aten.mm": ("MatMul",), "aten.bmm": ("MatMul",),
    "aten._softmax": ("Softmax",),
    "aten.native_layer_norm": ("LayerNormalization",),
    "aten.max_pool2d_with_indices": ("MaxPool",), "aten.avg_pool2d": ("AveragePool",),
    "aten.clone": ("Identity",), "aten.alias": ("Identity",),
}

_DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
                torch.int64: "int64", torch.int32: "int32", torch.int8: "int8", torch.uint8: "uint8",
                torch.bool: "bool"}


def onnx_ops_of(node: torch.fx.Node) -> tuple[str, ...] | None:
    """The ONNX ops the exporter writes for `node` (None when it has no known lowering)."""
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    return ATEN_TO_ONNX.get(str(packet)) if packet is not None else None


def _tensor_dtypes(node: torch.fx.Node) -> list[torch.dtype]:
    """Dtypes of the node's tensor inputs and of its outputs that are used (the unused
    indices of max_pool2d_with_indices never reach the chip)."""
    vals = [a.meta.get("val") for a in node.all_input_nodes]
    out_val = node.meta.get("val")
    if isinstance(out_val, (tuple, list)):
        used = {u.args[1] for u in node.users if u.target is operator.getitem and u.users}
        vals += [v for i, v in enumerate(out_val) if i in used]
    else:
        vals.append(out_val)
    out = []
    for v in vals:
        for t in v if isinstance(v, (tuple, list)) else (v,):
            if isinstance(t, torch.Tensor):
                out.append(t.dtype)
    return out


class CompilerSupport(OperatorSupportBase):
    """The nodes a compiler takes; ``reasons`` says why each other node was refused."""

    def __init__(self, compiler) -> None:
        self.compiler = compiler
        self.dtypes = tuple(getattr(compiler, "dtypes", ("float32",)))
        self.reasons: dict[str, str] = {}

    def why_not(self, node: torch.fx.Node) -> str | None:
        if node.op != "call_function":  # inputs, outputs and attributes are never partitioned
            return f"a {node.op} node"
        if node.target is operator.getitem:
            src = node.args[0]
            return None if isinstance(src, torch.fx.Node) and self.why_not(src) is None else \
                "takes an item of a node that is not offloaded"
        ops = onnx_ops_of(node)
        if ops is None:
            return f"{node.target} has no known ONNX lowering"
        for op in ops:
            why = self.compiler.op_support(op, "")
            if why:
                return f"{node.target} becomes ONNX {op}: {why}"
        for dt in _tensor_dtypes(node):
            name = _DTYPE_NAMES.get(dt, str(dt))
            if name not in self.dtypes:
                return f"{node.target} on {name} tensors: {self.compiler.name} takes {', '.join(self.dtypes)}"
        return None

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        why = self.why_not(node)
        if why and node.op == "call_function":
            self.reasons[node.name] = why
        return why is None
