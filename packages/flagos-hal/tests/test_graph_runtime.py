"""The optional graph runtime (ABI 1.1): the sim HAL's plans, its compiler, and HALs built
without the extension or with formats no installed compiler writes."""

import json
import os
import pathlib
import subprocess
import sys

import flagos_hal
import numpy as np
import pytest
from flagos_hal import sim_plan
from flagos_hal.binding import Hal, HalError, Status
from flagos_hal.graph_compiler import CompileError, find
from hal_testutil import run_python

onnx = pytest.importorskip("onnx", reason="the sim graph compiler reads ONNX (flagos-hal[graph])")
from onnx import TensorProto, helper

WRAP_SOURCE = pathlib.Path(__file__).parent / "fake_graph" / "wrap_hal.c"
FMT = sim_plan.FORMAT


@pytest.fixture(scope="module")
def wrap_hal(tmp_path_factory) -> str:
    """The wrapping HAL of fake_graph/wrap_hal.c, built once."""
    lib = tmp_path_factory.mktemp("wrap") / "libflagos_hal_wrap.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", f"-I{flagos_hal.get_include()}", str(WRAP_SOURCE),
                    "-o", str(lib), "-ldl"], check=True)
    return str(lib)


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                           for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                              [helper.make_tensor(n, TensorProto.FLOAT, a.shape, a.ravel().tolist())
                               for n, a in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def _run(hal: Hal, artifact: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    g = hal.graph_load(0, FMT, artifact)
    n_in, n_out, ws = hal.graph_info(g)
    assert n_in == len(inputs)
    stream = hal.stream_create(0)
    ins = []
    for x in inputs:
        p = hal.malloc(0, x.nbytes)
        hal.write(p, np.ascontiguousarray(x, np.float32).tobytes())
        ins.append(p)
    infos = [hal.graph_tensor_info(g, True, i) for i in range(n_out)]
    outs = [hal.malloc(0, i.size_bytes) for i in infos]
    work = hal.malloc(0, ws) if ws else 0
    hal.graph_execute(g, ins, outs, work, stream)
    hal.stream_synchronize(stream)
    res = [np.frombuffer(hal.read(p, i.size_bytes), np.float32).reshape(i.shape) for p, i in zip(outs, infos)]
    for p in ins + outs + ([work] if work else []):
        hal.free(0, p)
    hal.graph_destroy(g)
    hal.stream_destroy(stream)
    return res


def test_sim_declares_the_graph_runtime(hal):
    assert hal.abi_version >> 16 == 1 and hal.abi_version & 0xFFFF >= 1 and hal.has_graph_runtime()
    assert hal.graph_formats() == [FMT]
    assert find("sim").formats == (FMT,)


def test_plan_ops_match_numpy(hal):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    y = rng.standard_normal((3, 1)).astype(np.float32)
    scale, bias = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    art = find("sim").compile(_model(
        [helper.make_node("Sub", ["x", "y"], ["d"]),                       # broadcasting
         helper.make_node("Transpose", ["d"], ["t"], perm=[2, 0, 1]),
         helper.make_node("Softmax", ["t"], ["s"], axis=1),
         helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["ln"], epsilon=1e-5),
         helper.make_node("Concat", ["x", "ln"], ["c"], axis=1),
         helper.make_node("ReduceMax", ["c"], ["m"], keepdims=0, axes=[2]),
         helper.make_node("MaxPool", ["img"], ["p"], kernel_shape=[2, 2], strides=[2, 2])],
        [("x", [2, 3, 4]), ("img", [1, 2, 4, 6])], ["s", "c", "m", "p"],
        [("y", y), ("scale", scale), ("bias", bias)]), FMT)
    img = rng.standard_normal((1, 2, 4, 6)).astype(np.float32)
    s, c, m, p = _run(hal, art, x, img)
    t = np.transpose(x - y, (2, 0, 1))
    want_s = np.exp(t - t.max(1, keepdims=True))
    want_s /= want_s.sum(1, keepdims=True)
    ln = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * scale + bias
    want_c = np.concatenate([x, ln], 1)
    np.testing.assert_allclose(s, want_s, atol=1e-6)
    np.testing.assert_allclose(c, want_c, atol=1e-5)
    np.testing.assert_allclose(m, want_c.max(2), atol=1e-6)
    np.testing.assert_allclose(p, img.reshape(1, 2, 2, 2, 3, 2).max((3, 5)), atol=0)


def _small_artifact() -> bytes:
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    return find("sim").compile(_model([helper.make_node("MatMul", ["x", "w"], ["o"])], [("x", [2, 3])], ["o"],
                                      [("w", w)]), FMT)


def test_every_truncation_and_bad_attribute_is_refused(hal):
    art = _small_artifact()
    for cut in range(0, len(art), 7):
        with pytest.raises(HalError) as e:
            hal.graph_load(0, FMT, art[:cut] if cut else b"\0")
        assert e.value.status == Status.INVALID_VALUE
    # The gemm's K made larger than its buffers: caught at load, before any kernel runs.
    plan_k = art.replace(np.array([1, 2, 2, 3], "<i8").tobytes(), np.array([1, 2, 2, 300], "<i8").tobytes())
    assert plan_k != art
    with pytest.raises(HalError, match="gemm sizes do not match"):
        hal.graph_load(0, FMT, plan_k)


def test_execute_checks_buffers_before_queueing(hal):
    g = hal.graph_load(0, FMT, _small_artifact())
    small, out = hal.malloc(0, 8), hal.malloc(0, 16)
    stream = hal.default_stream(0)
    with pytest.raises(HalError, match=r"input 0 \(x, 24 bytes.*not inside a live allocation"):
        hal.graph_execute(g, [small], [out], 0, stream)
    with pytest.raises(HalError, match="2 inputs given, the graph has 1"):
        hal.graph_execute(g, [out, out], [out], 0, stream)
    hal.graph_destroy(g)
    with pytest.raises(HalError, match="unknown or destroyed graph"):
        hal.graph_destroy(g)
    hal.free(0, small)
    hal.free(0, out)


def test_compiler_settings_and_errors(monkeypatch):
    monkeypatch.setenv("FLAGOS_SIM_GRAPH_UNSUPPORTED", "Relu")
    monkeypatch.setenv("FLAGOS_SIM_GRAPH_FAIL", "MatMul")
    c = find("sim")
    assert "FLAGOS_SIM_GRAPH_UNSUPPORTED" in c.op_support("Relu")
    assert "no kernel for ONNX op NonMaxSuppression" in c.op_support("NonMaxSuppression")
    assert c.op_support("Conv") is None and "Relu" in c.settings()
    model = _model([helper.make_node("MatMul", ["x", "x"], ["o"])], [("x", [2, 2])], ["o"])
    with pytest.raises(CompileError, match="injected compiler failure"):
        c.compile(model, FMT)
    with pytest.raises(CompileError, match="writes flagos-sim-plan-v1, not 'acme-npu-v9'"):
        c.compile(model, "acme-npu-v9")
    with pytest.raises(CompileError, match="not a valid ONNX model"):
        c.compile(b"garbage", FMT)


def test_abi_1_0_hal_still_loads_without_graph_runtime(wrap_hal, sim_path):
    env = {"FLAGOS_WRAP_HAL": sim_path, "FLAGOS_WRAP_MODE": "abi10"}
    r = run_python(f"""
import flagos_hal
h = flagos_hal.load({wrap_hal!r})
print(hex(h.abi_version), h.has("event_elapsed_time"), h.has_graph_runtime(), h.graph_formats())
p = h.malloc(0, 64); h.write(p, b"x" * 64); assert h.read(p, 64) == b"x" * 64; h.free(0, p)
""", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0x10000", "True", "False", "[]"]
    out = subprocess.run([sys.executable, "-m", "flagos_hal.conformance", "--hal", wrap_hal, "--json",
                          "-k", "graph"], capture_output=True, text=True, env={**os.environ, **env}, check=False)
    results = {x["check"]: x for x in json.loads(out.stdout)["results"]}
    assert {x["result"] for x in results.values()} == {"SKIP"}, out.stdout
    assert "no graph runtime" in results["graph_execute"]["detail"]


def test_unknown_format_is_not_supported(wrap_hal, sim_path):
    r = run_python(f"""
import flagos_hal
h = flagos_hal.load({wrap_hal!r})
print(h.graph_formats())
try:
    h.graph_load(0, "flagos-sim-plan-v1", b"FSIMPLN1" + bytes(64))
except flagos_hal.HalError as e:
    print(e.status.name)
""", env={"FLAGOS_WRAP_HAL": sim_path, "FLAGOS_WRAP_MODE": "format"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["['acme-npu-v9']", "NOT_SUPPORTED"]
