"""compressed-tensors checkpoints (``quant_method: "compressed-tensors"``, llm-compressor's
exports) loaded onto flagos: the ``float-quantized`` (FP8) and ``nvfp4-pack-quantized``
formats, read from the checkpoint's own config without the compressed-tensors package,
into :mod:`.ct_modules`' layers with the tensors as stored.

The config names, per group of layers (``config_groups``: ``targets``, ``weights``,
``input_activations``), how weights and activations are quantized; ``ignore`` lists
layers kept in full precision. Names match as compressed-tensors matches them: exactly,
by class name (``Linear``), or ``re:`` a regular expression matched from the start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .checkpoint_config import QuantConfigError
from .ct_modules import CTFP8Linear, CTNVFP4Linear

__all__ = ["SUPPORTED_CT_FORMATS", "CTGroup", "CTSpec", "parse_compressed_tensors",
           "quantizer_class"]

FP8_FORMAT, NVFP4_FORMAT = "float-quantized", "nvfp4-pack-quantized"
SUPPORTED_CT_FORMATS = (FP8_FORMAT, NVFP4_FORMAT)


@dataclass(frozen=True)
class CTGroup:
    """One config group: the layers it targets, its format, and the layer settings:
    FP8 ``per_channel`` weight scales and the ``activations`` scheme (see
    :data:`.ct_modules.FP8_ACTIVATIONS`); NVFP4 ``activations`` "nvfp4" or None."""

    name: str
    targets: tuple[str, ...]
    format: str
    per_channel: bool = False
    activations: str | None = None


def _matches(name: str, module: nn.Module, target: str) -> bool:
    if target.startswith("re:"):
        return re.match(target[3:], name) is not None
    return target == name or any(c.__name__ == target for c in type(module).__mro__)


@dataclass(frozen=True)
class CTSpec:
    """A compressed-tensors checkpoint's groups and ``ignore`` list."""

    groups: tuple[CTGroup, ...]
    ignore: tuple[str, ...] = ()

    def group_of(self, name: str, module: nn.Module) -> CTGroup | None:
        """The group that stores linear layer ``name`` quantized, or None."""
        if any(_matches(name, module, t) for t in self.ignore):
            return None
        for g in self.groups:
            if any(_matches(name, module, t) for t in g.targets):
                return g
        return None


# compressed-tensors' defaults of the fields a checkpoint may leave out (QuantizationArgs)
_DEFAULTS = {"num_bits": 8, "type": "int", "symmetric": True, "dynamic": False}


def _get(args: Mapping[str, Any], key: str) -> Any:
    value = args.get(key)
    if value is None and key == "strategy":  # inferred as compressed-tensors infers it
        value = "tensor" if args.get("group_size") is None else "group"
    if value is None:
        value = _DEFAULTS.get(key)
    return value.lower() if isinstance(value, str) else value


def _args(group: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any] | None:
    args = group.get(key)
    if args is not None and not isinstance(args, Mapping):
        raise QuantConfigError(f"{where}.{key}", f"must be a mapping, got {args!r}")
    return args


def _check(args: Mapping[str, Any], where: str, key: str, allowed: tuple, what: str) -> Any:
    value = _get(args, key)
    if value not in allowed:
        raise QuantConfigError(f"{where}.{key}", f"{args.get(key)!r} is not supported for "
                               f"{what}; supported: {', '.join(map(repr, allowed))}")
    return value


def _parse_group(name: str, group: object, default_format: object) -> CTGroup:
    where = f"config_groups.{name}"
    if not isinstance(group, Mapping):
        raise QuantConfigError(where, f"must be a mapping, got {group!r}")
    targets = group.get("targets")
    if isinstance(targets, str):
        targets = [targets]
    if not isinstance(targets, (list, tuple)) or not targets or \
            not all(isinstance(t, str) for t in targets):
        raise QuantConfigError(f"{where}.targets", f"must be a list of layer names, class "
                               f"names or 're:' patterns, got {targets!r}")
    fmt = group.get("format") or default_format
    if fmt not in SUPPORTED_CT_FORMATS:
        field = f"{where}.format" if group.get("format") else "format"
        raise QuantConfigError(field, f"{fmt!r} is not supported; supported: "
                               f"{', '.join(SUPPORTED_CT_FORMATS)}")
    if group.get("output_activations") is not None:
        raise QuantConfigError(f"{where}.output_activations",
                               "quantized layer outputs are not supported")
    weights = _args(group, "weights", where)
    if weights is None:
        raise QuantConfigError(f"{where}.weights", f"missing; the {fmt} format stores "
                               "quantized weights")
    w = f"{where}.weights"
    _check(weights, w, "type", ("float",), fmt)
    _check(weights, w, "symmetric", (True,), fmt)
    _check(weights, w, "dynamic", (False,), fmt)
    _check(weights, w, "actorder", (None,), fmt)
    inputs = _args(group, "input_activations", where)
    a = f"{where}.input_activations"
    if inputs is not None:
        _check(inputs, a, "type", ("float",), fmt)
        _check(inputs, a, "symmetric", (True,), fmt)
    if fmt == FP8_FORMAT:
        _check(weights, w, "num_bits", (8,), fmt)
        strategy = _check(weights, w, "strategy", ("tensor", "channel"), fmt)
        _check(weights, w, "group_size", (None,), fmt)
        activations = None
        if inputs is not None:
            _check(inputs, a, "num_bits", (8,), fmt)
            how = _check(inputs, a, "strategy", ("tensor", "token"), fmt)
            dynamic = _check(inputs, a, "dynamic", (True, False) if how == "tensor" else (True,),
                             f"{fmt} with {how} activation scales")
            activations = f"{'dynamic' if dynamic else 'static'}-{how}"
        return CTGroup(name, tuple(targets), fmt, strategy == "channel", activations)
    _check(weights, w, "num_bits", (4,), fmt)
    _check(weights, w, "strategy", ("tensor_group",), fmt)
    _check(weights, w, "group_size", (16,), fmt)
    scale_dtype = weights.get("scale_dtype")
    if scale_dtype is not None and "float8_e4m3fn" not in str(scale_dtype):
        raise QuantConfigError(f"{w}.scale_dtype", f"{scale_dtype!r} is not supported for "
                               f"{fmt}; supported: float8_e4m3fn")
    activations = None
    if inputs is not None:
        _check(inputs, a, "num_bits", (4,), fmt)
        _check(inputs, a, "strategy", ("tensor_group",), fmt)
        _check(inputs, a, "group_size", (16,), fmt)
        _check(inputs, a, "dynamic", ("local",), fmt)
        activations = "nvfp4"
    return CTGroup(name, tuple(targets), fmt, False, activations)


