"""Workloads: the op calls a tuner measures, as data that can be saved, reviewed and replayed.

A workload is a list of op calls, each an ATen overload with its arguments and how many
times the model made that call. Tensor arguments are described, not stored: shape,
strides, storage offset and dtype; the values of integer and boolean tensors (indices,
masks, targets) are kept when they are small, since an op's work depends on them (an
embedding's indices must be in range), and floating-point tensors get random values at
replay. The JSON file::

    {"format": "flagos-workload", "version": 1, "name": "tinyllama-train",
     "calls": [{"op": "aten::mm", "count": 12,
                "args": [{"tensor": {"shape": [64, 128], "stride": [128, 1], "offset": 0,
                                     "dtype": "float32"}}, ...],
                "kwargs": {}}, ...]}

Other argument values are JSON numbers, strings, booleans, null and lists, or tagged
objects: ``{"dtype": "bfloat16"}``, ``{"device": "flagos"}``, ``{"layout": "strided"}``,
``{"memory_format": "contiguous_format"}``, ``{"float": "inf"}``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from flagos.routing import ops

__all__ = ["FORMAT", "OpCall", "UnsupportedArgument", "Workload", "decode_value", "encode_value"]

FORMAT = "flagos-workload"
VERSION = 1
# Integer and boolean tensors up to this many elements keep their values.
MAX_KEPT_VALUES = 1 << 16

_MEMORY_FORMATS = {str(f).removeprefix("torch."): f for f in (
    torch.contiguous_format, torch.channels_last, torch.channels_last_3d,
    torch.preserve_format)}
_LAYOUTS = {str(f).removeprefix("torch."): f for f in (torch.strided, torch.sparse_coo)}


class UnsupportedArgument(TypeError):
    """An argument the workload format cannot describe (a generator, a Python object)."""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} in workload")  # noqa: TRY004 - a bad value
    return dtype


def _exact(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex)


def encode_value(v: object) -> object:
    """The JSON description of one op argument (see the module docstring)."""
    if isinstance(v, torch.Tensor):
        t: dict[str, object] = {"shape": list(v.shape), "stride": list(v.stride()),
                                "offset": int(v.storage_offset()), "dtype": _dtype_name(v.dtype)}
        if v.device.type != "flagos":
            t["device"] = v.device.type
        if _exact(v.dtype) and v.numel():
            values = v.detach().cpu()
            if v.numel() <= MAX_KEPT_VALUES:
                t["values"] = values.contiguous().flatten().tolist()  # in logical order
            else:
                t["range"] = [values.min().item(), values.max().item()]
        return {"tensor": t}
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"float": str(v)}
    if isinstance(v, (list, tuple)):
        return [encode_value(x) for x in v]
    if isinstance(v, torch.dtype):
        return {"dtype": _dtype_name(v)}
    if isinstance(v, torch.device):
        return {"device": v.type}
    if isinstance(v, torch.layout):
        return {"layout": str(v).removeprefix("torch.")}
    if isinstance(v, torch.memory_format):
        return {"memory_format": str(v).removeprefix("torch.")}
    raise UnsupportedArgument(f"cannot describe a {type(v).__name__} argument")


def _make_tensor(t: dict, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    dtype = _dtype(t["dtype"])
    shape, stride, offset = list(t["shape"]), list(t["stride"]), int(t.get("offset", 0))
    if any(n == 0 for n in shape):
        span = offset
    else:
        span = offset + 1 + sum((n - 1) * s for n, s in zip(shape, stride))
    # One storage holding every element at the described strides and offset.
    if dtype.is_floating_point or dtype.is_complex:
        base = torch.randn(span, generator=gen, dtype=torch.float32).to(dtype)
    elif dtype == torch.bool:
        base = torch.randint(0, 2, (span,), generator=gen).bool()
    else:
        lo, hi = t.get("range", [0, 1])
        base = torch.randint(int(lo), int(hi) + 1, (span,), generator=gen).to(dtype)
    if "values" in t and span:
        base.as_strided(shape, stride, offset).copy_(
            torch.tensor(t["values"], dtype=dtype).reshape(shape))
    if t.get("device", "flagos") != "flagos":
        return base.as_strided(shape, stride, offset)
    return base.to(device).as_strided(shape, stride, offset)


def decode_value(v: object, device: torch.device, gen: torch.Generator) -> object:
    """An argument from its description: tensors are made on ``device`` (random floats from
    ``gen``; integer and boolean tensors with their recorded values)."""
    if isinstance(v, list):
        return [decode_value(x, device, gen) for x in v]
    if not isinstance(v, dict):
        return v
    if "tensor" in v:
        return _make_tensor(v["tensor"], device, gen)
    if "dtype" in v:
        return _dtype(v["dtype"])
    if "device" in v:
        return device if v["device"] == "flagos" else torch.device(v["device"])
    if "layout" in v:
        return _LAYOUTS[v["layout"]]
    if "memory_format" in v:
        return _MEMORY_FORMATS[v["memory_format"]]
    if "float" in v:
        return float(v["float"])
    raise ValueError(f"unknown argument description {v!r:.80} in workload")


def _tensor_summary(v: object) -> list[str]:
    if isinstance(v, list):
        return [s for x in v for s in _tensor_summary(x)]
    if isinstance(v, dict) and "tensor" in v:
        t = v["tensor"]
        return [f"{t['shape']} {t['dtype']}"]
    return []


@dataclass
class OpCall:
    """One distinct call: ``op`` (``aten::mm``, ``aten::add.Tensor``), its described
    arguments, and ``count``, how often the workload makes it."""

    op: str
    args: list
    kwargs: dict
    count: int = 1

    @property
    def whole_op(self) -> str:
        """The whole-op name (``aten::add`` for ``aten::add.Tensor``): the routing key the
        tuner writes, which covers every overload the call may arrive as."""
        ns, _, rest = self.op.partition("::")
        return ns + "::" + rest.partition(".")[0]

    def overload(self) -> torch._ops.OpOverload:
        """The ATen overload."""
        try:
            return ops.overload(self.op)
        except ValueError:
            raise ValueError(f"unknown op {self.op!r} in workload") from None

    def inputs(self, device: torch.device, seed: int = 0) -> tuple[list, dict]:
        """Fresh arguments on ``device`` (the same values for the same seed)."""
        gen = torch.Generator().manual_seed(seed)
        args = [decode_value(a, device, gen) for a in self.args]
        kwargs = {k: decode_value(v, device, gen) for k, v in self.kwargs.items()}
        return args, kwargs

    def signature(self) -> str:
        """The inputs in short (``[64, 128] float32 x [128, 512] float32``), for comments."""
        parts = _tensor_summary(self.args) + _tensor_summary(list(self.kwargs.values()))
        return " x ".join(parts) or "no tensors"

    def key(self) -> str:
        """What makes two calls the same call."""
        return json.dumps([self.op, self.args, self.kwargs], sort_keys=True)

    def to_json(self) -> dict:
        return {"op": self.op, "count": self.count, "args": self.args, "kwargs": self.kwargs}


@dataclass
class Workload:
    """Named op calls (see the module docstring); ``skipped`` notes the calls a recorder
    could not describe."""

    name: str
    calls: list[OpCall] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def add(self, call: OpCall) -> None:
        """Add a call, merging it into an identical one (their counts add)."""
        for c in self.calls:
            if c.op == call.op and c.key() == call.key():
                c.count += call.count
                return
        self.calls.append(call)

    def ops(self) -> list[str]:
        """The whole ops of the workload, in first-call order."""
        return list(dict.fromkeys(c.whole_op for c in self.calls))

    def select(self, ops: Iterable[str]) -> Workload:
        """The calls of the given ops (whole ops or overloads) only."""
        wanted = set(ops)
        return Workload(self.name, [c for c in self.calls
                                    if c.op in wanted or c.whole_op in wanted], dict(self.skipped))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the workload as JSON."""
        data = {"format": FORMAT, "version": VERSION, "name": self.name,
                "calls": [c.to_json() for c in self.calls], "skipped": self.skipped}
        Path(path).write_text(json.dumps(data, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Workload:
        """Read a workload file; raises ValueError naming the file when it is not one."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not a readable workload file: {e}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{path}: not a flagos workload file (no \"format\": \"{FORMAT}\")")
        if data.get("version") != VERSION:
            raise ValueError(f"{path}: workload version {data.get('version')!r}; this flagos "
                             f"reads version {VERSION}")
        w = cls(str(data.get("name", Path(path).stem)), skipped=dict(data.get("skipped", {})))
        for i, c in enumerate(data.get("calls", [])):
            try:
                call = OpCall(str(c["op"]), list(c.get("args", [])), dict(c.get("kwargs", {})),
                              int(c.get("count", 1)))
                call.overload()
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{path}: call {i}: {e}") from None
            w.calls.append(call)
        return w
