"""flagos-distributed: ``ProcessGroupFlagOS``, the torch.distributed backend of flagos.

Importing this package registers the c10d backend ``"flagos"`` for the device
``"flagos"``, so ``init_process_group("flagos")``, ``init_process_group()`` (flagos is
the accelerator) and ``init_process_group("cpu:gloo,flagos:flagos")`` work. When the
package is installed, plain ``import torch`` registers it too: flagos-core's autoload
imports flagos, which calls this package's ``flagos.plugins`` entry point (``register``).

ProcessGroupFlagOS is a C++ ``c10d::Backend``; it hands every collective to the best
communication library present (see :func:`select_delegate`): FlagCX, HCCL, NCCL on
CUDA-addressable HAL memory (zero-copy), else Gloo (zero-copy on host-addressable memory
such as the sim HAL, staged through pinned host buffers otherwise).

Environment:

``FLAGOS_DIST_BACKEND``  ``auto`` (default) | ``flagcx`` | ``hccl`` | ``nccl`` | ``gloo``:
    force the delegate; a forced library that is missing is an error.
``FLAGOS_DIST_CHECK``    ``1``/``0``: cross-rank shape/dtype check before each collective
    (default: on for Gloo, off for NCCL).
``FLAGOS_DIST_STAGED``   ``1``: with Gloo, stage through pinned host buffers even when the
    device memory is host-addressable (exercises the staging path).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from dataclasses import dataclass
from datetime import timedelta

import torch

__version__ = "0.1.0"
__all__ = ["Delegate", "ProcessGroupFlagOS", "available_delegates", "backend_of", "register",
           "select_delegate"]

logger = logging.getLogger("flagos_distributed")

DELEGATES = ("flagcx", "hccl", "nccl", "gloo")  # the order of preference
_lock = threading.Lock()
_registered = False


@dataclass(frozen=True)
class Delegate:
    """The communication library a group uses, and how tensors reach it."""

    name: str    # "nccl" or "gloo"
    path: str    # "cuda" (zero-copy CUDA views), "host" (zero-copy CPU views), "staged"
    reason: str  # why it was chosen, for the log


def _flagos_props(index: int):
    import flagos  # noqa: F401  (registers the device)

    return torch.flagos.get_device_properties(index)


def available_delegates(index: int | None = None) -> dict[str, str | None]:
    """For each library, ``None`` when it can serve flagos:index, else why it cannot."""
    import torch.distributed as dist

    if index is None:
        index = torch.flagos.current_device()
    native = _flagos_props(index).twin_device
    out: dict[str, str | None] = {}
    if importlib.util.find_spec("flagcx") is None:
        out["flagcx"] = "FlagCX (python package 'flagcx') is not installed"
    else:
        out["flagcx"] = "FlagCX is installed, but delegation to FlagCX is not available in " \
                        "this build of flagos-distributed"
    if importlib.util.find_spec("torch_npu") is None:
        out["hccl"] = "HCCL (torch_npu) is not installed"
    else:
        out["hccl"] = "HCCL is installed, but delegation to HCCL is not available in this " \
                      "build of flagos-distributed"
    if native != "cuda":
        out["nccl"] = f"the HAL's memory is not CUDA memory (native device {native!r})"
    elif not dist.is_nccl_available():
        out["nccl"] = f"this torch ({torch.__version__}) is built without NCCL"
    elif not torch.cuda.is_available():
        out["nccl"] = "torch sees no CUDA device"
    else:
        out["nccl"] = None
    out["gloo"] = None if dist.is_gloo_available() else "this torch is built without Gloo"
    return out


def select_delegate(index: int | None = None) -> Delegate:
    """The delegate for groups on flagos:index (default: the current device)."""
    if index is None:
        index = torch.flagos.current_device()
    native = _flagos_props(index).twin_device
    forced = os.environ.get("FLAGOS_DIST_BACKEND", "auto").strip().lower() or "auto"
    if forced not in (*DELEGATES, "auto"):
        raise ValueError(f"FLAGOS_DIST_BACKEND={forced!r}: expected auto or one of {DELEGATES}")
    why = available_delegates(index)
    if forced != "auto":
        if why[forced] is not None:
            raise RuntimeError(f"FLAGOS_DIST_BACKEND={forced} was requested, but {why[forced]}")
        name, reason = forced, f"forced by FLAGOS_DIST_BACKEND={forced}"
    else:
        name = next(n for n in DELEGATES if why[n] is None or n == "gloo")
        if why[name] is not None:
            raise RuntimeError(f"no communication library for flagos: {why}")
        skipped = "; ".join(f"{n}: {why[n]}" for n in DELEGATES[:DELEGATES.index(name)])
        reason = "best available" + (f" (skipped {skipped})" if skipped else "")
    if name == "nccl":
        path = "cuda"
    elif native == "cpu" and os.environ.get("FLAGOS_DIST_STAGED", "0") != "1":
        path = "host"
    else:
        path = "staged"
    return Delegate(name, path, reason)


def _env_flag(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return default
    return v.strip().lower() not in ("0", "false", "no", "off")


def _create(dist_opts, backend_options=None):
    """c10d creator (extended API): build the delegate, then ProcessGroupFlagOS over it."""
    import torch.distributed as dist
    from torch.distributed import PrefixStore

    from flagos_distributed._C import ProcessGroupFlagOS

    store, rank, size = dist_opts.store, dist_opts.group_rank, dist_opts.group_size
    timeout = dist_opts.timeout
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    delegate = select_delegate()
    check = _env_flag("FLAGOS_DIST_CHECK", delegate.name == "gloo")
    native_index = [torch.flagos.get_device_properties(i).native_device_index
                    for i in range(torch.flagos.device_count())]
    if delegate.name == "gloo":
        inner = dist.ProcessGroupGloo(PrefixStore("flagos/gloo/", store), rank, size, timeout)
        checker = inner
    else:  # nccl: built at run time, so this package needs no CUDA to build
        cur = torch.flagos.current_device()
        cuda_index = native_index[cur]
        if cuda_index is None or cuda_index < 0 or cuda_index >= torch.cuda.device_count():
            raise RuntimeError(
                f"ProcessGroupFlagOS: flagos:{cur} has no CUDA device under it (native device "
                f"index {cuda_index}, torch sees {torch.cuda.device_count()} CUDA devices)")
        # ProcessGroupNCCL guesses its device from the current CUDA device (barrier,
        # communicator setup): make it the CUDA device under the current flagos device.
        torch.cuda.set_device(cuda_index)
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        # Named and ranked like the NCCL groups torch makes itself, under a name of its own
        # (torch's registries and the flight recorder key on it).
        ranks = list(getattr(dist_opts, "global_ranks_in_group", None) or [])
        if ranks and hasattr(opts, "global_ranks_in_group"):
            opts.global_ranks_in_group = ranks
        if hasattr(opts, "group_name"):
            opts.group_name = f"{getattr(dist_opts, 'group_id', '') or ''}:flagos"
        inner = dist.ProcessGroupNCCL(PrefixStore("flagos/nccl/", store), rank, size, opts)
        checker = None
        if check:
            checker = dist.ProcessGroupGloo(PrefixStore("flagos/check/", store), rank, size,
                                            timeout)
    pg = ProcessGroupFlagOS(rank, size, inner, checker, delegate.name, delegate.path, check,
                            timeout, native_index)
    logger.info("ProcessGroupFlagOS rank %d/%d group %s: delegate %s, path %s, metadata check "
                "%s, timeout %s (%s)", rank, size, getattr(dist_opts, "group_id", "?"),
                delegate.name, delegate.path, "on" if check else "off", timeout,
                delegate.reason)
    return pg


def register() -> None:
    """Register the c10d backend ``flagos`` for the device ``flagos`` (idempotent)."""
    global _registered
    with _lock:
        if _registered:
            return
        import flagos  # noqa: F401  (the device must exist first)
        import torch.distributed as dist

        if "FLAGOS" not in dist.Backend._plugins:
            dist.Backend.register_backend("flagos", _create, extended_api=True,
                                          devices=["flagos"])
        _registered = True


def backend_of(group=None):
    """The ProcessGroupFlagOS serving flagos tensors in ``group`` (default: the world)."""
    import torch.distributed as dist

    group = group or dist.group.WORLD
    return group._get_backend(torch.device("flagos"))


register()

from flagos_distributed._C import ProcessGroupFlagOS
