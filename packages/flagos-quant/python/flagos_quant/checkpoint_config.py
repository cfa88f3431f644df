"""Quantization configs of checkpoints, read and validated: what is stored, which layers
are converted, and a clear error naming the field for anything not supported.

ModelOpt writes its config two ways: flat in config.json's ``quantization_config``
(``quant_method: "modelopt"``, ``quant_algo``, ``ignore``, ``group_size``,
``kv_cache_scheme``) and nested in hf_quant_config.json (``quantization: {quant_algo,
exclude_modules, group_size, kv_cache_quant_algo}``); both are read.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["SUPPORTED_MODELOPT_ALGOS", "QuantConfigError", "QuantSpec", "parse_modelopt"]

SUPPORTED_MODELOPT_ALGOS = ("FP8", "NVFP4")


class QuantConfigError(ValueError):
    """A checkpoint's quantization config that flagos cannot load: ``field`` names the
    offending entry (``quantization_config.quant_algo``)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"quantization_config.{field_name}: {message}")
        self.field = field_name


@dataclass(frozen=True)
class QuantSpec:
    """What a checkpoint stores: ``algo`` ("FP8": E4M3 weights with one float32 scale and
    a static float32 input scale per layer; "NVFP4": packed E2M1 weights, E4M3 per-16 and
    float32 global scales, a static float32 input scale), the block size, and the module
    name patterns left in full precision."""

    algo: str
    group_size: int | None = None
    ignore: tuple[str, ...] = field(default_factory=tuple)

    def converts(self, module_name: str) -> bool:
        """Whether the linear layer ``module_name`` is stored quantized."""
        for pat in self.ignore:
            if pat.startswith("re:"):
                if re.fullmatch(pat[3:], module_name):
                    return False
            elif fnmatch.fnmatchcase(module_name, pat) or module_name == pat:
                return False
        return True


def _strings(value: object, field_name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise QuantConfigError(field_name, f"must be a list of module name patterns, got {value!r}")
    return tuple(value)


def _group_size_of_config_groups(groups: object) -> object:
    """The weights' group size that ``config_groups`` (compressed-tensors style, written
    by ModelOpt into config.json) names, or None; groups that disagree are an error."""
    if not isinstance(groups, Mapping):
        return None
    sizes = {g.get("weights", {}).get("group_size") for g in groups.values()
             if isinstance(g, Mapping) and isinstance(g.get("weights"), Mapping)} - {None}
    if len(sizes) > 1:
        raise QuantConfigError("config_groups", f"weights of different groups have group "
                               f"sizes {sorted(sizes)}; one NVFP4 block size is supported")
    return sizes.pop() if sizes else None


def parse_modelopt(config: Mapping[str, object]) -> QuantSpec:
    """The :class:`QuantSpec` of a ModelOpt config (flat or nested); raises
    :class:`QuantConfigError` naming the field that is missing, malformed or unsupported."""
    if not isinstance(config, Mapping):
        raise QuantConfigError("", f"must be a mapping, got {type(config).__name__}")
    nested = config.get("quantization")
    if nested is not None:
        if not isinstance(nested, Mapping):
            raise QuantConfigError("quantization", f"must be a mapping, got {nested!r}")
        prefix = "quantization."
        src: Mapping[str, object] = nested
        ignore = _strings(nested.get("exclude_modules"), prefix + "exclude_modules")
        kv = nested.get("kv_cache_quant_algo")
    else:
        prefix, src = "", config
        ignore = _strings(config.get("ignore", config.get("exclude_modules")), "ignore")
        scheme = config.get("kv_cache_scheme")
        kv = None if scheme is None else "FP8" if isinstance(scheme, Mapping) else scheme
    algo = src.get("quant_algo")
    if algo is None:
        raise QuantConfigError(prefix + "quant_algo", "missing; a ModelOpt checkpoint names its "
                               f"format here (supported: {', '.join(SUPPORTED_MODELOPT_ALGOS)})")
    if not isinstance(algo, str) or algo.upper() not in SUPPORTED_MODELOPT_ALGOS:
        raise QuantConfigError(prefix + "quant_algo", f"{algo!r} is not supported; supported: "
                               f"{', '.join(SUPPORTED_MODELOPT_ALGOS)}")
    algo = algo.upper()
    if kv not in (None, "", "null"):
        raise QuantConfigError(
            prefix + ("kv_cache_quant_algo" if nested is not None else "kv_cache_scheme"),
            f"a quantized KV cache ({kv!r}) is not supported; export the checkpoint without "
            "KV cache quantization")
    group = src.get("group_size")
    if group is None and nested is None:
        group = _group_size_of_config_groups(config.get("config_groups"))
    if algo == "NVFP4":
        if group is None:
            group = 16
        if isinstance(group, str) and group.isdigit():
            group = int(group)
        if group != 16:
            raise QuantConfigError(prefix + "group_size",
                                   f"NVFP4 blocks are 16 elements, got {group!r}")
    elif group is not None:
        raise QuantConfigError(prefix + "group_size",
                               f"FP8 (per-tensor scales) takes no group size, got {group!r}")
    return QuantSpec(algo, group, ignore)
