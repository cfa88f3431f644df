"""FlagGems as a kernel library: its op table, read from the installed FlagGems.

FlagGems 5.0 keeps its ATen overloads in ``flag_gems._FULL_CONFIG`` (``("add.Tensor",
add)``, optional condition) and registers them through a registrar class that filters them
(conditions, the vendor's unused ops, ops a C++ extension already patches) before calling
``register_impl`` per overload. ``flag_gems.enable`` accepts another registrar; the one here
subclasses FlagGems' own and records the (overload, function) pairs instead of registering
them, so the table is exactly what ``flag_gems.enable()`` would register, on the device
type FlagGems detected, with nothing registered with torch.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from types import MappingProxyType

from . import own_kernels
from ._conv_adapter import conv_kernels
from ._default_generator import draws_from_given_generator
from ._flag_gems_device import draws_philox_seeds, prepare, vendor_and_backend
from ._fused_adapters import fused_kernels, layer_norm_statistics_as_aten
from ._kernel_guards import guard_kernel
from ._library import KernelLibrary, LibraryUnavailable, OpTable
from ._schemas import op_schema

__all__ = ["SUPPORTED", "FlagGems"]

SUPPORTED = (">=5.0.2", "<5.1")
"""The FlagGems releases this provider is tested with (the extra ``flagos-ops-gems[flaggems]``
pins the same range)."""


def _version_ok(version: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version)
    except InvalidVersion:
        return False
    return Version(SUPPORTED[0][2:]) <= v < Version(SUPPORTED[1][1:])


class FlagGems(KernelLibrary):
    """The FlagGems Triton kernel library (package ``flag-gems``, module ``flag_gems``)."""

    name = "FlagGems"
    keyword_aliases = MappingProxyType({"generator": "gen"})  # multinomial(..., *, gen=None) in 5.0

    def __init__(self) -> None:
        self.import_seconds: float | None = None
        self.functions: dict[str, Callable[..., object]] = {}
        """After :meth:`load`: each op's FlagGems function (before flagos' wrappers)."""
        self._no_twin = False

    def replayable_ops(self) -> frozenset[str]:
        """Without a twin, the ops admitted in ``replayable.toml`` whose FlagGems source is
        the one admitted (:mod:`flagos_ops_gems.replay_admission`); none with a twin."""
        if not self._no_twin:
            return frozenset()
        from .replay_admission import read_admitted, source_digest

        return frozenset(op for op, digest in read_admitted().items()
                         if op in self.functions and source_digest(self.functions[op]) == digest)

    def load(self) -> tuple[OpTable, frozenset[str]]:
        # Without a twin (opaque memory) FlagGems runs on flagos devices themselves, with the
        # configs of the vendor whose Triton backend compiles for the HAL.
        no_twin = _devices_without_twin()
        if no_twin:
            prepare(*vendor_and_backend(0))
        start = time.perf_counter()
        try:
            import flag_gems
        except ImportError as e:
            raise LibraryUnavailable(
                f"not installed: FlagGems is missing ({e}); pip install "
                f"'flagos-ops-gems[flaggems]'") from e
        except Exception as e:
            raise LibraryUnavailable(
                f"not installed: import flag_gems failed: {type(e).__name__}: "
                f"{' '.join(str(e).split())}") from e  # one line, for explain and info
        self.import_seconds = time.perf_counter() - start
        version = getattr(flag_gems, "__version__", "?")
        if not _version_ok(version):
            raise LibraryUnavailable(
                f"not installed: FlagGems {version} found, flagos-ops-gems needs flag-gems"
                f"{','.join(SUPPORTED)}")
        self._no_twin = no_twin
        try:
            table, device = _op_table(flag_gems, no_twin, self.functions)
        except Exception as e:
            raise LibraryUnavailable(
                f"not installed: FlagGems {version}'s op table could not be read: "
                f"{type(e).__name__}: {e}") from e
        if no_twin:
            if device != "flagos":
                raise LibraryUnavailable(
                    f"not available without a twin: FlagGems runs on {device!r} tensors")
            from flagos import triton_driver

            triton_driver.activate()  # FlagGems' kernels launch through the HAL
        return table, frozenset({device})


def _devices_without_twin() -> bool:
    """Whether flagos devices are here and none has a twin device (opaque memory)."""
    import torch

    count = torch.flagos.device_count()
    return count > 0 and all(
        torch.flagos.get_device_properties(i).twin_device in ("", "none") for i in range(count))


def _has_generator(op: str) -> bool:
    schema = op_schema(op)
    return schema is not None and any("Generator" in str(a.type) for a in schema.arguments)


def _op_table(flag_gems, no_twin: bool = False,
              functions: dict[str, object] | None = None) -> tuple[dict[str, object], str]:
    from flag_gems.config import aten_patch_list, resolve_user_setting
    from flag_gems.runtime.register import Register

    class Recorder(Register):
        """FlagGems' registrar, recording what it would register."""

        def register_impl(self, key, fn):
            self.recorded.append((key, fn))

        def for_each(self):
            self.recorded = []
            super().for_each()

    # The arguments flag_gems.enable() gives its registrar by default (without the warning
    # that no exclude list was given: none is, as by default).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exclude = resolve_user_setting(None, "exclude")
    recorder = Recorder(
        flag_gems._FULL_CONFIG,
        user_include_ops=[],
        user_exclude_ops=exclude,
        cpp_patched_ops=list(set(aten_patch_list)),
        lib=None,
    )
    table: dict[str, object] = {}
    for key, fn in recorder.recorded:
        name, _, overload = key.partition(".")
        full = f"aten::{name}" if overload in ("", "default") else f"aten::{name}.{overload}"
        if functions is not None:
            functions[full] = fn
        # kernels with layout assumptions (_kernel_guards.py); without a twin, the calls
        # they would get wrong go to this package's own kernels where it has one
        table[full] = guard_kernel(fn, own_kernels.kernel_for(full, fn) if no_twin else None)
        if no_twin and full != "aten::multinomial" and _has_generator(full):
            table[full] = draws_philox_seeds(table[full])  # a flagos generator, read as Philox
    if "aten::multinomial" in table:  # draws from the default generator (_default_generator.py)
        table["aten::multinomial"] = draws_from_given_generator(table["aten::multinomial"])
    for op, fn in fused_kernels(flag_gems).items():
        table.setdefault(op, fn)
        if functions is not None:
            functions.setdefault(op, fn)
    if "aten::native_layer_norm" in table:
        table["aten::native_layer_norm"] = layer_norm_statistics_as_aten(
            table["aten::native_layer_norm"])
    if no_twin:  # with a twin, boxing runs the twin's own kernels (cuDNN's convolution)
        for op, fn in conv_kernels(flag_gems).items():
            table.setdefault(op, fn)
        for op in own_kernels.OPS.keys() - table.keys():  # ops FlagGems lacks
            kernel = own_kernels.kernel_for(op)
            if kernel is not None:
                table[op] = kernel
    return table, recorder.device.name

