"""OpInfo samples in the form of ATen overloads whose schema is not the Python function's.

An OpInfo entry tests a Python function (``torch.softmax``, ``F.rms_norm``); the replay
admission calls ATen overloads. Where the two take the same arguments a sample is used as
it is; for the overloads below (the hot ops of a training step, their backwards among
them) each sample of the named entry is turned into the overload's arguments, or left out
where the overload has no such call (a ``dtype`` the function casts to first, a
``max_norm`` it applies before the lookup).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["ATEN_FORMS", "AtenForm"]

# (input, args, kwargs) of a sample -> (args, kwargs) of the overload, or None
Adapter = Callable[[torch.Tensor, tuple, dict], "tuple[tuple, dict] | None"]


class AtenForm:
    """Which OpInfo entry's samples an overload takes, and how."""

    def __init__(self, opinfo: str, adapt: Adapter) -> None:
        self.opinfo = opinfo
        self.adapt = adapt


def _grad_like(t: torch.Tensor) -> torch.Tensor:
    """A gradient of ``t``'s shape and dtype, fixed by the shape (samples stay reproducible)."""
    g = torch.Generator().manual_seed(t.numel())
    return torch.randn(t.shape, generator=g).to(t.dtype)


def _softmax(x, args, kw):
    return None if kw else ((x, args[0], False), {})


def _softmax_backward(forward: Callable) -> Adapter:
    def adapt(x, args, kw):
        if kw:
            return None
        y = forward(x, args[0], False)
        return (_grad_like(y), y, args[0], x.dtype), {}
    return adapt


def _pointwise(x, args, kw):
    return (x,), {}


def _silu_backward(x, args, kw):
    return (_grad_like(x), x), {}


def _fused_rms_norm(x, args, kw):
    shape, weight = args[0], args[1] if len(args) > 1 else kw.get("weight")
    return (x, list(shape), weight, kw.get("eps")), {}


def _embedding(weight, args, kw):
    if kw.get("max_norm") is not None or kw.get("sparse"):
        return None
    padding_idx = kw.get("padding_idx")
    return (weight, args[0], -1 if padding_idx is None else padding_idx % weight.shape[0]), {}


def _embedding_backward(weight, args, kw):
    form = _embedding(weight, args, kw)
    if form is None:
        return None
    (_, indices, padding_idx), _ = form
    grad = _grad_like(torch.empty(*indices.shape, weight.shape[1], dtype=weight.dtype))
    return (grad, indices, weight.shape[0], padding_idx, bool(kw.get("scale_grad_by_freq"))), {}


_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _nll_loss_forward(x, args, kw):
    if x.dim() > 2:  # nll_loss2d's
        return None
    return (x, args[0], kw.get("weight"), _REDUCTIONS[kw.get("reduction", "mean")],
            kw.get("ignore_index", -100)), {}


def _where(x, args, kw):
    return (args[0], x, args[1]), {}


def _first_value(t: object) -> object:
    return t.flatten()[0].item() if isinstance(t, torch.Tensor) else t


def _tensor_scalar(x, args, kw):
    if kw or not args or (isinstance(args[0], torch.Tensor) and args[0].numel() == 0):
        return None
    return (x, _first_value(args[0])), {}


ATEN_FORMS: dict[str, AtenForm] = {
    "aten::_softmax": AtenForm("softmax", _softmax),
    "aten::_log_softmax": AtenForm("log_softmax", _softmax),
    "aten::_softmax_backward_data": AtenForm("softmax", _softmax_backward(torch.ops.aten._softmax)),
    "aten::_log_softmax_backward_data": AtenForm("log_softmax",
                                                 _softmax_backward(torch.ops.aten._log_softmax)),
    "aten::silu": AtenForm("nn.functional.silu", _pointwise),
    "aten::silu_backward": AtenForm("nn.functional.silu", _silu_backward),
    "aten::_fused_rms_norm": AtenForm("nn.functional.rms_norm", _fused_rms_norm),
    "aten::embedding": AtenForm("nn.functional.embedding", _embedding),
    "aten::embedding_dense_backward": AtenForm("nn.functional.embedding", _embedding_backward),
    "aten::nll_loss_forward": AtenForm("nn.functional.nll_loss", _nll_loss_forward),
    "aten::where.self": AtenForm("where", _where),
    "aten::pow.Tensor_Scalar": AtenForm("pow", _tensor_scalar),
    "aten::div.Scalar": AtenForm("div", _tensor_scalar),
}
