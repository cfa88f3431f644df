"""Loading checkpoints of a ``quant_method`` that transformers serves itself (``fp8``,
``compressed-tensors``, ``mxfp4``) into flagos' packed-weight layers, only for loads onto
flagos.

transformers' registry refuses a second registration of a name (``register_quantizer``
raises "already registered"), and the quantizer is constructed before anything says where
the model goes: ``from_pretrained`` builds it from the config, then calls its
``validate_environment(device_map=...)``, the first hook that sees the device map. So the
registry entry is replaced by a subclass of transformers' own quantizer that differs in
that one hook: there it becomes, for the rest of the load, either flagos' quantizer (the
device map names flagos) or exactly transformers' own (any other load: the instance's
class is set back to transformers' class, with the state its own ``__init__`` made).

The replacement is narrow (only the entries in :data:`.transformers_hook.TAKEOVERS`) and
reversible (:func:`restore`); an entry that is no longer transformers' own class (some
other library replaced it) is left alone.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import torch

from .checkpoint_config import QuantConfigError

__all__ = ["checkpoint_fields", "loads_onto_flagos", "restore", "take_over"]

_ORIGINALS: dict[tuple[str, str], type] = {}
# id(config object) -> the checkpoint's own quantization_config fields, kept beside the
# object (transformers' configs serialise their attributes and are not hashable); an
# entry goes with its object
_FIELDS: dict[int, dict[str, Any]] = {}


def _keep_fields(config: object, fields: dict[str, Any]) -> None:
    _FIELDS[id(config)] = fields
    weakref.finalize(config, _FIELDS.pop, id(config), None)


def checkpoint_fields(config: object) -> Mapping[str, Any] | None:
    """The ``quantization_config`` fields a taken-over config was built from (None for a
    config built otherwise, e.g. passed by the user)."""
    return _FIELDS.get(id(config))


# placements that accelerate decides after the quantizer is chosen (today it places on
# the CPU what it does not know the memory of)
_AUTO_PLACEMENTS = ("auto", "balanced", "balanced_low_0", "sequential")


def loads_onto_flagos(device_map: object) -> bool:
    """Whether ``device_map`` (as ``from_pretrained`` normalised it: a dict of module name
    to device, device string or index, or one of them) places a module on the flagos
    device. An index is a device of the current accelerator, as accelerate reads it;
    ``"disk"`` and automatic placements (``"auto"``, ...) are not flagos."""
    if device_map is None:
        return False
    values = device_map.values() if isinstance(device_map, Mapping) else (device_map,)
    for v in values:
        if v is None or isinstance(v, bool) or v == "disk" or v in _AUTO_PLACEMENTS:
            continue
        try:
            if torch.device(v).type == "flagos":
                return True
        except (RuntimeError, TypeError, ValueError):
            continue
    return False


def _wants_flagos(config: object, pre_quantized: bool, device_map: object) -> bool:
    """flagos takes over a pre-quantized load onto flagos, unless the user asked
    transformers to dequantize (``dequantize=True`` keeps transformers' dense model)."""
    if not (pre_quantized and loads_onto_flagos(device_map)):
        return False
    dequantize = getattr(config, "dequantize", False)
    if not isinstance(dequantize, bool):
        raise QuantConfigError("dequantize", f"must be true or false, got {dequantize!r}")
    return not dequantize


def dispatching_quantizer(theirs: type, ours: type) -> type:
    """A subclass of transformers' quantizer class ``theirs`` that, at
    ``validate_environment``, turns into ``ours`` (a load onto flagos) or into ``theirs``."""

    class Dispatch(theirs):
        __doc__ = (f"transformers' {theirs.__name__}, or flagos' {ours.__name__} when the "
                   "model is loaded onto flagos (decided at validate_environment).")

        def __init__(self, quantization_config: Any, **kwargs: Any) -> None:
            # transformers' own construction, as it would run; a failure (e.g. its
            # optional package not installed) is raised again for a load not onto flagos
            error = getattr(quantization_config, "flagos_init_error", None)
            try:
                theirs.__init__(self, quantization_config, **kwargs)
            except Exception as e:  # noqa: BLE001 - re-raised unchanged below
                error = error or e
            self._flagos_dispatch = (quantization_config, dict(kwargs), error)

        def validate_environment(self, *args: Any, **kwargs: Any) -> Any:
            config, init_kwargs, error = self.__dict__.pop("_flagos_dispatch")
            if _wants_flagos(config, init_kwargs.get("pre_quantized", True),
                             kwargs.get("device_map")):
                self.__dict__.clear()
                self.__class__ = ours
                ours.__init__(self, config, **init_kwargs)
            else:
                if error is not None:
                    raise error
                self.__class__ = theirs
            return self.validate_environment(*args, **kwargs)

    Dispatch.__name__ = Dispatch.__qualname__ = f"FlagosOr{theirs.__name__}"
    return Dispatch


def deferring_config(theirs: type) -> type:
    """A subclass of transformers' config class ``theirs`` whose construction cannot fail:
    an error of ``theirs.__init__`` (its optional package missing, or a config it rejects)
    is kept and raised by the quantizer for a load not onto flagos, where transformers
    would have raised it; a load onto flagos reads the checkpoint's fields itself
    (:func:`checkpoint_fields`). A config that constructs becomes an instance of
    ``theirs``, with no attribute added; the subclass keeps ``theirs``' name, which
    transformers compares."""

    class Deferring(theirs):
        def __init__(self, **fields: Any) -> None:
            _keep_fields(self, dict(fields))
            try:
                theirs.__init__(self, **fields)
            except Exception as e:  # noqa: BLE001 - raised again by the quantizer
                self.flagos_init_error = e
                self.quant_method = fields.get("quant_method")
                # as transformers reads it (``run_compressed=False``: the old spelling);
                # a value that is not a bool stays, for the dispatch to name it
                self.dequantize = fields.get("dequantize", False) or \
                    fields.get("run_compressed") is False
                return
            self.__class__ = theirs

        def post_init(self) -> None:
            if getattr(self, "flagos_init_error", None) is None:
                theirs.post_init(self)

        def get_loading_attributes(self) -> dict[str, Any]:
            return {"dequantize": self.dequantize}

        def to_dict(self) -> dict[str, Any]:
            return dict(_FIELDS.get(id(self), {}))

    Deferring.__name__ = Deferring.__qualname__ = theirs.__name__
    return Deferring


def take_over(method: str, ours: type, config: bool = False) -> str:
    """Replace transformers' registry entry for ``method`` by the dispatching quantizer
    (and, with ``config``, its config class by the deferring one); returns "taken over"
    or why it was skipped."""
    from transformers.quantizers import auto

    theirs = auto.AUTO_QUANTIZER_MAPPING.get(method)
    if theirs is None:
        return f"skipped: this transformers has no {method!r} quantizer"
    if ("AUTO_QUANTIZER_MAPPING", method) in _ORIGINALS:
        return "taken over"
    if not theirs.__module__.startswith("transformers."):
        return f"skipped: {method!r} is served by {theirs.__module__}.{theirs.__name__}"
    _ORIGINALS[("AUTO_QUANTIZER_MAPPING", method)] = theirs
    auto.AUTO_QUANTIZER_MAPPING[method] = dispatching_quantizer(theirs, ours)
    if config:
        their_config = auto.AUTO_QUANTIZATION_CONFIG_MAPPING[method]
        _ORIGINALS[("AUTO_QUANTIZATION_CONFIG_MAPPING", method)] = their_config
        auto.AUTO_QUANTIZATION_CONFIG_MAPPING[method] = deferring_config(their_config)
    return "taken over"


def restore(method: str) -> bool:
    """Put transformers' own classes for ``method`` back into its registry (undoes
    :func:`take_over`); returns whether anything was restored."""
    from transformers.quantizers import auto

    restored = False
    for table in ("AUTO_QUANTIZER_MAPPING", "AUTO_QUANTIZATION_CONFIG_MAPPING"):
        original = _ORIGINALS.pop((table, method), None)
        if original is not None:
            getattr(auto, table)[method] = original
            restored = True
    return restored
