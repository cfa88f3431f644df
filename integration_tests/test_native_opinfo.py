"""The OpInfo sweep with `native` first, on opaque memory (FLAGOS_NO_TWIN=1), for
the OpInfos whose ops the sim kernel library (simk) serves: forward, backward, out= and
in-place match the CPU, and every routed call of an op simk serves ran on native (not on
the CPU fallback, which serves only the ops simk lacks: fills, copies, pow, ...)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

native = pytest.importorskip("flagos_ops_native")

HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE_OPINFOS = [
    "neg", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "abs",
    "reciprocal", "nn.functional.relu", "nn.functional.silu", "add", "sub", "mul", "div",
    "maximum", "minimum", "sum", "mean", "mm", "bmm", "addmm", "nn.functional.linear",
    "softmax", "log_softmax", "nn.functional.layer_norm", "index_select",
    "nn.functional.embedding", "nn.functional.rms_norm",
    "nn.functional.scaled_dot_product_attention",
]

# Variants that compute in float64 (dtype=torch.float64), a dtype simk does not serve:
# native declines every call, the fallback serves them.
COMPUTED_IN_FLOAT64 = {"softmax.with_dtype", "log_softmax.with_dtype"}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_opinfo_sweep_native_first(tmp_path, dtype):
    from flagos_ops_native.manifest import parse

    served = {o for e in parse(native.manifest_dir() / "simk.toml").ops for o in e.overloads}
    out = tmp_path / "sweep.json"
    env = dict(os.environ, FLAGOS_NO_TWIN="1", FLAGOS_HAL="sim")
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "opinfo_sweep.py"), "--route", "native",
         "--ops", ",".join(NATIVE_OPINFOS), "--max-samples", "2", "--jobs", "2",
         "--dtype", dtype, "--json", str(out)],
        env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0 and out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    failed = [(r["op"], r.get("error")) for r in results if r["status"] == "fail"]
    assert not failed, failed
    ran = [r for r in results if r["status"] == "pass"]
    assert len(ran) >= len(NATIVE_OPINFOS), [r["op"] for r in results if r["status"] != "pass"]
    for r in ran:
        by_op = r["by_op"]
        if r["op"] in COMPUTED_IN_FLOAT64:
            assert not any(p.get("native") for p in by_op.values()), (r["op"], by_op)
            continue
        assert any(p.get("native") for p in by_op.values()), (r["op"], by_op)
        on_cpu = {op: p for op, p in by_op.items() if op in served and p.get("cpu")}
        assert not on_cpu, (r["op"], on_cpu)
