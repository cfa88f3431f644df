"""Kernels that draw from their device's default generator, made to draw from the one they
are given.

FlagGems 5.0's ``multinomial`` samples without replacement (and any single sample) by
``torch.empty_like(prob).exponential_()``, which draws from the CUDA device's default
generator whatever ``gen`` it is given. On flagos a random op always gets a generator,
the twin generator of the flagos one: for flagos' default generator that is the twin
device's default generator itself (so such a kernel is right there), for a
``torch.Generator("flagos")`` of the user's another one, which the kernel would ignore.
For such a kernel the given generator's state is lent to the device's default generator
for the call (the kernel then gets ``gen=None``, so every draw it makes comes from there,
on each of its paths) and takes the advanced state back after: the core's
``flagos.provider_api.DefaultGeneratorLent``, which lends the flagos generator to the kernels of
ops without a generator argument the same way (serialized process-wide).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from flagos.provider_api import DefaultGeneratorLent

__all__ = ["draws_from_given_generator"]


def draws_from_given_generator(kernel: Callable[..., object],
                               keyword: str = "gen") -> Callable[..., object]:
    """``kernel`` (whose first argument is a tensor on the device it draws on, and whose
    generator parameter is ``keyword``) drawing from the generator it is given."""

    @functools.wraps(kernel)
    def call(*args, **kwargs):
        gen = kwargs.get(keyword)
        if gen is None:
            return kernel(*args, **kwargs)
        device = args[0].device
        index = -1 if device.index is None else device.index
        with DefaultGeneratorLent(gen, device.type, index):
            return kernel(*args, **{**kwargs, keyword: None})

    return call
