"""Triton kernels on flagos tensors through the HAL: a Triton driver for flagos devices.

Triton compiles a ``@triton.jit`` kernel for the target its active driver names and
launches it through that driver. :class:`HalDriver` is such a driver for the current
flagos device: the target is what the device's HAL says it is (``kernel_get_target``:
backend ``cuda`` and the compute capability on the cuda HAL, a vendor's backend on its
chip), the compiled binary is loaded with the HAL's ``module_load`` and every launch goes
through the HAL's ``launch_kernel`` on the current flagos stream with flagos device
pointers (:mod:`flagos.kernels`). No ``torch.cuda`` tensor, stream or device guard is
involved, so it serves a chip without CUDA whose vendor ships a Triton backend, and a
CUDA GPU in the no-twin mode (``FLAGOS_NO_TWIN=1``).

It uses Triton's own extension point, ``triton.runtime.driver.set_active``; :func:`active`
makes it Triton's driver for a block, :func:`activate` for the process. Where no backend
of Triton's has a device (a chip without CUDA, sim), flagos activates it when Triton is
imported. Triton has one
active driver per process: while it is active, Triton kernels launch on flagos devices
only. A launch made inside a launch-cached op's kernel is recorded, so the op relaunches
it from C++ (:mod:`flagos.launch_cache`).

Host tensor descriptors (``TensorDescriptor``) are passed as Triton's CUDA backend passes
them (:mod:`flagos.triton_tensor_descriptors`); those lowered to the chip's tile copies
are encoded by the HAL (``kernel_encode_tensor_descriptor``, ABI 1.5). Not supported (the
launcher refuses them with the reason): kernels of several CTAs per cluster, cooperative
grids, programmatic dependent launch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from flagos import _C, kernels, launch_cache, triton_tensor_descriptors

__all__ = ["HalCompiled", "HalDriver", "activate", "active", "binary_format", "deactivate", "target"]

# Dynamic shared memory a launch gets without function_set_shared_memory (the HAL ABI's).
_DEFAULT_SHARED = 48 * 1024


def target(device: int | None = None) -> object:
    """The Triton ``GPUTarget`` of flagos:``device`` (the current one by default), from its
    HAL; RuntimeError when no Triton backend compiles for it."""
    from triton.backends.compiler import GPUTarget

    device = torch.flagos.current_device() if device is None else device
    t = kernels.target(device)
    if not t.backend:
        hal = torch.flagos.get_device_properties(device).hal
        raise RuntimeError(f"flagos: no Triton backend compiles for flagos:{device} (HAL '{hal}' "
                           "names none in its kernel target); its kernels come as images of "
                           f"{', '.join(kernels.formats(device)) or 'no format'}")
    arch: int | str = int(t.arch) if t.arch.isdigit() else t.arch
    return GPUTarget(t.backend, arch, t.warp_size)


def binary_format(device: int | None = None) -> str:
    """The image format of the binaries Triton's backend makes for flagos:``device``
    (``cubin`` for ``cuda``), checked against what its HAL loads."""
    from triton.compiler.compiler import make_backend

    device = torch.flagos.current_device() if device is None else device
    fmt = make_backend(target(device)).binary_ext
    if fmt not in kernels.formats(device):
        raise RuntimeError(f"flagos: Triton makes {fmt} binaries for flagos:{device}, its HAL loads "
                           f"{', '.join(kernels.formats(device))}")
    return fmt


class HalUtils:
    """``driver.utils``: binaries loaded through the HAL, device properties."""

    def __init__(self) -> None:
        # Loaded modules by kernel handle: a kernel is valid while its module lives, and
        # Triton keeps only the handle.
        self.modules: dict[int, kernels.KernelModule] = {}

    def load_binary(self, name: str, binary: bytes, shared: int, device: int
                    ) -> tuple[object, int, int, int, int]:
        """Triton's ``load_binary``: (module, function, registers, spills, max threads)."""
        module = kernels.KernelModule(device, self.format_for(device, binary), binary)
        kernel = module.kernel(name, ())
        if shared > _DEFAULT_SHARED:
            module.set_shared_memory(kernel, shared)
        self.modules[kernel.handle] = module
        return module, kernel.handle, 0, 0, kernels.target(device).max_threads_per_block

    def format_for(self, device: int, binary: bytes) -> str:
        formats = kernels.formats(device)
        if not formats:
            raise RuntimeError(f"flagos: the HAL of flagos:{device} cannot load kernels (no kernel "
                               "extension)")
        if not kernels.target(device).backend:
            return formats[0]
        return binary_format(device)

    def get_device_properties(self, device: int) -> dict[str, int]:
        t = kernels.target(device)
        props = torch.flagos.get_device_properties(device)
        return {"max_shared_mem": t.max_shared_memory, "multiprocessor_count": props.multi_processor_count,
                "max_num_regs": 65536, "warpSize": t.warp_size,
                "max_threads_per_block": t.max_threads_per_block}


