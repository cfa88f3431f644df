"""The simulated device's graph compiler: ONNX (float32, static shapes) to a
``flagos-sim-plan-v1`` artifact that the sim HAL's graph runtime executes.

Registered as the ``flagos.graph_compiler`` entry point ``sim``. Settings, read when the
compiler is made, so that partitioning and fallback can be tested:

- ``FLAGOS_SIM_GRAPH_UNSUPPORTED=Relu,Tanh``: these ONNX ops are reported unsupported.
- ``FLAGOS_SIM_GRAPH_FAIL=Gemm``: compiling a model that holds one of these ops fails with
  a CompileError (an injected compiler failure, as FLAGOS_SIM_FAULT injects device faults).

Needs the ``onnx`` package (``pip install flagos-hal[graph]``).
"""

from __future__ import annotations

import os

import numpy as np

from flagos_hal import sim_plan as P
from flagos_hal.graph_compiler import CompileError

VERSION = "0.1.0"

_UNARY = {"Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Sqrt", "Erf", "Abs", "Log"}
_BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"}
_RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}
_OTHERS = {"MatMul", "Gemm", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "ReduceMean",
           "ReduceSum", "ReduceMax", "Softmax", "LayerNormalization", "Transpose", "Concat",
           "Constant"}
SUPPORTED = frozenset(_UNARY | _BINARY | _RESHAPES | _OTHERS)


def _env_list(name: str) -> frozenset[str]:
    return frozenset(x.strip() for x in os.environ.get(name, "").split(",") if x.strip())


def _import_onnx():
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError as e:
        raise CompileError("the sim graph compiler needs the 'onnx' package, which is not "
                           "installed: pip install 'flagos-hal[graph]'") from e
    return onnx, numpy_helper


class SimGraphCompiler:
    """ONNX -> flagos-sim-plan-v1 (see the module docstring for its settings)."""

    name = "flagos-sim-compiler"
    version = VERSION
    formats = (P.FORMAT,)

    def __init__(self) -> None:
        self.unsupported = _env_list("FLAGOS_SIM_GRAPH_UNSUPPORTED")
        self.fail_on = _env_list("FLAGOS_SIM_GRAPH_FAIL")

    def op_support(self, op_type: str, domain: str = "") -> str | None:
        if domain not in ("", "ai.onnx"):
            return f"ONNX domain '{domain}' is not supported by {self.name}"
        if op_type in self.unsupported:
            return f"{op_type} is made unsupported by FLAGOS_SIM_GRAPH_UNSUPPORTED"
        if op_type not in SUPPORTED:
            return f"{self.name} has no kernel for ONNX op {op_type}"
        return None

    def settings(self) -> str:
        return f"unsupported={sorted(self.unsupported)}"

    def compile(self, onnx_model: bytes, fmt: str) -> bytes:
        if fmt != P.FORMAT:
            raise CompileError(f"{self.name} writes {P.FORMAT}, not '{fmt}'")
        onnx, numpy_helper = _import_onnx()
        try:
            model = onnx.load_from_string(onnx_model)
        except Exception as e:  # onnx raises DecodeError and friends
            raise CompileError(f"not a valid ONNX model: {e}") from e
        for node in model.graph.node:
            why = self.op_support(node.op_type, node.domain)
            if why:
                raise CompileError(f"node '{node.name}': {why}")
            if node.op_type in self.fail_on:
                raise CompileError(f"node '{node.name}' ({node.op_type}): injected compiler failure "
                                   "(FLAGOS_SIM_GRAPH_FAIL)")
        return _Lowering(model, numpy_helper).run().serialize()


def make() -> SimGraphCompiler:
    """The entry point ``flagos.graph_compiler: sim``."""
    return SimGraphCompiler()


def _strides(shape) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def _broadcast_strides(shape, out_shape) -> list[int]:
    """Element strides of a contiguous `shape` read as `out_shape` (numpy broadcasting)."""
    shape = [1] * (len(out_shape) - len(shape)) + list(shape)
    return [0 if d == 1 and o != 1 else s for d, o, s in zip(shape, out_shape, _strides(shape))]


class _Value:
    """A value of the ONNX graph: a constant known here, or a plan buffer."""

    def __init__(self, shape, buffer: int | None = None, const: np.ndarray | None = None):
        self.shape = tuple(int(d) for d in shape)
        self.buffer = buffer
        self.const = const


