"""accelerate's safetensors reads onto flagos: a file opened for a flagos device is opened
on the CPU, and each tensor read from it is moved to the device.

accelerate opens checkpoints with safetensors' ``safe_open(..., device=<target device>)``
where it loads a checkpoint onto a ``device_map`` (``load_checkpoint_in_model``,
``load_checkpoint_and_dispatch``) and where it reads disk-offloaded weights back at each
forward. safetensors accepts a fixed list of device names (cpu, cuda, mps, npu, ...; no
extension point) and raises ``device flagos:0 is invalid``, which accelerate does not
catch. The readers those two accelerate modules call (``safe_open``, and
``safetensors.torch.load_file`` as ``safe_load_file``) are wrapped: for a flagos device
the file is read on the CPU and what is read is moved to the device. A
patch of accelerate (docs/architecture.md, "Patches of other libraries"); every other
device goes to safetensors as asked.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from typing_extensions import Self

from flagos._library_places import device_type

MODULES = ("accelerate.utils.offload", "accelerate.utils.modeling")


class OpenedOnCpu:
    """A safetensors file opened on the CPU for flagos:``device``: tensors read are moved
    there (``get_tensor``); everything else is the file's own."""

    def __init__(self, handle: Any, device: Any) -> None:
        self._handle, self._device = handle, device

    def __enter__(self) -> Self:
        self._handle.__enter__()
        return self

    def __exit__(self, *exc: object) -> Any:
        return self._handle.__exit__(*exc)

    def get_tensor(self, name: str) -> Any:
        return self._handle.get_tensor(name).to(self._device)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def _flagos_device(device: Any) -> bool:
    return device_type(device) == "flagos"


def _open_on_cpu(original: Any) -> Any:
    @functools.wraps(original)
    def safe_open(filename: Any, framework: str, device: Any = "cpu", **kwargs: Any) -> Any:
        if not _flagos_device(device):
            return original(filename, framework=framework, device=device, **kwargs)
        return OpenedOnCpu(original(filename, framework=framework, device="cpu", **kwargs),
                           device)

    return safe_open


def _load_on_cpu(original: Any) -> Any:
    @functools.wraps(original)
    def load_file(filename: Any, device: Any = "cpu", **kwargs: Any) -> Any:
        if not _flagos_device(device):
            return original(filename, device=device, **kwargs)
        return {k: v.to(device) for k, v in original(filename, device="cpu", **kwargs).items()}

    return load_file


# the names accelerate's modules import safetensors' readers as, and their wrappers
_WRAPPERS = {"safe_open": _open_on_cpu, "safe_load_file": _load_on_cpu}


def adapt(module: ModuleType) -> None:
    """Wrap the safetensors readers ``module`` calls (``safe_open``, ``safe_load_file``)
    once."""
    for name, wrap in _WRAPPERS.items():
        original = getattr(module, name, None)
        if original is None or getattr(original, "_flagos_on_cpu", False):
            continue
        wrapped = wrap(original)
        wrapped._flagos_on_cpu = True
        setattr(module, name, wrapped)


def install() -> None:
    """Adapt accelerate's loaders when (if ever) their modules are imported."""
    from flagos._after_import import after_import

    for name in MODULES:
        after_import(name, adapt)
