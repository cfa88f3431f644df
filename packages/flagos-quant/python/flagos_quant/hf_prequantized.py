"""The base of flagos' transformers quantizers: checkpoints stored quantized, loaded into
packed-weight layers as they are (nothing is quantized at load, nothing saved back)."""

from __future__ import annotations

import functools

__all__ = ["prequantized_quantizer_base"]


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

        @property
        def is_serializable(self) -> bool:
            return False

        @property
        def is_trainable(self) -> bool:
            return False

    return PrequantizedQuantizer
