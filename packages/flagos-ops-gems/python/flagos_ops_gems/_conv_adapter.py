"""FlagGems' 2-d convolution under ``aten::convolution_overrideable``.

A convolution on a PrivateUse1 device reaches the dispatcher as
``aten::convolution_overrideable`` (ATen's ``Overrideable`` backend), an op FlagGems does
not register: it serves ``conv2d``, a CompositeImplicitAutograd op that decomposes above
flagos. Without a twin the call would then go to the CPU fallback, every activation and
weight through host memory (25 calls in a small Diffusers UNet's forward). This adapter
hands the forward 2-d convolutions FlagGems computes (not transposed, batched, floating,
one dtype) to FlagGems' ``conv2d``; the rest are declined. FlagGems writes the result
NCHW-contiguous whatever the input's layout (ATen keeps a channels-last input's layout);
the values are the same.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["conv_kernels"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _adapter(conv2d: Callable) -> Callable:
    def convolution_overrideable(input, weight, bias, stride, padding, dilation, transposed,
                                 output_padding, groups):
        if transposed or input.dim() != 4 or weight.dim() != 4 or input.dtype not in _FLOATS \
                or weight.dtype != input.dtype or (bias is not None and bias.dtype != input.dtype) \
                or len(stride) != 2 or len(padding) != 2 or len(dilation) != 2 \
                or input.shape[1] != groups * weight.shape[1] or input.numel() == 0:
            return NotImplemented
        return conv2d(input, weight, bias, list(stride), list(padding), list(dilation), groups)

    return convolution_overrideable


def conv_kernels(flag_gems) -> dict[str, Callable]:
    """``aten::convolution_overrideable`` on FlagGems' ``conv2d`` (empty if the installed
    FlagGems has none)."""
    conv2d = getattr(getattr(flag_gems, "ops", None), "conv2d", None)
    return {} if conv2d is None else {"aten::convolution_overrideable": _adapter(conv2d)}
