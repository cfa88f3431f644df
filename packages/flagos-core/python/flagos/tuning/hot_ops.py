"""The built-in workload: representative shapes of the hot ops of transformer training
(matmuls, elementwise math, activations, softmax, norms, reductions, embedding lookup), in float32
and bfloat16, for tuning without a recorded model.

Sizes: ``small`` (seconds on a CPU, for checks), ``default`` (a device's realistic sizes:
a 1024-wide layer over 4096 tokens).
"""

from __future__ import annotations

from .workload import OpCall, Workload

__all__ = ["SIZES", "hot_ops"]

# (tokens, width, hidden, vocab) per size
SIZES: dict[str, tuple[int, int, int, int]] = {
    "small": (64, 128, 256, 512),
    "default": (4096, 1024, 4096, 32000),
}


def _t(shape: list[int], dtype: str, values: list[int] | None = None) -> dict:
    stride, s = [], 1
    for n in reversed(shape):
        stride.insert(0, s)
        s *= max(n, 1)
    t: dict = {"shape": shape, "stride": stride, "offset": 0, "dtype": dtype}
    if values is not None:
        t["values"] = values
    return {"tensor": t}


def hot_ops(size: str = "default", dtypes: tuple[str, ...] = ("float32", "bfloat16")) -> Workload:
    """The built-in workload at ``size`` (a key of :data:`SIZES`)."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; sizes: {', '.join(SIZES)}")
    m, d, h, v = SIZES[size]
    w = Workload(f"hot-ops-{size}")
    for dt in dtypes:
        x, wt = _t([m, d], dt), _t([d, h], dt)
        w.calls += [
            OpCall("aten::mm", [x, wt], {}),
            OpCall("aten::addmm", [_t([h], dt), x, wt], {}),
            OpCall("aten::bmm", [_t([8, m // 8, d], dt), _t([8, d, m // 8], dt)], {}),
            OpCall("aten::add.Tensor", [_t([m, h], dt), _t([m, h], dt)], {}),
            OpCall("aten::mul.Tensor", [_t([m, h], dt), _t([m, h], dt)], {}),
            OpCall("aten::silu", [_t([m, h], dt)], {}),
            OpCall("aten::gelu", [_t([m, h], dt)], {}),
            OpCall("aten::rsqrt", [_t([m, h], dt)], {}),
            OpCall("aten::_softmax", [_t([m, d], dt), -1, False], {}),
            OpCall("aten::native_layer_norm", [x, [d], _t([d], dt), _t([d], dt), 1e-5], {}),
            OpCall("aten::sum.dim_IntList", [_t([m, h], dt), [-1]], {}),
            OpCall("aten::mean.dim", [_t([m, h], dt), [-1], True], {}),
            # embedding runs as index_select on flagos (its composite kernel)
            OpCall("aten::index_select",
                   [_t([v, d], dt), 0, _t([m], "int64", [(i * 7919) % v for i in range(m)])], {}),
        ]
    return w