class HalLauncher:
    """``driver.launcher_cls``: packs a compiled kernel's arguments as its signature says
    and launches it through the HAL on the current flagos stream."""

    utils: HalUtils | None = None  # set by HalDriver: where the modules are kept
    device: int | None = None  # the flagos device launched on; None: the current one

    def __init__(self, src: object, metadata: object) -> None:
        constants = getattr(src, "constants", {}) or {}
        if any(isinstance(k, tuple) and len(k) > 1 for k in constants):
            raise NotImplementedError("flagos: Triton kernels with constants inside tuple arguments "
                                      "are not launched through the HAL")
        self.types = list(src.signature.values())
        for name, unsupported in (("num_ctas", 1), ("launch_cooperative_grid", False),
                                  ("launch_pdl", False)):
            if getattr(metadata, name, unsupported) != unsupported:
                raise NotImplementedError(f"flagos: a Triton kernel with {name}="
                                          f"{getattr(metadata, name)} is not launched through the HAL")
        self.tensordesc_meta = getattr(metadata, "tensordesc_meta", None)
        target = getattr(metadata, "target", None)
        self.backend = getattr(target, "backend", "") or ""
        self.num_warps = metadata.num_warps
        self.shared = metadata.shared
        # Kernels of the Triton releases whose launchers pass a global and a profile scratch
        # pointer after the kernel's own parameters take them too.
        self.scratch = ([(getattr(metadata, "global_scratch_size", 0), getattr(metadata, "global_scratch_align", 1)),
                         (getattr(metadata, "profile_scratch_size", 0), getattr(metadata, "profile_scratch_align", 1))]
                        if hasattr(metadata, "global_scratch_size") else [])
        # The launch with its parameters converted in C++ (its kinds fixed here, once), where
        # every parameter is mirrored and no scratch memory is asked for; otherwise packed
        # here at each launch.
        kinds, descriptors = launch_cache.param_kinds(self.types), []
        if kinds is None and triton_tensor_descriptors.has_descriptors(self.types):
            kinds, descriptors = (triton_tensor_descriptors.typed_kinds(
                self.types, self.tensordesc_meta, self.backend) or (None, []))
        warp_size = getattr(target, "warp_size", 0)
        self.typed = (_C._TypedLauncher(kinds + "z" * len(self.scratch), self.num_warps * warp_size,
                                        self.shared, descriptors)
                      if kinds is not None and warp_size and not any(s for s, _ in self.scratch)
                      else None)

    def __call__(self, grid_x: int, grid_y: int, grid_z: int, stream: object, function: int,
                 packed_metadata: object, launch_metadata: object, enter_hook: object,
                 exit_hook: object, *args: object) -> None:
        device = _C._current_device() if self.device is None else self.device
        module = self.utils.modules.get(function) if self.utils else None
        hooked = enter_hook is not None and launch_metadata is not None
        if self.typed is not None:
            if hooked:
                enter_hook(launch_metadata)
            self.typed.launch(device, function, grid_x, grid_y, grid_z,
                              stream if isinstance(stream, int) else None, module, args)
            if exit_hook is not None and launch_metadata is not None:
                exit_hook(launch_metadata)
            return
        types: list[object] = self.types
        if triton_tensor_descriptors.has_descriptors(types):
            types, args = triton_tensor_descriptors.expand(types, args, self.tensordesc_meta,
                                                           self.backend, device)
        params = launch_cache.pack_params(types, args)
        if params is None:
            raise NotImplementedError(f"flagos: a Triton parameter type of {self.types} is not "
                                      "launched through the HAL")
        scratch = []
        for size, align in self.scratch:
            if size:
                buf = torch.empty(grid_x * grid_y * grid_z * size + align, dtype=torch.uint8,
                                  device=torch.device("flagos", device))
                scratch.append(buf)
                params.append((True, 8, -buf.data_ptr() % align + buf.data_ptr()))
            else:
                params.append((True, 8, 0))
        grid = [int(grid_x), int(grid_y), int(grid_z)]
        block = [self.num_warps * kernels.target(device).warp_size, 1, 1]
        if hooked:
            enter_hook(launch_metadata)
        # On the stream Triton asked for (its driver's get_current_stream, or the caller's);
        # recorded for the launch cache when it is the current one.
        _C._kernel_launch(device, function, grid, block, self.shared, params,
                          stream_id=stream if isinstance(stream, int) else None, keepalive=module)
        if exit_hook is not None and launch_metadata is not None:
            exit_hook(launch_metadata)


