"""The native provider's tests again, in a child, with the ops an installed FlagGems
serves routed as themselves (it registers them for every route when it loads): the
results still match the CPU and native still serves what it serves, whichever overload
arrives. On a GPU machine with FlagGems the other tests run this way anyway."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from conftest import AS_THEMSELVES

HERE = pathlib.Path(__file__).parent
# Ops of FlagGems' table that these tests use and that reach flagos through a composite
# kernel (the others are not registered: route_ops_as_themselves skips them).
GEMS_OPS = ["aten::" + op for op in (
    "neg", "exp", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu", "abs", "reciprocal",
    "log", "silu", "add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "maximum", "minimum",
    "embedding", "index_select", "sum.dim_IntList", "_softmax", "_log_softmax",
    "native_layer_norm", "mm", "sin_", "cos_", "abs_", "exp_", "log_")]


def test_native_tests_hold_with_ops_routed_as_themselves():
    env = dict(os.environ, **{AS_THEMSELVES: ",".join(GEMS_OPS)})
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(HERE / "test_native_ops.py"), str(HERE / "test_fused_ops.py"),
                        str(HERE / "test_fallthrough.py")],
                       env=env, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
