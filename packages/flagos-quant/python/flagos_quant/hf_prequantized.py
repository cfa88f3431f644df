"""The base of flagos' transformers quantizers: checkpoints stored quantized, loaded into
packed-weight layers as they are (nothing is quantized at load, nothing saved back)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from torch import nn

__all__ = ["prequantized_quantizer_base", "reject_fused_experts"]


def reject_fused_experts(model: nn.Module, converts: Callable[[str, nn.Module], bool],
                         fmt: str, hint: str) -> None:
    """Mixture-of-experts weights that transformers fuses into 3-D parameters have no
    flagos layer: refuse to load ``fmt`` rather than put their quantized tensors into
    full-precision parameters without their scales."""
    for name, module in model.named_modules():
        if name.endswith(".experts") and converts(name, module):
            raise NotImplementedError(f"{name}: {fmt} mixture-of-experts weights are not "
                                      f"supported on flagos yet; {hint}")


@functools.cache
def prequantized_quantizer_base() -> type:
    """A transformers ``HfQuantizer`` subclass for pre-quantized checkpoints whose layers
    the subclass builds in ``_process_model_before_weight_loading``."""
    from transformers.quantizers.base import HfQuantizer

    class PrequantizedQuantizer(HfQuantizer):
        """Loads a pre-quantized checkpoint's tensors as they are stored."""

        requires_calibration = True  # only pre-quantized checkpoints

        def param_needs_quantization(self, model, param_name: str, **kwargs) -> bool:
            return False  # stored quantized: loaded as they are

        def is_serializable(self) -> bool:  # a method: save_pretrained calls it
            return False

        @property
        def is_trainable(self) -> bool:
            return False

    return PrequantizedQuantizer
