"""Kernels that draw from their device's default generator, made to draw from the one they
are given.

FlagGems 5.0's ``multinomial`` samples without replacement (and any single sample) by
``torch.empty_like(prob).exponential_()``, which draws from the CUDA device's default
generator whatever ``gen`` it is given. On flagos a random op always gets a generator,
the twin generator of the flagos one: for flagos' default generator that is the twin
device's default generator itself (so such a kernel is right there), for a
``torch.Generator("flagos")`` of the user's another one, which the kernel would ignore.
For such a kernel the given generator's state is put into the device's default generator
for the call (the kernel then gets ``gen=None``, so every draw it makes comes from there, on each
of its paths), the default generator's new state is copied back into the given one, and
the default generator gets its own state back. A thread drawing from that default
generator at the same moment would see the swapped state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

__all__ = ["draws_from_given_generator"]


def _default_generator(device: torch.device) -> torch.Generator:
    if device.type == "cpu":
        return torch.default_generator
    module = torch.get_device_module(device.type)
    index = device.index if device.index is not None else module.current_device()
    return module.default_generators[index]


def draws_from_given_generator(kernel: Callable[..., object],
                               keyword: str = "gen") -> Callable[..., object]:
    """``kernel`` (whose first argument is a tensor on the device it draws on, and whose
    generator parameter is ``keyword``) drawing from the generator it is given."""

    @functools.wraps(kernel)
    def call(*args, **kwargs):
        gen = kwargs.get(keyword)
        if gen is None:
            return kernel(*args, **kwargs)
        default = _default_generator(args[0].device)
        if gen is default:
            return kernel(*args, **kwargs)
        own = default.get_state()
        default.set_state(gen.get_state())
        try:
            out = kernel(*args, **{**kwargs, keyword: None})
            gen.set_state(default.get_state())
        finally:
            default.set_state(own)
        return out

    return call
