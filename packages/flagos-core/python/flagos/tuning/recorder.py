"""Recording a workload: run a model once and note every op call that the routing table
routes, with its arguments' shapes, strides and dtypes.

The recorder is a ``TorchDispatchMode``: it sees each ATen call below autograd, as it
enters the flagos device, which is where the routing table applies (composite ops such as
``linear`` have already become ``mm``/``addmm``; views and the runtime's own kernels are
seen too). It keeps the calls of the ops that the routing table actually routed during the
recording (their counters in :func:`flagos.routing.stats` moved), so the workload holds what
the table routes and nothing the runtime serves itself. Replaying a recorded call makes the
same call, so it reaches the device through the same path (a structured op's fast kernel,
or its out= form) as in the model.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from flagos import routing

from .workload import OpCall, UnsupportedArgument, Workload, encode_value

if TYPE_CHECKING:
    from typing import Self

__all__ = ["Recorder", "record"]


def _op_name(func: torch._ops.OpOverload) -> str:
    s = func._schema
    return f"{s.name}.{s.overload_name}" if s.overload_name else s.name


def _on_flagos(args: tuple, kwargs: dict) -> bool:
    return any(isinstance(x, torch.Tensor) and x.device.type == "flagos"
               for x in tree_flatten((args, kwargs))[0])


def _routed_calls() -> dict[str, int]:
    """Routed calls so far per whole op (every provider's, the declined ones included)."""
    out: dict[str, int] = {}
    for op, rows in routing.stats().items():
        whole = routing.ops.split(op)[0]
        out[whole] = out.get(whole, 0) + sum(r["calls"] + r["declined"] for r in rows.values())
    return out


_COMPOSITE = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)


def _decomposes(func: torch._ops.OpOverload) -> bool:
    """Whether the op runs on flagos as its CompositeExplicitAutograd kernel (embedding
    is index_select): the ops that kernel calls, not the op, reach the routing table.
    Views (detach, alias) are left alone: they never reach it."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    name = func.name()
    if any(r.alias_info is not None for r in func._schema.returns):
        return False
    return has(name, "CompositeExplicitAutograd") and not has(name, "PrivateUse1")


class _Mode(TorchDispatchMode):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder
        self.decomposing: set[torch._ops.OpOverload] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not _on_flagos(args, kwargs):
            return func(*args, **kwargs)
        if func not in self.decomposing and _decomposes(func):
            self.decomposing.add(func)
            try:
                with self:  # record the ops the composite kernel calls
                    return func.redispatch(_COMPOSITE, *args, **kwargs)
            finally:
                self.decomposing.discard(func)
        self.recorder._note(func, args, kwargs)  # before the call: in-place ops mutate
        return func(*args, **kwargs)


class Recorder:
    """The context manager :func:`record` returns; ``workload`` holds the result on exit."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.workload = Workload(name)
        self._calls: dict[str, OpCall] = {}
        self._mode = _Mode(self)
        self._before: dict[str, int] = {}

    def _note(self, func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> None:
        name = _op_name(func)
        try:
            call = OpCall(name, [encode_value(a) for a in args],
                          {k: encode_value(v) for k, v in kwargs.items()})
        except UnsupportedArgument as e:
            self.workload.skipped.setdefault(name, str(e))
            return
        key = call.key()
        if key in self._calls:
            self._calls[key].count += 1
        else:
            self._calls[key] = call

    def __enter__(self) -> Self:
        self._before = _routed_calls()
        self._mode.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._mode.__exit__(exc_type, exc, tb)
        after = _routed_calls()
        routed = {op for op, n in after.items() if n > self._before.get(op, 0)}
        self.workload.calls = [c for c in self._calls.values() if c.whole_op in routed]


def record(name: str = "recorded") -> Recorder:
    """Record the routed op calls made inside a ``with`` block as a workload::

        with flagos.tuning.record("my-model") as rec:
            loss = model(batch).sum(); loss.backward()
        rec.workload.save("my-model.workload.json")
    """
    return Recorder(name)
