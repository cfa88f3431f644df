"""Writer of the simulated device's graph artifact, format ``flagos-sim-plan-v1``.

The layout is the one src/sim/plan.hpp documents and the sim HAL's graph runtime parses:
numbered float32 buffers (graph inputs, outputs, constants, temporaries in the caller's
workspace) and a list of ops over them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

FORMAT = "flagos-sim-plan-v1"
MAGIC = b"FSIMPLN1"
MAX_DIMS = 8
ALIGN = 64

INPUT, OUTPUT, CONSTANT, TEMP = 0, 1, 2, 3

# Op codes and function numbers (plan.hpp).
UNARY, BINARY, GEMM, CONV2D, POOL2D, REDUCE, SOFTMAX, LAYERNORM, STRIDED, CONCAT = range(1, 11)
UNARY_FNS = {"Relu": 0, "Sigmoid": 1, "Tanh": 2, "Exp": 3, "Neg": 4, "Sqrt": 5, "Erf": 6,
             "Copy": 7, "Abs": 8, "Log": 9}
BINARY_FNS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Max": 4, "Min": 5, "Pow": 6}


def float_bits(x: float) -> int:
    """A float attribute as the i64 holding its double's bits."""
    return struct.unpack("<q", struct.pack("<d", float(x)))[0]


@dataclass
class Buffer:
    kind: int
    shape: tuple[int, ...]
    name: str
    offset: int = 0

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * 4


@dataclass
class Plan:
    buffers: list[Buffer] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    ops: list[tuple[int, list[int], list[int]]] = field(default_factory=list)
    constants: bytearray = field(default_factory=bytearray)
    workspace: int = 0

    def add(self, kind: int, shape, name: str, data: np.ndarray | None = None) -> int:
        shape = tuple(int(d) for d in shape)
        if len(shape) > MAX_DIMS:
            raise ValueError(f"{name}: rank {len(shape)} is over the plan's {MAX_DIMS}")
        buf = Buffer(kind, shape, name[:63])
        if kind == CONSTANT:
            self.constants.extend(b"\0" * (-len(self.constants) % ALIGN))
            buf.offset = len(self.constants)
            self.constants.extend(np.ascontiguousarray(data, dtype="<f4").tobytes())
        elif kind == TEMP:
            buf.offset = self.workspace
            self.workspace += buf.nbytes + (-buf.nbytes % ALIGN)
        self.buffers.append(buf)
        index = len(self.buffers) - 1
        if kind == INPUT:
            self.inputs.append(index)
        return index

    def op(self, code: int, args: list[int], attrs: list[int]) -> None:
        self.ops.append((code, [int(a) for a in args], [int(a) for a in attrs]))

    def serialize(self) -> bytes:
        out = bytearray(MAGIC)
        out += struct.pack("<4IQ", len(self.buffers), len(self.inputs), len(self.outputs),
                           len(self.ops), len(self.constants))
        for b in self.buffers:
            shape = list(b.shape) + [0] * (MAX_DIMS - len(b.shape))
            out += struct.pack(f"<II{MAX_DIMS}qQ64s", b.kind, len(b.shape), *shape, b.offset,
                               b.name.encode()[:63])
        out += struct.pack(f"<{len(self.inputs)}I", *self.inputs)
        out += struct.pack(f"<{len(self.outputs)}I", *self.outputs)
        for code, args, attrs in self.ops:
            out += struct.pack(f"<3I{len(args)}I{len(attrs)}q", code, len(args), len(attrs), *args,
                               *attrs)
        out += self.constants
        return bytes(out)
