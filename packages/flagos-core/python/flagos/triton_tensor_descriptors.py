"""Host tensor descriptors of Triton kernels launched through the HAL.

A ``@triton.jit`` kernel may take a ``triton.tools.tensor_descriptor.TensorDescriptor``
made on the host. Triton's CUDA backend (the layout of Triton 3.6's launcher) passes it in
one of two ways, which the compiled kernel's ``tensordesc_meta`` decides per descriptor:

- lowered to plain loads (no metadata entry): the base pointer, the shape and strides as
  64-bit integers, the padding flag, then the shape as 32-bit and the strides as 64-bit
  integers;
- lowered to the chip's tile copies (TMA on Hopper and later; a metadata entry): the
  descriptor value the HAL encodes (``kernel_encode_tensor_descriptor``, ABI 1.5) passed
  by value, then the shape as 32-bit and the strides as 64-bit integers.

:func:`expand` turns a kernel's signature and arguments into what the HAL launch takes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from flagos import _C

__all__ = ["expand", "has_descriptors"]

_TENSORDESC = re.compile(r"tensordesc<([^[>]*)\[([^]]*)\]")
# Triton's element type codes of its TMA lowering, as the CUDA driver numbers them
# (CUtensorMapDataType): three of them differ between the two.
_DEVICE_TO_HOST_TYPE = {8: 10, 9: 8, 10: 9}


def has_descriptors(types: Sequence[object]) -> bool:
    """Whether a kernel signature takes a tensor descriptor."""
    return any(isinstance(t, str) and t.startswith("tensordesc") for t in types)


def expand(types: Sequence[object], args: Sequence[object], meta: Sequence[dict | None] | None,
           backend: str, device: int) -> tuple[list[object], list[object]]:
    """(types, values) of a launch whose signature ``types`` has tensor descriptors, each
    replaced by what the kernel takes for it (see the module's text); ``meta`` is the
    compiled kernel's ``tensordesc_meta``."""
    if backend != "cuda":
        raise NotImplementedError(f"flagos: host tensor descriptors are passed as Triton's CUDA backend "
                                  f"passes them; the layout of backend '{backend}' is not known")
    n_desc = sum(1 for t in types if isinstance(t, str) and t.startswith("tensordesc"))
    metas = list(meta) if meta else [None] * n_desc
    if len(metas) != n_desc:
        raise NotImplementedError(f"flagos: a kernel with {n_desc} tensor descriptors and {len(metas)} "
                                  "entries of tensordesc_meta")
    out_types: list[object] = []
    out_args: list[object] = []
    k = 0
    for ty, arg in zip(types, args):
        if not (isinstance(ty, str) and ty.startswith("tensordesc")):
            out_types.append(ty)
            out_args.append(arg)
            continue
        m, entry = _TENSORDESC.match(ty), metas[k]
        k += 1
        if m is None:
            raise NotImplementedError(f"flagos: a tensor descriptor type {ty!r} not understood")
        ndim = m.group(2).count(",") + 1
        shape, strides = [int(s) for s in arg.shape], [int(s) for s in arg.strides]
        if len(shape) != ndim:
            raise ValueError(f"flagos: a {len(shape)}-d tensor descriptor for a {ndim}-d parameter")
        if entry is None:
            out_types += ["*" + m.group(1)] + ["i64"] * (2 * ndim) + ["i1"]
            out_args += [arg.base, *shape, *strides, arg.padding == "nan"]
        else:
            if entry.get("fp4_padded"):
                shape[-1] *= 2
            etype = int(entry["elem_type"])
            desc = _C._kernel_encode_tensor_descriptor(
                device, int(arg.base.data_ptr()), shape, strides, [int(b) for b in entry["block_size"]],
                int(entry["elem_size"]), _DEVICE_TO_HOST_TYPE.get(etype, etype), int(entry["swizzle"]),
                arg.padding == "nan")
            out_types.append("bytes")
            out_args.append(desc)
        out_types += ["i32"] * ndim + ["i64"] * ndim
        out_args += [*shape, *strides]
    return out_types, out_args
