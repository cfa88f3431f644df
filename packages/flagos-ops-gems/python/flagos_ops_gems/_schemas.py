"""The schema of an op named as routes name it (``"aten::add.Tensor"``, ``"aten::abs"``)."""

from __future__ import annotations

import torch

__all__ = ["op_schema"]


def op_schema(op: str) -> torch._C.FunctionSchema | None:
    """``op``'s schema, or None for a name this torch does not know."""
    name, _, overload = op.partition(".")
    try:
        return torch._C._get_schema(name, overload)
    except RuntimeError:
        return None
