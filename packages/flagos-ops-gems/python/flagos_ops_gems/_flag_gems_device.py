"""FlagGems on flagos devices themselves, where no twin device runs its kernels.

FlagGems picks one device per process when it is imported: its ``DeviceDetector`` (a
singleton) finds the vendor by probing the machine, and every wrapper then allocates on
that vendor's device type and guards with its device module (``torch.cuda``,
``torch.mlu``). On a chip whose memory has no twin (``FLAGOS_NO_TWIN=1`` on a GPU, or a
chip without CUDA) flagos makes that device ``flagos`` instead: before FlagGems' runtime
runs, it creates the detector for the vendor whose Triton backend compiles for the HAL's
target (its tuned and heuristic configs fit the chip), named ``flagos`` with dispatch key
``PrivateUse1``. FlagGems' device module is then ``torch.flagos`` (with the compute
capability of a ``cuda`` target and Philox-style generators, :class:`FlagGemsDeviceModule`),
its results are flagos
tensors, and its kernels compile for the HAL's target and launch through the HAL
(:class:`flagos.triton_driver.HalDriver`, made Triton's active driver).

FlagGems has no extension point for a device of its own, so this sets two of its internals
as its runtime is imported (``flag_gems.runtime.backend``: the device name, its device
module and its ``torch.backends`` module; ``flag_gems.runtime.backend.device``: the detector singleton).
Tested with the FlagGems releases of :data:`flagos_ops_gems.SUPPORTED`.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from types import ModuleType

from flagos.provider_api import after_import

from ._library import LibraryUnavailable

__all__ = ["VENDOR_OF_TRITON_BACKEND", "FlagGemsDeviceModule", "PhiloxDraws", "draws_philox_seeds",
           "prepare", "vendor_and_backend", "vendor_for"]

VENDOR_OF_TRITON_BACKEND = {"cuda": "nvidia", "hip": "amd"}
"""Triton backend name -> the FlagGems vendor whose configs serve a chip of that backend."""


def vendor_for(device: int = 0) -> str:
    """The FlagGems vendor for flagos:``device``, from the Triton target its HAL names;
    :class:`LibraryUnavailable` with the reason when there is none."""
    from flagos import triton_driver

    try:
        backend = triton_driver.target(device).backend
    except (RuntimeError, ImportError) as e:
        raise LibraryUnavailable(f"not available without a twin: {e}") from e
    vendor = VENDOR_OF_TRITON_BACKEND.get(backend)
    if vendor is None:
        raise LibraryUnavailable(
            f"not available without a twin: no FlagGems vendor is known for Triton backend "
            f"{backend!r} (known: {', '.join(sorted(VENDOR_OF_TRITON_BACKEND))})")
    return vendor


def vendor_and_backend(device: int = 0) -> tuple[str, str, tuple[int, int] | None]:
    """The FlagGems vendor, the Triton backend name and, for a ``cuda`` target, the compute
    capability its architecture is (``90`` -> ``(9, 0)``) for flagos:``device``."""
    from flagos import triton_driver

    vendor = vendor_for(device)
    target = triton_driver.target(device)
    capability = None
    if target.backend == "cuda" and isinstance(target.arch, int):
        capability = divmod(target.arch, 10)
    return vendor, target.backend, capability


class FlagGemsDeviceModule:
    """``torch.flagos`` as FlagGems' device module (its ``torch_device_fn``), answering also
    ``get_device_capability`` for a chip of Triton's ``cuda`` backend: FlagGems' NVIDIA
    configs choose kernels by it, and ``torch.flagos`` does not have it (a flagos device's
    architecture version is its vendor's, not a CUDA compute capability)."""

    def __init__(self, capability: tuple[int, int] | None) -> None:
        self._capability = capability

    def __getattr__(self, name: str) -> object:
        import torch

        return getattr(torch.flagos, name)

    def get_device_capability(self, device: object = None) -> tuple[int, int]:
        if self._capability is None:
            raise AttributeError("this flagos device is not of Triton's cuda backend")
        return self._capability

    @property
    def default_generators(self) -> tuple[PhiloxDraws, ...]:
        import torch

        return tuple(PhiloxDraws(g) for g in torch.flagos.default_generators)


class PhiloxDraws:
    """A flagos generator without a twin as the Philox generator FlagGems' random kernels
    read: ``get_state()`` gives 16 bytes, a seed and offset 0, and the seed is drawn from the
    flagos generator (whose state, without a twin, is the CPU generator's), advancing it, so
    each kernel draws new numbers and ``torch.manual_seed`` reproduces them. FlagGems writes
    the offset it advanced back with ``set_state``; the next read draws a new seed instead."""

    def __init__(self, generator: object) -> None:
        self.generator = generator

    def get_state(self) -> object:
        import torch

        cpu = torch.Generator()
        cpu.set_state(self.generator.get_state())
        seed = int(torch.randint(0, 2**62, (1,), generator=cpu))
        self.generator.set_state(cpu.get_state())
        return torch.tensor([seed, 0], dtype=torch.int64).view(torch.uint8)

    def set_state(self, state: object) -> None:
        pass

    def __getattr__(self, name: str) -> object:
        return getattr(self.generator, name)


def draws_philox_seeds(kernel: Callable[..., object]) -> Callable[..., object]:
    """``kernel`` (of an op with a generator argument) given a flagos generator as
    :class:`PhiloxDraws`: FlagGems reads a generator's state as Philox's seed and offset."""
    import torch

    @functools.wraps(kernel)
    def call(*args, **kwargs):
        for key in ("generator", "gen"):
            gen = kwargs.get(key)
            if isinstance(gen, torch.Generator) and gen.device.type == "flagos":
                kwargs[key] = PhiloxDraws(gen)
        return kernel(*args, **kwargs)

    return call


def prepare(vendor: str, triton_backend: str, capability: tuple[int, int] | None = None) -> None:
    """Arrange that FlagGems, when imported next, runs on flagos devices with the configs of
    ``vendor`` and Triton's ``triton_backend`` language extras (libdevice); ``capability``:
    what its device module answers for ``get_device_capability`` (a ``cuda`` target's)."""
    if "flag_gems" in sys.modules:
        raise LibraryUnavailable(
            "not available without a twin: FlagGems was imported before flagos loaded it, "
            "so it runs on its own device type; let flagos import it (route an op to gems "
            "before importing flag_gems)")

    def name_the_device(backend: ModuleType) -> None:
        backend.device_name = "flagos"
        backend.torch_device_object = FlagGemsDeviceModule(capability)

        def set_torch_backend_device_fn(vendor_name: str | None = None) -> None:
            backend.torch_device_fn_device = None  # torch.backends has no flagos module

        backend.set_torch_backend_device_fn = set_torch_backend_device_fn

    def make_the_detector(device: ModuleType) -> None:
        import torch

        backend = sys.modules["flag_gems.runtime.backend"]
        backend.device_name = None  # the vendor's own info first
        info = backend.get_vendor_info(vendor)
        info = dataclasses.replace(info, triton_extra_name=info.triton_extra_name or triton_backend)
        backend.vendor_module.vendor_info = info
        backend.device_name = "flagos"
        detector = object.__new__(device.DeviceDetector)
        detector.initialized = True  # the singleton's guard: FlagGems' own probe never runs
        detector.vendor_list = device.vendors.get_all_vendors().keys()
        detector.info = info
        detector.vendor_name = vendor
        detector.name = "flagos"
        detector.vendor = device.vendors.get_all_vendors()[vendor]
        detector.dispatch_key = "PrivateUse1"
        detector.device_count = torch.flagos.device_count()
        detector.support_fp64 = detector.vendor not in device.UNSUPPORT_FP64
        detector.support_bf16 = detector.vendor not in device.UNSUPPORT_BF16
        detector.support_int64 = detector.vendor not in device.UNSUPPORT_INT64
        device.DeviceDetector._instance = detector

    # right after each module's body, before FlagGems' runtime goes on to use them
    after_import("flag_gems.runtime.backend", name_the_device)
    after_import("flag_gems.runtime.backend.device", make_the_detector)
