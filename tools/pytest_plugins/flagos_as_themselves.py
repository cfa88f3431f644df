"""A pytest plugin that routes ops as themselves, as an installed FlagGems has them.

Once FlagGems loads, flagos-ops-gems registers every op it serves to reach flagos as itself
(``flagos.provider_api.route_ops_as_themselves``), for every route and for the rest of the
process: then ``sin`` arrives as ``aten::sin`` rather than ``aten::sin.out``, ``embedding``
whole, ``copy_`` and ``_to_copy`` down their routes. On a GPU machine every test process
that loads FlagGems runs that way; with ``-p flagos_as_themselves`` (this folder on
PYTHONPATH) tests on sim do too, before their first test. ``FLAGOS_TEST_ROUTE_AS_THEMSELVES``
names the ops (comma-separated); unset, the ops of :data:`FLAG_GEMS_OPS`.
"""

from __future__ import annotations

import os

ENV = "FLAGOS_TEST_ROUTE_AS_THEMSELVES"

# Ops of FlagGems' table (flag-gems 5.0) that reach flagos through a composite kernel, and
# so change how they arrive once FlagGems loads (the others are skipped by the call).
FLAG_GEMS_OPS = ["aten::" + op for op in (
    "neg", "exp", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu", "abs", "reciprocal",
    "log", "silu", "gelu", "add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "maximum",
    "minimum", "embedding", "index_select", "sum.dim_IntList", "mean.dim", "_softmax",
    "_log_softmax", "native_layer_norm", "mm", "addmm", "bmm", "sin_", "cos_", "abs_", "exp_",
    "log_", "add_.Tensor", "mul_.Tensor", "_to_copy", "copy_", "zeros_like", "ones_like",
    "full_like", "fill_.Scalar", "where.self", "masked_fill.Scalar", "cat", "clamp",
    "pow.Tensor_Scalar", "argmax", "max.dim", "topk")]


def ops() -> list[str]:
    """The ops this plugin routes as themselves."""
    return os.environ[ENV].split(",") if os.environ.get(ENV) else FLAG_GEMS_OPS


def pytest_sessionstart(session: object) -> None:
    from flagos.provider_api import route_ops_as_themselves

    route_ops_as_themselves(ops())