def _empty(value: object) -> bool:
    return value is None or (isinstance(value, Mapping) and not value)


def parse_compressed_tensors(config: Mapping[str, Any]) -> CTSpec:
    """The :class:`CTSpec` of a compressed-tensors ``quantization_config`` (the
    checkpoint's dict); raises :class:`QuantConfigError` naming the field (as a dotted
    path, e.g. ``config_groups.group_0.weights.strategy``) for anything flagos cannot
    load as stored."""
    if not isinstance(config, Mapping):
        raise QuantConfigError("", f"must be a mapping, got {type(config).__name__}")
    status = config.get("quantization_status", "compressed")
    if status != "compressed":
        raise QuantConfigError("quantization_status", f"{status!r}: only checkpoints saved "
                               "compressed ('compressed') store packed weights")
    for key in ("kv_cache_scheme", "sparsity_config", "transform_config"):
        if not _empty(config.get(key)):
            raise QuantConfigError(key, f"{config[key]!r} is not supported (flagos loads "
                                   "quantized linear layers only)")
    groups = config.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise QuantConfigError("config_groups", f"must name at least one group, got {groups!r}")
    ignore = config.get("ignore") or []
    if isinstance(ignore, str) or not isinstance(ignore, (list, tuple)) or \
            not all(isinstance(i, str) for i in ignore):
        raise QuantConfigError("ignore", f"must be a list of layer names, class names or "
                               f"'re:' patterns, got {ignore!r}")
    parsed = tuple(_parse_group(str(n), g, config.get("format")) for n, g in groups.items())
    return CTSpec(parsed, tuple(ignore))


def _fields(config: object) -> Mapping[str, Any]:
    """The checkpoint's own ``quantization_config`` fields behind transformers' config."""
    from .hf_takeover import checkpoint_fields

    fields = checkpoint_fields(config)
    return fields if fields is not None else config.to_dict()


def quantizer_class() -> type:
    """flagos' quantizer for compressed-tensors checkpoints (a transformers
    ``HfQuantizer``; needs no compressed-tensors package)."""

    from .convert import replace_linears
    from .hf_prequantized import prequantized_quantizer_base, reject_fused_experts

    class FlagosCompressedTensorsQuantizer(prequantized_quantizer_base()):
        """Loads compressed-tensors FP8 / NVFP4 checkpoints into packed-weight layers."""

        def validate_environment(self, *args: Any, **kwargs: Any) -> None:
            self.spec = parse_compressed_tensors(_fields(self.quantization_config))

        def _process_model_before_weight_loading(self, model, **kwargs):
            spec = self.spec
            keep = tuple(getattr(model, "_keep_in_fp32_modules", None) or ())
            modules = dict(model.named_modules())
            reject_fused_experts(
                model, lambda name, m: not any(_matches(name, m, t) for t in spec.ignore),
                "compressed-tensors", "load with quantization_config="
                "CompressedTensorsConfig(dequantize=True) to get a bf16 model")
            for name, m in modules.items():
                g = spec.group_of(name, m)
                if isinstance(m, nn.Embedding) and g is not None:
                    raise QuantConfigError(f"config_groups.{g.name}.targets", f"{name} is an "
                                           "embedding; only linear layers load quantized")
            groups = {name: spec.group_of(name, m) for name, m in modules.items()
                      if type(m) is nn.Linear and not any(k in name for k in keep)}

            class _Converts:
                def converts(self, name: str) -> bool:
                    return groups.get(name) is not None

            def new_layer(name: str, old: nn.Linear, dtype: torch.dtype) -> nn.Module:
                g = groups[name]
                kw = {"bias": old.bias is not None, "dtype": dtype, "device": old.weight.device}
                if g.format == FP8_FORMAT:
                    return CTFP8Linear(old.in_features, old.out_features,
                                       per_channel=g.per_channel, activations=g.activations,
                                       **kw)
                return CTNVFP4Linear(old.in_features, old.out_features,
                                     quantize_input=g.activations == "nvfp4", **kw)

            replace_linears(model, _Converts(), dtype=kwargs.get("dtype") or model.dtype,
                            new_layer=new_layer)
            return model

    return FlagosCompressedTensorsQuantizer
