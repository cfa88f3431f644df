"""Interpreter exit with autograd's flagos device threads idle.

torch's autograd engine runs the backward of flagos ops on one C++ thread per flagos
device (``pt_autograd_N``). Each backward pass keeps a snapshot of the caller's
thread-local state, and since torch 2.12 that snapshot holds a Python object (the
``contextvars`` context that ``torch.autograd`` stashes for device threads; an active
``TorchFunctionMode`` is another). After the last node of a pass the device thread wakes
the caller and only then drops its reference to the pass. When the caller has dropped
its own first, the device thread's drop is the last: it frees the Python object, taking
the GIL. If the program has ended in the meantime and the interpreter is finalizing,
CPython ends a thread that takes the GIL with ``pthread_exit``, whose unwinding through
torch's ``noexcept`` thread function calls ``std::terminate``: the process aborts with
"terminate called without an active exception" after its last line ran (torch issue
38228 describes the mechanism). A program whose last statement is a backward pass on
flagos does so in about 4 of 10 runs on one core.

At exit, before finalization starts, one tiny backward pass per flagos device goes
through each device thread: it runs only after the thread has released what it held,
while the interpreter can still take it. That pass holds no Python object itself (it is
started below ``torch.autograd``'s Python wrapper, with no Python modes on the stack,
and its tensors stay referenced until finalization), so its own release is harmless
whenever it happens.
"""

from __future__ import annotations

import atexit
import contextlib
import os

import torch
from torch.autograd import Variable

__all__ = ["install"]

_installed = False


def _device_threads_started() -> bool:
    """Whether autograd's device threads exist (they start with the first backward pass
    that needs them); True where that cannot be told (no /proc)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return True
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().startswith("pt_autograd"):
                    return True
        except OSError:
            continue
    return False


@contextlib.contextmanager
def _no_python_modes():
    """Torch-function and dispatch modes off the stack, so that a backward pass started
    here captures no Python object in its thread-local state."""
    from torch.utils._python_dispatch import _disable_current_modes

    popped = []
    try:
        while torch._C._len_torch_function_stack() > 0:
            popped.append(torch._C._pop_torch_function_stack())
        with _disable_current_modes():
            yield
    finally:
        for mode in reversed(popped):
            torch._C._push_on_torch_function_stack(mode)


# The drain's tensors, referenced until finalization: a device thread that drops the last
# reference to a tensor with a live Python object would free that object.
_kept: list[torch.Tensor] = []


def _drain(index: int) -> None:
    """One backward pass through flagos device ``index``'s autograd thread."""
    try:
        leaf = torch.ones((), device=torch.device("flagos", index), requires_grad=True)
        out = leaf * 1
        grad = torch.ones_like(out)
        _kept.extend((leaf, out, grad))
        # the engine itself: torch.autograd.backward would stash a Python object in the
        # pass's thread-local state
        Variable._execution_engine.run_backward(
            (out,), (grad,), False, False, (), allow_unreachable=True, accumulate_grad=True)
    except Exception:  # noqa: BLE001, S110 - a lost device has nothing to drain
        pass


def _drain_device_threads() -> None:
    from flagos import api

    try:
        if not api.is_initialized() or not _device_threads_started():
            return
        devices = range(api.device_count())
    except Exception:  # noqa: BLE001 - exit must go on
        return
    try:
        with _no_python_modes(), torch.enable_grad():
            for index in devices:
                _drain(index)
    except Exception:  # noqa: BLE001, S110 - exit must go on (a torch without these internals)
        pass


def install() -> None:
    """Register the exit-time drain once per process."""
    global _installed
    if not _installed:
        atexit.register(_drain_device_threads)
        _installed = True
