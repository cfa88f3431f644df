"""A tiny Triton kernel library of this project's own, for the tests: served through
:class:`flagos_ops_gems.KernelLibraryProvider` exactly as FlagGems is (registered with
``register_library``), so the provider's whole mechanism (lazy load, op table, functional
ops arriving as themselves, aliases, in-place results, declines, errors, generators,
results in flagos memory) is exercised where FlagGems cannot run: on sim, under Triton's
interpreter (``TRITON_INTERPRET=1``, CPU tensors); on a GPU machine, compiled on CUDA.
Without a twin (``FLAGOS_NO_TWIN=1``) it is loaded for flagos devices: its kernels get the
flagos tensors themselves.

Each kernel is written as a torch.library Python kernel of its op would be: schema
arguments in, results out, allocations with ``torch.empty`` on the input's device.
"""

from __future__ import annotations

import os
from types import MappingProxyType

import torch
from flagos_ops_gems import KernelLibrary, LibraryUnavailable

BLOCK = 64

# What the kernels saw, for the tests: the device of the first argument and the
# data_ptr of each fresh result.
seen: dict[str, list] = {"devices": [], "results": []}


def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def binary(x, y, out, alpha, n, OP: tl.constexpr, B: tl.constexpr):
        offs = tl.program_id(0) * B + tl.arange(0, B)
        m = offs < n
        a = tl.load(x + offs, mask=m)
        b = tl.load(y + offs, mask=m)
        r = a + alpha * b if OP == 0 else a * b
        tl.store(out + offs, r, mask=m)

    @triton.jit
    def absolute(x, out, n, B: tl.constexpr):
        offs = tl.program_id(0) * B + tl.arange(0, B)
        m = offs < n
        tl.store(out + offs, tl.abs(tl.load(x + offs, mask=m)), mask=m)

    @triton.jit
    def bernoulli(out, p, seed, n, B: tl.constexpr):
        offs = tl.program_id(0) * B + tl.arange(0, B)
        r = tl.rand(seed, offs)
        tl.store(out + offs, (r < p).to(out.dtype.element_ty), mask=offs < n)

    def grid(n):
        return (triton.cdiv(n, BLOCK),)

    def simple(*ts: torch.Tensor) -> bool:
        # The kernels handle contiguous float32 tensors of one shape; anything else is
        # declined (the next provider of the chain runs).
        return all(t.is_contiguous() and t.dtype == torch.float32 and t.shape == ts[0].shape
                   for t in ts)

    def note(x: torch.Tensor, out: torch.Tensor | None = None) -> None:
        seen["devices"].append(x.device)
        if out is not None:
            seen["results"].append(out.data_ptr())

    def add(self, other, alpha=1):
        if not isinstance(other, torch.Tensor) or not simple(self, other):
            return NotImplemented
        if alpha == 13:
            raise ValueError("alpha 13 is refused by the test library")
        if alpha == 17:
            raise torch.OutOfMemoryError("the test library ran out of memory (alpha 17)")
        out = torch.empty_like(self)
        note(self, out)
        binary[grid(out.numel())](self, other, out, float(alpha), out.numel(), OP=0, B=BLOCK)
        return out

    def mul_(self, other):
        if not isinstance(other, torch.Tensor) or not simple(self, other):
            return NotImplemented
        if self.numel() == 13:
            raise ValueError("13 elements are refused by the test library")
        note(self)
        binary[grid(self.numel())](self, other, self, 1.0, self.numel(), OP=1, B=BLOCK)
        return self

    def abs_(self):
        if not simple(self):
            return NotImplemented
        out = torch.empty_like(self)
        note(self, out)
        absolute[grid(out.numel())](self, out, out.numel(), B=BLOCK)
        return out

    def bernoulli_(self, p=0.5, *, gen=None):
        # Its generator parameter is named otherwise than the schema's (as FlagGems 5.0's
        # multinomial names it): the library declares the alias.
        if not simple(self):
            return NotImplemented
        note(self)
        # flagos passes its generator's twin generator (CPU on sim, CUDA on a CUDA HAL)
        device = gen.device if gen is not None else self.device
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen, device=device))
        bernoulli[grid(self.numel())](self, float(p), seed, self.numel(), B=BLOCK)
        return self

    def neg(self):
        # Written with torch ops, as libraries do for some ops: its result is made by ATen
        # inside the kernel scope.
        out = torch.neg(self)
        note(self, out)
        return out

    return {
        "aten::neg": neg,
        "aten::add.Tensor": add,
        "aten::mul_.Tensor": mul_,
        "aten::abs": abs_,
        "aten::bernoulli_.float": bernoulli_,
    }


class TritonTestKernels(KernelLibrary):
    """The test library; ``fail`` makes its load fail with that reason."""

    name = "flagos test kernels"
    keyword_aliases = MappingProxyType({"generator": "gen"})

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.loads = 0

    def load(self):
        self.loads += 1
        if self.fail:
            raise LibraryUnavailable(self.fail)
        try:
            table = _kernels()
        except ImportError as e:
            raise LibraryUnavailable(f"not installed: Triton is missing ({e})") from e
        if torch.flagos.get_device_properties(0).twin_device == "none":
            # No twin: the kernels take flagos tensors themselves (the interpreter copies
            # them to the host and back; compiled, they launch through the HAL).
            return table, frozenset({"flagos"})
        twin = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
        return table, frozenset({twin})