class _Lowering:
    def __init__(self, model, numpy_helper):
        self.g = model.graph
        self.nh = numpy_helper
        self.plan = P.Plan()
        self.values: dict[str, _Value] = {}

    def fail(self, node, why: str):
        raise CompileError(f"node '{node.name}' ({node.op_type}): {why}")

    def run(self) -> P.Plan:
        for init in self.g.initializer:
            arr = self.nh.to_array(init)
            self.values[init.name] = _Value(arr.shape, const=arr)
        for inp in self.g.input:
            if inp.name in self.values:
                continue
            t = inp.type.tensor_type
            if t.elem_type != 1:
                raise CompileError(f"input '{inp.name}': only float32 inputs are supported")
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
            if any(d < 0 for d in dims):
                raise CompileError(f"input '{inp.name}' has a dynamic shape; the sim plan needs "
                                   "static shapes")
            self.values[inp.name] = _Value(dims, self.plan.add(P.INPUT, dims, inp.name))
        for node in self.g.node:
            self.lower(node)
        for out in self.g.output:
            v = self.values[out.name]
            src = self.buf(v, out.name)
            dst = self.plan.add(P.OUTPUT, v.shape, out.name)
            self.plan.outputs.append(dst)
            self.plan.op(P.UNARY, [src, dst], [P.UNARY_FNS["Copy"]])
        return self.plan

    # ---- helpers ---------------------------------------------------------------------
    def attrs(self, node) -> dict:
        from onnx import helper
        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def buf(self, v: _Value, name: str) -> int:
        """The buffer of a value; a constant becomes a constant buffer on first use."""
        if v.buffer is None:
            if v.const.dtype.kind not in "fiub":
                raise CompileError(f"constant '{name}' of dtype {v.const.dtype} is not supported")
            v.buffer = self.plan.add(P.CONSTANT, v.shape, name, v.const.astype(np.float32))
        return v.buffer

    def temp(self, name: str, shape) -> _Value:
        v = _Value(shape, self.plan.add(P.TEMP, shape, name))
        self.values[name] = v
        return v

    def const_of(self, node, name: str) -> np.ndarray:
        v = self.values.get(name)
        if v is None or v.const is None:
            self.fail(node, f"input '{name}' must be a constant")
        return v.const

    # ---- ops -------------------------------------------------------------------------
    def lower(self, node) -> None:
        op, a = node.op_type, self.attrs(node)
        ins = [self.values.get(n) if n else None for n in node.input]
        out = node.output[0]
        if op == "Constant":
            t = a.get("value")
            if t is None:
                self.fail(node, "only the 'value' attribute is supported")
            arr = self.nh.to_array(t)
            self.values[out] = _Value(arr.shape, const=arr)
        elif op in _UNARY:
            r = self.temp(out, ins[0].shape)
            self.plan.op(P.UNARY, [self.buf(ins[0], node.input[0]), r.buffer], [P.UNARY_FNS[op]])
        elif op in _BINARY:
            self.binary(node, op, ins, out)
        elif op in _RESHAPES:
            self.reshape(node, op, a, ins, out)
        elif op in ("MatMul", "Gemm"):
            self.gemm(node, op, a, ins, out)
        elif op == "Conv":
            self.conv(node, a, ins, out)
        elif op in ("MaxPool", "AveragePool", "GlobalAveragePool"):
            self.pool(node, op, a, ins, out)
        elif op in ("ReduceMean", "ReduceSum", "ReduceMax"):
            self.reduce(node, op, a, ins, out)
        elif op == "Softmax":
            shape = ins[0].shape
            axis = a.get("axis", -1) % len(shape)
            r = self.temp(out, shape)
            self.plan.op(P.SOFTMAX, [self.buf(ins[0], node.input[0]), r.buffer],
                         [int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:]))])
        elif op == "LayerNormalization":
            shape = ins[0].shape
            axis = a.get("axis", -1) % len(shape)
            r = self.temp(out, shape)
            args = [self.buf(ins[0], node.input[0])]
            extra = [self.buf(v, n) for v, n in zip(ins[1:3], node.input[1:3]) if v is not None]
            self.plan.op(P.LAYERNORM, args + extra + [r.buffer],
                         [int(np.prod(shape[:axis])), int(np.prod(shape[axis:])),
                          P.float_bits(a.get("epsilon", 1e-5)), int(len(ins) > 1 and ins[1] is not None),
                          int(len(ins) > 2 and ins[2] is not None)])
            if len(node.output) > 1 and any(node.output[1:]):
                self.fail(node, "the mean and inverse-std outputs are not supported")
        elif op == "Transpose":
            shape = ins[0].shape
            perm = list(a.get("perm", reversed(range(len(shape)))))
            src_strides = _strides(shape)
            out_shape = [shape[p] for p in perm]
            r = self.temp(out, out_shape)
            self.plan.op(P.STRIDED, [self.buf(ins[0], node.input[0]), r.buffer],
                         [len(perm), *out_shape, *[src_strides[p] for p in perm], 0])
        elif op == "Concat":
            shape = list(ins[0].shape)
            axis = a["axis"] % len(shape)
            total = sum(v.shape[axis] for v in ins)
            out_shape = shape[:axis] + [total] + shape[axis + 1:]
            r = self.temp(out, out_shape)
            outer = int(np.prod(shape[:axis]))
            chunks = [int(np.prod(v.shape[axis:])) for v in ins]
            self.plan.op(P.CONCAT, [self.buf(v, n) for v, n in zip(ins, node.input)] + [r.buffer],
                         [outer, len(ins), *chunks])
        else:  # op_support let it through: a gap between SUPPORTED and this method
            self.fail(node, "not lowered")

    def binary(self, node, op, ins, out) -> None:
        a, b = ins
        if a.const is not None and b.const is not None:
            fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
                  "Max": np.maximum, "Min": np.minimum, "Pow": np.power}[op]
            res = fn(a.const, b.const)
            self.values[out] = _Value(res.shape, const=res)
            return
        try:
            shape = np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            self.fail(node, f"shapes {a.shape} and {b.shape} do not broadcast")
        r = self.temp(out, shape)
        nd = len(shape)
        self.plan.op(P.BINARY, [self.buf(a, node.input[0]), self.buf(b, node.input[1]), r.buffer],
                     [P.BINARY_FNS[op], nd, *shape, *_broadcast_strides(a.shape, shape),
                      *_broadcast_strides(b.shape, shape)])

    def reshape(self, node, op, a, ins, out) -> None:
        x = ins[0]
        shape = list(x.shape)
        if op == "Reshape":
            target = [int(d) for d in self.const_of(node, node.input[1])]
            new = [shape[i] if d == 0 and not a.get("allowzero", 0) else d for i, d in enumerate(target)]
            if -1 in new:
                known = int(np.prod([d for d in new if d != -1]))
                new[new.index(-1)] = int(np.prod(shape)) // max(known, 1)
        elif op == "Flatten":
            axis = a.get("axis", 1) % (len(shape) or 1) if shape else 0
            new = [int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))]
        elif op == "Squeeze":
            axes = (self.const_of(node, node.input[1]).tolist() if len(node.input) > 1
                    else [i for i, d in enumerate(shape) if d == 1])
            axes = [ax % len(shape) for ax in axes]
            new = [d for i, d in enumerate(shape) if i not in axes]
        elif op == "Unsqueeze":
            axes = self.const_of(node, node.input[1]).tolist()
            rank = len(shape) + len(axes)
            axes = sorted(ax % rank for ax in axes)
            new = list(shape)
            for ax in axes:
                new.insert(ax, 1)
        else:
            new = shape
        if int(np.prod(new)) != int(np.prod(shape)):
            self.fail(node, f"cannot reshape {shape} to {new}")
        if x.const is not None:
            self.values[out] = _Value(new, const=x.const.reshape(new))
            return
        r = self.temp(out, new)
        self.plan.op(P.UNARY, [x.buffer, r.buffer], [P.UNARY_FNS["Copy"]])

    def gemm(self, node, op, a, ins, out) -> None:
        A, B = ins[0], ins[1]
        if op == "Gemm":
            ta, tb = a.get("transA", 0), a.get("transB", 0)
            M, K = (A.shape[1], A.shape[0]) if ta else A.shape
            N = B.shape[0] if tb else B.shape[1]
            a_st = [0, 1, K] if ta else [0, K, 1]
            b_st = [0, 1, K] if tb else [0, N, 1]
            batch, out_shape = 1, [M, N]
            alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
            C = ins[2] if len(ins) > 2 else None
        else:
            if len(A.shape) < 2 or len(B.shape) < 2:
                self.fail(node, "MatMul of a vector is not supported")
            M, K = A.shape[-2:]
            N = B.shape[-1]
            a_batch, b_batch = A.shape[:-2], B.shape[:-2]
            if b_batch and a_batch and a_batch != b_batch:
                self.fail(node, f"MatMul batch shapes {a_batch} and {b_batch} differ")
            batch_shape = a_batch or b_batch
            batch = int(np.prod(batch_shape)) if batch_shape else 1
            a_st = [M * K if a_batch else 0, K, 1]
            b_st = [K * N if b_batch else 0, N, 1]
            out_shape = [*batch_shape, M, N]
            alpha, beta, C = 1.0, 0.0, None
        if B.shape[-2 if op == "MatMul" else (1 if a.get("transB", 0) else 0)] != K:
            self.fail(node, f"inner sizes of {A.shape} and {B.shape} differ")
        r = self.temp(out, out_shape)
        args = [self.buf(A, node.input[0]), self.buf(B, node.input[1])]
        c_st = [0, 0, 0]
        if C is not None:
            cs = _broadcast_strides(C.shape, [M, N])
            c_st = [0, *cs]
            args.append(self.buf(C, node.input[2]))
        self.plan.op(P.GEMM, args + [r.buffer],
                     [batch, M, N, K, *a_st, *b_st, int(C is not None), *c_st, P.float_bits(alpha),
                      P.float_bits(beta)])

    def conv(self, node, a, ins, out) -> None:
        x, w = ins[0], ins[1]
        if len(x.shape) != 4:
            self.fail(node, "only 2-D convolutions are supported")
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            self.fail(node, "auto_pad is not supported")
        N, C, H, W = x.shape
        OC, _, KH, KW = w.shape
        sh, sw = a.get("strides", [1, 1])
        dh, dw = a.get("dilations", [1, 1])
        pt, pl, pb, pr = a.get("pads", [0, 0, 0, 0])
        if pt != pb or pl != pr:
            self.fail(node, "asymmetric padding is not supported")
        g = a.get("group", 1)
        OH = (H + 2 * pt - dh * (KH - 1) - 1) // sh + 1
        OW = (W + 2 * pl - dw * (KW - 1) - 1) // sw + 1
        r = self.temp(out, [N, OC, OH, OW])
        has_bias = len(ins) > 2 and ins[2] is not None
        args = [self.buf(x, node.input[0]), self.buf(w, node.input[1])]
        if has_bias:
            args.append(self.buf(ins[2], node.input[2]))
        self.plan.op(P.CONV2D, args + [r.buffer],
                     [N, C, H, W, OC, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw, g, int(has_bias)])

    def pool(self, node, op, a, ins, out) -> None:
        x = ins[0]
        if len(x.shape) != 4:
            self.fail(node, "only 2-D pooling is supported")
        N, C, H, W = x.shape
        if op == "GlobalAveragePool":
            KH, KW, sh, sw, pt, pl, include, kind = H, W, 1, 1, 0, 0, 0, 1
        else:
            if a.get("ceil_mode", 0) or any(d != 1 for d in a.get("dilations", [1, 1])):
                self.fail(node, "ceil_mode and dilations are not supported")
            if len(node.output) > 1 and node.output[1]:
                self.fail(node, "the indices output is not supported")
            KH, KW = a["kernel_shape"]
            sh, sw = a.get("strides", [1, 1])
            pt, pl, pb, pr = a.get("pads", [0, 0, 0, 0])
            if pt != pb or pl != pr:
                self.fail(node, "asymmetric padding is not supported")
            include = a.get("count_include_pad", 0)
            kind = 0 if op == "MaxPool" else 1
        OH = (H + 2 * pt - KH) // sh + 1
        OW = (W + 2 * pl - KW) // sw + 1
        r = self.temp(out, [N, C, OH, OW])
        self.plan.op(P.POOL2D, [self.buf(x, node.input[0]), r.buffer],
                     [kind, N, C, H, W, KH, KW, OH, OW, sh, sw, pt, pl, include])

    def reduce(self, node, op, a, ins, out) -> None:
        x = ins[0]
        shape = list(x.shape)
        if len(node.input) > 1 and node.input[1]:
            axes = self.const_of(node, node.input[1]).tolist()
        else:
            axes = a.get("axes", list(range(len(shape))))
        axes = sorted(ax % len(shape) for ax in axes)
        if axes != list(range(axes[0], axes[-1] + 1)):
            self.fail(node, f"axes {axes} are not contiguous")
        keep = a.get("keepdims", 1)
        outer = int(np.prod(shape[:axes[0]]))
        red = int(np.prod(shape[axes[0]:axes[-1] + 1]))
        inner = int(np.prod(shape[axes[-1] + 1:]))
        out_shape = [1 if i in axes else d for i, d in enumerate(shape)] if keep else \
            [d for i, d in enumerate(shape) if i not in axes]
        r = self.temp(out, out_shape)
        kind = {"ReduceMean": 0, "ReduceSum": 1, "ReduceMax": 2}[op]
        self.plan.op(P.REDUCE, [self.buf(x, node.input[0]), r.buffer], [kind, outer, red, inner])
