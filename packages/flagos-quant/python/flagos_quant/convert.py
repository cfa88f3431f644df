"""Turning a full-precision model skeleton into one with packed-weight layers."""

from __future__ import annotations

import torch
from torch import nn

from .checkpoint_config import QuantSpec
from .modules import FP8Linear, NVFP4Linear, QuantLinear

__all__ = ["replace_linears"]


def _new_layer(spec: QuantSpec, old: nn.Linear, dtype: torch.dtype) -> QuantLinear:
    kw = {"bias": old.bias is not None, "dtype": dtype, "device": old.weight.device}
    if spec.algo == "FP8":
        return FP8Linear(old.in_features, old.out_features, **kw)
    if spec.algo == "NVFP4":
        return NVFP4Linear(old.in_features, old.out_features, block_size=spec.group_size, **kw)
    raise ValueError(f"no layer for quantization algorithm {spec.algo!r}")


def replace_linears(model: nn.Module, spec: QuantSpec,
                    dtype: torch.dtype | None = None) -> list[str]:
    """Replace every ``nn.Linear`` of ``model`` that ``spec`` stores quantized by the
    matching packed-weight layer (new tensors, on the old weight's device: the meta device
    while transformers builds a model); returns the names of the replaced layers."""
    replaced = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is nn.Linear and spec.converts(full):
                layer_dtype = dtype or (child.weight.dtype if child.weight.is_floating_point()
                                        else torch.bfloat16)
                setattr(module, child_name, _new_layer(spec, child, layer_dtype))
                replaced.append(full)
    return replaced
