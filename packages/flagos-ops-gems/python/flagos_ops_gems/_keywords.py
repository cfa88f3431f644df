"""Kernels whose keyword parameters are named otherwise than the ATen schema's.

The engine calls a kernel as torch would call one registered with ``torch.library``: a
kwarg-only schema argument that is not at its default is passed by its schema name. A
library kernel that names it differently (FlagGems 5.0's ``multinomial(..., *, gen=None)``
for the schema's ``generator``) fails whenever the argument is given, and on flagos a
random op always gets one: the twin generator that carries flagos' seed. The library
declares such renames (:attr:`~flagos_ops_gems.KernelLibrary.keyword_aliases`); a kernel
that lacks the schema's name but has the alias is called with the argument renamed.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping

from ._schemas import op_schema

__all__ = ["adapt_keywords"]


def _schema_kwarg_names(op: str) -> list[str]:
    schema = op_schema(op)
    return [a.name for a in schema.arguments if a.kwarg_only] if schema else []


def _renames(op: str, kernel: Callable[..., object], aliases: Mapping[str, str]) -> dict:
    try:
        params = inspect.signature(kernel).parameters
    except (TypeError, ValueError):  # a builtin without a signature: called as it is
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return {}
    return {n: aliases[n] for n in _schema_kwarg_names(op)
            if n not in params and aliases.get(n) in params}


def adapt_keywords(op: str, kernel: Callable[..., object],
                   aliases: Mapping[str, str]) -> Callable[..., object]:
    """``kernel`` itself, or a wrapper passing the schema's keywords under the kernel's own
    names where ``aliases`` says how it names them."""
    renames = _renames(op, kernel, aliases) if aliases else {}
    if not renames:
        return kernel

    @functools.wraps(kernel)
    def renamed(*args, **kwargs):
        for schema_name, own_name in renames.items():
            if schema_name in kwargs:
                kwargs[own_name] = kwargs.pop(schema_name)
        return kernel(*args, **kwargs)

    return renamed
