"""Triton kernels of the weight-only packed linear ops (:mod:`.fused_linear`): each tile of
the weight is loaded in its packed form (one byte per FP8 weight, half a byte per NVFP4
weight plus its scales) and multiplied on the matrix units with float32 accumulation.
FP8 values enter the matmul as they are (exact in bf16, fp16 and fp32) and their float32
scale multiplies each tile's partial sums (a K-tile never straddles a scale block; blocks
narrower than the smallest tile are declined). NVFP4 elements are decoded from their bits
and multiplied by their E4M3 block scale (exact: at most 6 significant bits), the global
scale multiplies the sums. Bias is added in float32. The results differ from the
reference formula (dequantize in float32, round to the activations' dtype, matmul) by the
rounding of the dequantized weight and the order of the sums.

``K`` is a compile-time constant: a model has few distinct ones, the loop's trip count is
then known to the compiler, and Triton's interpreter (the CPU tests) runs the loop.

Triton is imported on the first call; without it (or for a dtype the kernels do not take)
the functions return None and the caller computes the reference formula.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import NamedTuple

import torch
from flagos import launch_cache
from flagos.launch_cache import triton_hook_set as _hooked

__all__ = ["fp8_linear", "nvfp4_linear"]

_ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_MIN_BLOCK_K = 64  # the smallest K-tile of the configs
_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


# Tile shapes the autotuner picks from, (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages),
# for up to 16 activation rows and for more.
SMALL_M_SHAPES = [(16, bn, bk, w, 4) for bn in (16, 32, 64) for bk in (64, 128, 256)
                  for w in (2, 4)]
LARGE_M_SHAPES = [(bm, bn, bk, w, 3) for bm, bn in ((64, 64), (64, 128), (128, 128))
                  for bk in (64, 128) for w in (4, 8)]
# The one-row kernels' tile (BLOCK_N, BLOCK_K, num_warps, num_stages), fixed rather than
# autotuned: on the H200 it is within 0-25% of the best of ten tiles on each decode layer
# of a Llama-3-8B (benchmarks/packed_kernel_sweep.py), the autotuner's timing of kernels
# this short picked tiles 2-7x slower than the best, and a fixed tile costs no tuning at
# a layer's first call.
FP8_GEMV_TILE = (1, 1024, 4, 2)
NVFP4_GEMV_TILE = (8, 1024, 4, 2)
GEMV_MAX_M = 1  # rows up to which the matrix-unit-free kernel runs
_forced_gemv_tile: tuple[int, int, int, int] | None = None


@contextlib.contextmanager
def gemv_tile(block_n: int, block_k: int, num_warps: int, num_stages: int):
    """Run the one-row kernels with this tile shape instead of their fixed one (the
    tile-shape sweep of benchmarks/packed_kernel_sweep.py)."""
    global _forced_gemv_tile
    saved = _forced_gemv_tile
    _forced_gemv_tile = (block_n, block_k, num_warps, num_stages)
    launch_cache.clear()  # launches kept with the fixed tile would serve the calls inside
    try:
        yield
    finally:
        _forced_gemv_tile = saved
        launch_cache.clear()


def _configs(triton, kind: str):
    shapes = SMALL_M_SHAPES if kind == "small" else LARGE_M_SHAPES
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w,
                          num_stages=st) for bm, bn, bk, w, st in shapes]


def _k_tiles_within_scale_blocks(configs, named_args, **kwargs):
    """The FP8 kernel's tiles along K must not straddle a scale block (one scale per
    output column and tile): keep the configs whose BLOCK_K divides the block, or any
    when the block is the whole K."""
    args = {**named_args, **kwargs}  # the launcher passes every argument by name
    cols, k = args["scale_cols"], args["K"]
    return [c for c in configs if cols >= k or cols % c.kwargs["BLOCK_K"] == 0]


def _gemv_meta(tile: tuple[int, int, int, int], scale_k: int) -> dict:
    """The launch parameters of a one-row kernel: ``tile``, its K-tile narrowed where it
    would neither lie in one scale block nor span whole ones (blocks of a width that is not
    a power of two: the tile is reshaped by the width)."""
    bn, bk, warps, stages = tile
    if scale_k and scale_k % bk and (scale_k & (scale_k - 1) or bk % scale_k):
        bk = scale_k & -scale_k  # its largest power-of-two divisor
    return {"BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages}


# Why a call whose Triton launch Triton made itself is not kept (flagos.launch_cache.not_kept)
_NOT_THROUGH_HAL = "a Triton launch made otherwise than through the HAL"

class _RepeatLauncher:
    """A one-row kernel launched, on repeated calls, straight through its compiled form.

    Triton's ``kernel[grid](**args)`` binds and specializes every argument in Python on
    each call (on the H200's host about 9 of the 34 us a call of the Triton wrapper takes,
    against 10-30 us of GPU time for a decode layer). The first call of each launch key goes through it and keeps the compiled
    kernel it returns; later calls with the same key call that kernel's launcher with the
    arguments in signature order, which is what Triton does itself once it has found the
    kernel in its cache. The key holds everything Triton specializes on and more: each
    tensor's dtype and 16-byte alignment, every other argument's exact value, the launch
    options, Triton's debug setting and the device. With launch hooks set (profilers),
    or a Triton without these internals, every call goes through Triton.
    """

    def __init__(self, jit_fn, triton) -> None:
        self.jit_fn = jit_fn
        self.names = tuple(getattr(jit_fn, "arg_names", ()))
        knobs = getattr(triton, "knobs", None)
        runtime = getattr(knobs, "runtime", None)
        self.knobs, self.compilation = runtime, getattr(knobs, "compilation", None)
        # its active driver is made on first use (it needs a GPU): read at each launch
        self.drivers = getattr(getattr(triton, "runtime", None), "driver", None)
        self.compiled: dict[tuple, object] = {}
        # compiled kernels loaded through a flagos device's HAL, by kernel and device
        self.on_hal: dict[tuple, object] = {}
        from flagos.triton_driver import HalDriver

        self.hal_driver = HalDriver
        self.usable = bool(self.names) and self.drivers is not None \
            and all(hasattr(runtime, k) for k in ("debug", "launch_enter_hook",
                                                 "launch_exit_hook"))

    def _key(self, args: dict, device: int) -> tuple:
        # Triton also compiles per debug and instrumentation setting (knobs read per launch)
        key = [device, args["num_warps"], args["num_stages"], self.knobs.debug,
               getattr(self.compilation, "instrumentation_mode", None)]
        for name in self.names:
            v = args[name]
            # the type too: 1, True and 1.0 are equal keys that Triton compiles apart
            key.append((v.dtype, v.data_ptr() % 16 == 0) if isinstance(v, torch.Tensor)
                       else (type(v), v))
        return tuple(key)

    def __call__(self, grid: tuple[int, int], args: dict, record: bool = True) -> None:
        """Launch; with ``record``, so that flagos' launch cache keeps the launch where one
        of its ops is running this (``flagos.launch_cache``: later calls of the op with the
        same argument metadata repeat it from C++). Through flagos' HAL driver (no twin)
        the launch records itself. Through a twin's driver a compiled kernel is launched
        through the HAL instead (``flagos.triton_driver.HalCompiled``), which records it;
        a kernel's first call compiles it without launching (Triton's ``warmup``) to launch
        it so. Where the HAL cannot launch it (a HAL that loads none of Triton's binaries, a
        twin stream that is not the flagos one), Triton does and the call is not kept."""
        # (a recording is open only inside a launch-cached op's call on a device, where
        # Triton has an active driver to ask for)
        recorded = record and launch_cache.recording() and not self._launches_record_themselves()
        if not self.usable or _hooked(self.knobs.launch_enter_hook) \
                or _hooked(self.knobs.launch_exit_hook):
            if recorded:
                launch_cache.spoil_recording(_NOT_THROUGH_HAL)
            self.jit_fn[grid](**args)
            return
        driver = self.drivers.active
        device = driver.get_current_device()
        key = self._key(args, device)
        kernel = self.compiled.get(key)
        values = [args[n] for n in self.names]
        if kernel is None:
            if recorded and hasattr(self.jit_fn, "warmup"):
                # compiled without a launch: launched through the HAL below, and kept
                kernel = self.jit_fn.warmup(grid=grid, **args)
            else:
                if recorded:
                    launch_cache.spoil_recording(_NOT_THROUGH_HAL)
                kernel = self.jit_fn[grid](**args)
                self.compiled[key] = kernel.result() if hasattr(kernel, "result") else kernel
                return
            kernel = self.compiled[key] = kernel.result() if hasattr(kernel, "result") else kernel
        if recorded:
            hal = self._on_hal(kernel, values)
            if hal is not None:
                hal.launch((grid[0], grid[1], 1), values)
                return
            launch_cache.spoil_recording(_NOT_THROUGH_HAL)
        kernel.run(grid[0], grid[1], 1, driver.get_current_stream(device),
                   kernel.function, kernel.packed_metadata, None, None, None, *values)

    def _launches_record_themselves(self) -> bool:
        """Whether Triton launches through flagos' HAL driver (no twin): those record
        themselves."""
        return self.drivers is not None and isinstance(self.drivers.active, self.hal_driver)

    def _on_hal(self, kernel: object, values: list) -> object:
        """The compiled ``kernel`` loaded through the HAL of the flagos device whose launches
        the running launch-cached call keeps (``flagos.launch_cache.hal_device_for`` of its
        first tensor's device), or None."""
        tensor = next((v for v in values if isinstance(v, torch.Tensor)), None)
        device = None if tensor is None else launch_cache.hal_device_for(tensor.device)
        if device is None:
            return None
        hal = self.on_hal.get((id(kernel), device))  # compiled kernels are never dropped
        if hal is None:
            from flagos.triton_driver import HalCompiled

            try:
                hal = self.on_hal[(id(kernel), device)] = HalCompiled(kernel, device)
            except (RuntimeError, NotImplementedError, AttributeError):
                return None  # this call not kept; a later one tries again
        return hal


class _Family(NamedTuple):
    """One format's kernels: the one-row kernel's launcher (``gemv(grid, args)``) and the
    matrix-unit kernel for up to 16 rows and for more (autotuned; the plain kernels under
    Triton's interpreter)."""

    gemv: object
    small: object
    large: object
    interpreted: bool


@functools.cache
def _kernels():
    try:
        import triton

        from . import _triton_kernels as k
    except ImportError:
        return None
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"  # read by Triton at import too

    def family(gemv_fn, matmul_fn, scaled: bool) -> _Family:
        if interpreted:  # no timing under the interpreter
            return _Family(lambda grid, args, record=False: gemv_fn[grid](**args), matmul_fn,
                       matmul_fn, True)
        key = ["N", "K", "M_BUCKET"] + (["scale_cols"] if scaled else [])
        pruning = {"early_config_prune": _k_tiles_within_scale_blocks} if scaled else None
        small, large = (triton.autotune(_configs(triton, kind), key=key,
                                        prune_configs_by=pruning)(matmul_fn)
                        for kind in ("small", "large"))
        return _Family(_RepeatLauncher(gemv_fn, triton), small, large, False)

    return (triton, family(k.fp8_gemv_kernel, k.fp8_kernel, True),
            family(k.nvfp4_gemv_kernel, k.nvfp4_kernel, False))


def _m_bucket(m: int) -> int:
    return 16 if m <= 16 else min(1 << (m - 1).bit_length(), 4096)


def _launch(triton, kernels: _Family, x: torch.Tensor, y: torch.Tensor, gemv_only: dict,
            gemv_tile: tuple[int, int, int, int], **args) -> None:
    """The one-row kernel for ``m <= GEMV_MAX_M`` (one program row per activation row, with
    ``gemv_tile`` unless :func:`gemv_tile` says otherwise), else the matrix-unit kernel;
    ``gemv_only`` are the arguments only the former takes. Under the interpreter, which
    runs the kernels in NumPy, tiles are small."""
    (m, k), n = x.shape, y.shape[1]
    args.update(x=x, y=y, N=n, K=k, sxm=x.stride(0), sxk=x.stride(1), sym=y.stride(0),
                syn=y.stride(1))
    if m <= GEMV_MAX_M:
        args.update(gemv_only)
        tile = _forced_gemv_tile or ((4, _MIN_BLOCK_K, 4, 2) if kernels.interpreted
                                     else gemv_tile)
        args.update(_gemv_meta(tile, gemv_only.get("SCALE_K", 0)))
        # not triton.cdiv: a constexpr_function since Triton 3.6, microseconds a call
        kernels.gemv((-(-n // args["BLOCK_N"]), m), args, record=_forced_gemv_tile is None)
        return
    kernel = kernels.small if m <= 16 else kernels.large
    args.update(M=m, M_BUCKET=_m_bucket(m), IEEE=x.dtype == torch.float32)
    if kernels.interpreted:
        args.update(BLOCK_M=16, BLOCK_N=32, BLOCK_K=_MIN_BLOCK_K)

    def grid(c):
        return -(-n // c["BLOCK_N"]), -(-m // c["BLOCK_M"])

    kernel[grid](**args)


def _rows(x: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x`` [..., K] as [M, K], the result [..., n] and it as [M, n] (views where ``x`` is
    viewable so)."""
    y = torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x.device)
    if x.dim() == 2:
        return x, y, y
    return x.reshape(-1, x.shape[-1]), y, y.view(-1, n)


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
               block: list[int], bias: torch.Tensor | None) -> torch.Tensor | None:
    """``flagos_quant::fp8_weight_linear`` on CUDA tensors; None where the kernel does not
    apply (no Triton, other dtypes, empty operands)."""
    k = _kernels()
    if k is None or x.dtype not in _ACT_DTYPES or weight.dtype not in _FP8_DTYPES \
            or weight_scale.dtype != torch.float32 \
            or (weight_scale.dim() != 2 and weight_scale.numel() != 1) \
            or (bias is not None and bias.dtype != x.dtype) or x.numel() == 0 \
            or weight.numel() == 0 \
            or (block[1] < x.shape[-1] and block[1] % _MIN_BLOCK_K):  # tiles would straddle
        return None
    if weight_scale.dim() != 2:  # one scale (the op checked block is the weight's shape)
        weight_scale = weight_scale.reshape(1, 1)
    x2, y, y2 = _rows(x, weight.shape[0])
    scale_k = int(block[1]) if block[1] < x.shape[-1] else 0
    _launch(k[0], k[1], x2, y2, {"SCALE_K": scale_k}, FP8_GEMV_TILE, w=weight,
            s=weight_scale, b=bias if bias is not None else y2, HAS_BIAS=bias is not None,
            swn=weight.stride(0), swk=weight.stride(1), ssn=weight_scale.stride(0),
            ssk=weight_scale.stride(1), scale_rows=int(block[0]), scale_cols=int(block[1]))
    return y


def nvfp4_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                 weight_scale_2: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """``flagos_quant::nvfp4_weight_linear`` on CUDA tensors; None where the kernel does
    not apply."""
    k = _kernels()
    if k is None or x.dtype not in _ACT_DTYPES or weight.dtype != torch.uint8 \
            or weight_scale.dtype != torch.float8_e4m3fn or weight_scale.dim() != 2 \
            or weight_scale_2.numel() != 1 or (bias is not None and bias.dtype != x.dtype) \
            or x.numel() == 0 or weight.numel() == 0:
        return None
    x2, y, y2 = _rows(x, weight.shape[0])
    _launch(k[0], k[2], x2, y2, {}, NVFP4_GEMV_TILE, w=weight, s=weight_scale,
            g=weight_scale_2.reshape(1).float(), b=bias if bias is not None else y2,
            HAS_BIAS=bias is not None, swn=weight.stride(0), swk=weight.stride(1),
            ssn=weight_scale.stride(0), ssk=weight_scale.stride(1))
    return y
