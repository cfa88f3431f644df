"""Turning a full-precision model skeleton into one with packed-weight layers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import nn

from .checkpoint_config import QuantSpec
from .modules import FP8Linear, NVFP4Linear, QuantLinear

__all__ = ["quantize_linears", "replace_linears"]


def _new_layer(spec: QuantSpec, old: nn.Linear, dtype: torch.dtype) -> QuantLinear:
    kw = {"bias": old.bias is not None, "dtype": dtype, "device": old.weight.device}
    if spec.algo == "FP8":
        return FP8Linear(old.in_features, old.out_features, **kw)
    if spec.algo == "NVFP4":
        return NVFP4Linear(old.in_features, old.out_features, block_size=spec.group_size, **kw)
    raise ValueError(f"no layer for quantization algorithm {spec.algo!r}")


class ConvertsNames(Protocol):
    """Says which linear layers (by module name) a checkpoint stores quantized."""

    def converts(self, module_name: str) -> bool: ...


def replace_linears(model: nn.Module, spec: QuantSpec | ConvertsNames,
                    dtype: torch.dtype | None = None,
                    new_layer: Callable[[str, nn.Linear, torch.dtype], nn.Module] | None = None
                    ) -> list[str]:
    """Replace every ``nn.Linear`` of ``model`` that ``spec`` stores quantized by the
    matching packed-weight layer (new tensors, on the old weight's device: the meta device
    while transformers builds a model); returns the names of the replaced layers.
    ``new_layer(name, old, dtype)`` makes the layer (default: the ModelOpt layer ``spec.algo``
    names)."""
    replaced = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is nn.Linear and spec.converts(full):
                layer_dtype = dtype or (child.weight.dtype if child.weight.is_floating_point()
                                        else torch.bfloat16)
                layer = new_layer(full, child, layer_dtype) if new_layer is not None \
                    else _new_layer(spec, child, layer_dtype)
                setattr(module, child_name, layer)
                replaced.append(full)
    return replaced


@torch.no_grad()
def quantize_linears(model: nn.Module, algo: str, skip: tuple[str, ...] = ("lm_head",),
                     static_input: bool = False) -> list[str]:
    """Quantize the weights of every ``nn.Linear`` of a full-precision ``model`` in place
    (``algo``: "FP8" per-tensor E4M3, or "NVFP4"), on the weights' device; layers named
    in ``skip`` stay as they are. Without calibration there is no static input scale:
    layers quantize activations with a per-call amax scale (``static_input=False``; with
    True the input scales are 1 until set). Returns the replaced layer names."""
    from .quantize import quantize_fp8, quantize_nvfp4

    spec = QuantSpec(algo.upper(), 16 if algo.upper() == "NVFP4" else None, skip)
    replaced = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is not nn.Linear or not spec.converts(full):
                continue
            w = child.weight
            kw = {"bias": child.bias is not None, "dtype": w.dtype, "device": w.device}
            if spec.algo == "FP8":
                layer = FP8Linear(child.in_features, child.out_features,
                                  static_input=static_input, **kw)
                q, s = quantize_fp8(w)
                layer.weight.data, layer.weight_scale.data = q, s
            elif spec.algo == "NVFP4":
                layer = NVFP4Linear(child.in_features, child.out_features,
                                    static_input=static_input, **kw)
                packed, block, glob = quantize_nvfp4(w)
                layer.weight.data, layer.weight_scale.data = packed, block
                layer.weight_scale_2.data = glob
            else:
                raise ValueError(f"quantize_linears: algo must be 'FP8' or 'NVFP4', got {algo!r}")
            if child.bias is not None:
                layer.bias.data = child.bias.data
            setattr(module, child_name, layer)
            replaced.append(full)
    return replaced