class HalCompiled:
    """A kernel Triton compiled through another of its drivers (a twin's: CUDA, for an op run
    on ``torch.cuda`` views of flagos memory), loaded on flagos:``device`` through its HAL,
    so that its launches go through the HAL on the current flagos stream and a launch-cached
    op records them (:mod:`flagos.launch_cache`). RuntimeError or NotImplementedError where
    the HAL loads none of the binaries Triton made, or the kernel is one the HAL launcher
    does not take."""

    def __init__(self, compiled: object, device: int) -> None:
        md = compiled.metadata
        asm = getattr(compiled, "asm", None) or {}
        fmt = binary_format(device)
        if fmt not in asm:
            raise RuntimeError(f"flagos: Triton made no {fmt} binary of {md.name}, which the HAL "
                               f"of flagos:{device} loads")
        self.utils = HalUtils()
        _, self.function, *_ = self.utils.load_binary(md.name, asm[fmt], md.shared, device)
        # launched on flagos:device whatever device is current: switching flagos devices in
        # a twin call would make another CUDA device current under the twin's guard
        self.launcher = type("FlagosHalLauncher", (HalLauncher,),
                             {"utils": self.utils, "device": device})(compiled.src, md)
        self.device = device

    def launch(self, grid: tuple[int, int, int], args: list[object]) -> None:
        """Launch on the current stream of flagos:``device``, ``args`` every argument of the
        kernel in its signature's order (as Triton's launcher takes them)."""
        self.launcher(grid[0], grid[1], grid[2], None, self.function, None, None, None, None,
                      *args)


def _driver_base() -> type:
    from triton.backends.driver import DriverBase

    return DriverBase


class HalDriver(_driver_base()):
    """A Triton driver for flagos devices, through their HALs (see the module's text)."""

    def __init__(self) -> None:
        self.utils = HalUtils()
        launcher = type("FlagosHalLauncher", (HalLauncher,), {"utils": self.utils})
        self.launcher_cls = launcher
        self.get_current_device = torch.flagos.current_device
        self.set_current_device = torch.flagos.set_device
        super().__init__()

    @classmethod
    def is_active(cls) -> bool:
        return False  # never picked by Triton on its own: activate() makes it the driver

    def get_current_target(self) -> object:
        return target(self.get_current_device())

    def get_current_stream(self, device: int | None = None) -> int:
        return _C._current_stream_id(_C._current_device() if device is None else device)

    def get_active_torch_device(self) -> torch.device:
        return torch.device("flagos", self.get_current_device())

    def get_device_interface(self) -> object:
        return torch.flagos

    def map_python_to_cpp_type(self, ty: str) -> str:
        if ty.startswith("*"):
            return "void*"
        return {"i1": "int8_t", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
                "u1": "uint8_t", "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t",
                "u64": "uint64_t", "fp16": "double", "bf16": "double", "fp32": "double",
                "f32": "double", "fp64": "double"}[ty]

    def get_benchmarker(self) -> object:
        from triton.testing import do_bench

        return do_bench

    def get_empty_cache_for_benchmark(self) -> torch.Tensor:
        return torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int,
                           device=torch.device("flagos", self.get_current_device()))

    def clear_cache(self, cache: torch.Tensor) -> None:
        cache.zero_()


def activate() -> HalDriver:
    """Make a :class:`HalDriver` Triton's active driver for the process; returns it."""
    import triton

    driver = HalDriver()
    triton.runtime.driver.set_active(driver)
    return driver


def deactivate() -> None:
    """Give Triton its default driver back."""
    import triton

    triton.runtime.driver.reset_active()


@contextlib.contextmanager
def active() -> Iterator[HalDriver]:
    """Triton's active driver is a :class:`HalDriver` inside the block, the previous one
    after it."""
    import triton

    config = triton.runtime.driver
    # What was set, not config.active, which would create Triton's default driver (an
    # error on a machine without a GPU): restored as it was.
    previous = config._active
    driver = activate()
    try:
        yield driver
    finally:
        config._active = previous


# This module imported Triton before flagos' import hook could make the HAL driver Triton's
# (flagos._triton_default): it does so now that activate() exists.
if globals().pop("_activate_when_loaded", False):
    activate()
