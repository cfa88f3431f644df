"""A fast subset of the OpInfo sweep (integration_tests/opinfo_sweep.py): 116
representative OpInfo names, 143 entries with their variants (elementwise, reductions,
linear algebra, indexing, views, tensor lists, several outputs, nn layers, random ops,
factories, complex results, sparse refusal), two samples each, forward, backward, out= and
in-place, on every route: the CPU fallback and the zero-copy twin engine (through the
boxing provider when it is installed).

Each OpInfo must pass or be skipped by the sweep's own rules (no sample runs on the CPU for
float32, or a sparse result refused with a clear error). No xfails."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest")

import flagos
import opinfo_sweep
from torch.testing._internal.common_methods_invocations import op_db

NAMES = {
    # elementwise and comparisons
    "add", "sub", "mul", "div", "pow", "exp", "log", "sin", "tanh", "sigmoid", "abs", "neg",
    "clamp", "where", "masked_fill", "lerp", "erf", "floor", "fmod", "remainder", "eq", "lt",
    "isnan", "logical_not", "nan_to_num", "polar",
    # reductions, several outputs
    "sum", "mean", "amax", "argmax", "max", "std", "var", "cumsum", "prod", "any", "mode",
    "sort", "topk", "unique", "linalg.vector_norm", "logsumexp",
    # linear algebra
    "mm", "bmm", "matmul", "addmm", "baddbmm", "einsum", "linalg.solve", "linalg.svd",
    "linalg.matrix_power", "linalg.eigvals", "cross", "kron", "cdist",
    # tensor lists, views, shapes, indexing
    "cat", "stack", "split", "chunk", "tensor_split", "unbind", "reshape", "permute",
    "transpose", "expand", "squeeze", "flip", "roll", "narrow", "repeat", "as_strided",
    "unfold", "diagonal", "tril", "gather", "scatter", "scatter_add", "index_select",
    "index_put", "index_add", "take", "nonzero", "masked_select", "searchsorted", "histc",
    # nn
    "softmax", "log_softmax", "nn.functional.layer_norm",
    "nn.functional.group_norm", "nn.functional.embedding", "nn.functional.linear",
    "nn.functional.conv2d", "nn.functional.conv_transpose1d", "nn.functional.max_pool2d",
    "nn.functional.avg_pool2d", "nn.functional.gelu", "nn.functional.silu",
    "nn.functional.cross_entropy", "nn.functional.mse_loss", "nn.functional.pad",
    "nn.functional.interpolate", "nn.functional.scaled_dot_product_attention",
    "nn.functional.dropout",
    # random, factories, conversions, complex, sparse
    "bernoulli", "normal", "rand_like", "arange", "linspace", "full", "zeros_like",
    "new_zeros", "to", "clone", "fft.fft", "fft.ihfft", "to_sparse",
}
OPS = [op for op in op_db if op.name in NAMES]


def _routes() -> list[str]:
    opinfo_sweep._setup_route("twin")  # the core's twin engine under the name "twin"
    return ["cpu", "boxing" if "boxing" in flagos.routing.providers() else "twin"]


ROUTES = _routes()


def test_subset_is_representative():
    assert len(NAMES) >= 60
    missing = NAMES - {op.name for op in op_db}
    assert not missing, f"not in this torch's op_db: {sorted(missing)}"
    assert 80 <= len(OPS) <= 160


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("op", OPS, ids=opinfo_sweep.op_key)
def test_opinfo(op, route):
    r = opinfo_sweep.run_op(op, route, torch.float32, max_samples=2)
    if r["status"] == "skip":
        pytest.skip(r["reason"])
    assert r["status"] == "pass", r.get("error")
    # The route was really taken: the forced provider served the routed calls (boxing
    # leaves ops without a twin kernel, e.g. mode.values, to cpu).
    served = r.get("providers", {})
    allowed = {route} if route == "cpu" else {route, "cpu"}
    assert set(served) <= allowed, served


def test_layout_variants_expose_a_kernel_that_assumes_contiguous_input():
    # A kernel library whose softmax reads its input as contiguous: right on OpInfo's own
    # samples, wrong on the same samples laid out with gaps (what FlagGems' slice_backward
    # and upsample_nearest2d did to models on the H200).
    gems = pytest.importorskip("flagos_ops_gems")

    def softmax(x, dim, half_to_float):
        dense = x.as_strided(x.shape, torch.empty(x.shape).stride())
        return torch._softmax(dense, dim, half_to_float)

    class ContiguousOnly(gems.KernelLibrary):
        name = "contiguous-only"

        def load(self):
            return {"aten::_softmax": softmax}, frozenset({"cpu", "cuda"})

    flagos.routing.register_provider(gems.register_library("contig", ContiguousOnly()))
    op = next(op for op in op_db if op.name == "softmax" and not op.variant_test_name)
    plain = opinfo_sweep.run_op(op, "contig,boxing", torch.float32, max_samples=2)
    assert plain["status"] == "pass", plain.get("error")
    assert plain["by_op"]["aten::_softmax"]["contig"] >= 1
    relaid = opinfo_sweep.run_op(op, "contig,boxing", torch.float32, max_samples=2,
                                 layouts=("noncontiguous",))
    assert relaid["status"] == "fail" and relaid["samples"] > plain["samples"], relaid
