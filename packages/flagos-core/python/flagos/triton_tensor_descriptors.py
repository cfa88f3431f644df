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

:func:`expand` turns a kernel's signature and arguments into what the HAL launch takes;
:func:`typed_kinds` describes the same to ``flagos._C._TypedLauncher``, which does it in
C++ at each launch and keeps the descriptor's source for the launch cache (a relaunch
encodes it again with the new call's address).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from flagos import _C

__all__ = ["expand", "has_descriptors", "typed_kinds"]

_TENSORDESC = re.compile(r"tensordesc<([^[>]*)\[([^]]*)\]")
# Triton's element type codes of its TMA lowering, as the CUDA driver numbers them
# (CUtensorMapDataType): three of them differ between the two.
_DEVICE_TO_HOST_TYPE = {8: 10, 9: 8, 10: 9}


def has_descriptors(types: Sequence[object]) -> bool:
    """Whether a kernel signature takes a tensor descriptor."""
    return any(isinstance(t, str) and t.startswith("tensordesc") for t in types)


def _descriptor_entries(types: Sequence[object], meta: Sequence[dict | None] | None,
                        backend: str) -> list[tuple[re.Match, dict | None]]:
    """Each tensor descriptor parameter of ``types``: its type's match and its
    ``tensordesc_meta`` entry (None: lowered to plain loads)."""
    if backend != "cuda":
        raise NotImplementedError(f"flagos: host tensor descriptors are passed as Triton's CUDA backend "
                                  f"passes them; the layout of backend '{backend}' is not known")
    descs = [t for t in types if isinstance(t, str) and t.startswith("tensordesc")]
    metas = list(meta) if meta else [None] * len(descs)
    if len(metas) != len(descs):
        raise NotImplementedError(f"flagos: a kernel with {len(descs)} tensor descriptors and {len(metas)} "
                                  "entries of tensordesc_meta")
    entries = []
    for ty, entry in zip(descs, metas):
        m = _TENSORDESC.match(ty)
        if m is None:
            raise NotImplementedError(f"flagos: a tensor descriptor type {ty!r} not understood")
        entries.append((m, entry))
    return entries


def _ndim(m: re.Match) -> int:
    return m.group(2).count(",") + 1


def _host_element_type(entry: dict) -> int:
    etype = int(entry["elem_type"])
    return _DEVICE_TO_HOST_TYPE.get(etype, etype)


def typed_kinds(types: Sequence[object], meta: Sequence[dict | None] | None,
                backend: str) -> tuple[str, list[tuple]] | None:
    """The parameter kinds and descriptor specs ``flagos._C._TypedLauncher`` takes for a
    kernel whose signature ``types`` has tensor descriptors (``T`` lowered to tile copies,
    ``D`` to plain loads; the layouts of the module's text), or None where it takes no such
    kernel (a type it does not mirror, a backend whose layout is not known)."""
    from flagos import launch_cache

    try:
        entries = iter(_descriptor_entries(types, meta, backend))
    except NotImplementedError:
        return None
    kinds, specs = [], []
    for ty in types:
        if not (isinstance(ty, str) and ty.startswith("tensordesc")):
            kind = launch_cache.param_kinds([ty])
            if kind is None:
                return None
            kinds.append(kind)
            continue
        m, entry = next(entries)
        if entry is None:
            kinds.append("D")
            specs.append((_ndim(m), [], 0, 0, 0, False))
        else:
            kinds.append("T")
            specs.append((_ndim(m), [int(b) for b in entry["block_size"]], int(entry["elem_size"]),
                          _host_element_type(entry), int(entry["swizzle"]), bool(entry.get("fp4_padded"))))
    return "".join(kinds), specs


def expand(types: Sequence[object], args: Sequence[object], meta: Sequence[dict | None] | None,
           backend: str, device: int) -> tuple[list[object], list[object]]:
    """(types, values) of a launch whose signature ``types`` has tensor descriptors, each
    replaced by what the kernel takes for it (see the module's text); ``meta`` is the
    compiled kernel's ``tensordesc_meta``."""
    entries = iter(_descriptor_entries(types, meta, backend))
    out_types: list[object] = []
    out_args: list[object] = []
    for ty, arg in zip(types, args):
        if not (isinstance(ty, str) and ty.startswith("tensordesc")):
            out_types.append(ty)
            out_args.append(arg)
            continue
        m, entry = next(entries)
        ndim = _ndim(m)
        shape, strides = [int(s) for s in arg.shape], [int(s) for s in arg.strides]
        if len(shape) != ndim:
            raise ValueError(f"flagos: a {len(shape)}-d tensor descriptor for a {ndim}-d parameter")
        if entry is None:
            out_types += ["*" + m.group(1)] + ["i64"] * (2 * ndim) + ["i1"]
            out_args += [arg.base, *shape, *strides, arg.padding == "nan"]
        else:
            if entry.get("fp4_padded"):
                shape[-1] *= 2
            desc = _C._kernel_encode_tensor_descriptor(
                device, int(arg.base.data_ptr()), shape, strides, [int(b) for b in entry["block_size"]],
                int(entry["elem_size"]), _host_element_type(entry), int(entry["swizzle"]),
                arg.padding == "nan")
            out_types.append("bytes")
            out_args.append(desc)
        out_types += ["i32"] * ndim + ["i64"] * ndim
        out_args += [*shape, *strides]
    return out_types, out_args
