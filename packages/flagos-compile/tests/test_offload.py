"""Whole-graph offload (flagos_compile.offload) on the sim HAL's graph runtime: a robot
policy net, unchanged, eager through CPU fallback and compiled, against the CPU."""

from __future__ import annotations

import copy
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch
from flagos_compile.models import RobotPolicy

pytest.importorskip("onnxscript", reason="the offload backend exports with torch.onnx (flagos-compile[offload])")
from flagos_compile.offload import OffloadBackend, OffloadError, unavailable_reason

HERE = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def graph_runtime() -> None:
    """Skip unless flagos:0 can take compiled graphs (the sim HAL's graph runtime and its
    compiler); elsewhere the backend runs every graph eagerly, which the eager test covers."""
    import flagos  # noqa: F401 - loads the HALs

    why = unavailable_reason(0)
    if why:
        pytest.skip(f"no graph offload on flagos:0: {why}")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> pathlib.Path:
    """One artifact cache for the module: a region compiled once is reused by later tests."""
    return tmp_path_factory.mktemp("offload_cache")


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    model = RobotPolicy().eval()
    image, state = torch.randn(2, 3, 32, 32), torch.randn(2, 8)
    with torch.no_grad():
        want = model(image, state)
    return model, (image, state), want


def _on_flagos(policy):
    model, inputs, want = policy
    return copy.deepcopy(model).to("flagos"), [x.to("flagos") for x in inputs], want


def _run_compiled(policy, backend):
    model, inputs, want = _on_flagos(policy)
    with torch.no_grad():
        got = torch.compile(model, backend=backend)(*inputs)
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    assert len(backend.reports) == 1
    return backend.reports[0]


def test_eager_through_cpu_fallback_matches_cpu(policy):
    model, inputs, want = _on_flagos(policy)
    with torch.no_grad():
        got = model(*inputs)
    assert got.device.type == "flagos"
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)


def test_all_ops_supported_is_one_region(graph_runtime, policy, cache_dir):
    backend = OffloadBackend(cache_dir=cache_dir)
    report = _run_compiled(policy, backend)
    assert [r.offloaded for r in report.regions] == [True], backend.explain()
    assert not report.eager_nodes and not report.whole_graph_reason
    region = report.regions[0]
    assert region.format == "flagos-sim-plan-v1" and region.cache == "miss"
    assert {"Conv", "MaxPool", "LayerNormalization", "Gemm", "Tanh"} <= set(region.onnx_ops)
    text = backend.explain()
    assert "fused_0: offloaded" in text and "HAL sim" in text and "flagos-sim-compiler" in text


def test_second_compile_hits_the_disk_cache(graph_runtime, policy, cache_dir):
    for _ in range(2):  # the first may hit already (an earlier test compiled the same graph)
        torch._dynamo.reset()
        backend = OffloadBackend(cache_dir=cache_dir)
        report = _run_compiled(policy, backend)
    assert report.regions[0].cache == "hit" and report.regions[0].offloaded
    # Other weights are another key: a miss, and still the right answer.
    model, inputs, _ = policy
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.head[2].bias.add_(1.0)
        want = other(*inputs)
    torch._dynamo.reset()
    backend = OffloadBackend(cache_dir=cache_dir)
    with torch.no_grad():
        got = torch.compile(other.to("flagos"), backend=backend)(*[x.to("flagos") for x in inputs])
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    assert backend.reports[0].regions[0].cache == "miss"


def test_one_unsupported_op_makes_regions_and_an_eager_segment(graph_runtime, policy, cache_dir, monkeypatch):
    monkeypatch.setenv("FLAGOS_SIM_GRAPH_UNSUPPORTED", "LayerNormalization")
    backend = OffloadBackend(cache_dir=cache_dir)
    report = _run_compiled(policy, backend)
    assert [r.offloaded for r in report.regions] == [True, True], backend.explain()
    eager = dict(report.eager_nodes)
    assert "native_layer_norm" in eager and "FLAGOS_SIM_GRAPH_UNSUPPORTED" in eager["native_layer_norm"]
    ops = [r.ops for r in report.regions]
    assert any("aten.convolution.default" in o for o in ops) and any("aten.tanh.default" in o for o in ops)
    assert "eager node native_layer_norm" in backend.explain()


def test_min_block_size_keeps_small_regions_eager(graph_runtime, policy, monkeypatch):
    monkeypatch.setenv("FLAGOS_SIM_GRAPH_UNSUPPORTED", "Relu")
    backend = OffloadBackend(cache_dir=False, min_block_size=100)
    report = _run_compiled(policy, backend)
    assert not report.regions and any("below min_block_size=100" in why for _, why in report.eager_nodes)


def test_failing_compile_runs_eagerly_and_raises_when_strict(graph_runtime, policy, monkeypatch):
    monkeypatch.setenv("FLAGOS_SIM_GRAPH_FAIL", "Conv")
    backend = OffloadBackend(cache_dir=False)
    report = _run_compiled(policy, backend)
    assert [r.offloaded for r in report.regions] == [False]
    assert "injected compiler failure" in report.regions[0].reason
    assert "fused_0: eager" in backend.explain()
    torch._dynamo.reset()
    model, inputs, _ = _on_flagos(policy)
    with pytest.raises(Exception, match="strict.*injected compiler failure") as e, torch.no_grad():
        torch.compile(model, backend=OffloadBackend(cache_dir=False, strict=True))(*inputs)
    assert isinstance(e.value, OffloadError) or "OffloadError" in str(e.value)


def test_gradients_enabled_stay_eager(graph_runtime, policy):
    model, inputs, _ = _on_flagos(policy)
    backend = OffloadBackend(cache_dir=False)
    out = torch.compile(model, backend=backend)(*inputs)
    assert out.requires_grad and "offload is for inference" in backend.explain()


def test_a_new_input_shape_recompiles_and_a_wrong_one_is_refused(graph_runtime, policy, cache_dir):
    import flagos
    backend = OffloadBackend(cache_dir=cache_dir)
    model, inputs, _ = _on_flagos(policy)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    image = torch.randn(3, 3, 32, 32)
    state = torch.randn(3, 8)
    with torch.no_grad():
        compiled(*inputs)
        got = compiled(image.to("flagos"), state.to("flagos"))
        want = policy[0](image, state)
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    assert len(backend.reports) == 2 and all(r.regions[0].offloaded for r in backend.reports)
    # The runtime itself refuses a tensor of another shape than the artifact's, by name.
    meta = next(p for p in cache_dir.glob("*.json"))
    graph = flagos.provider_api.Graph(0, json.loads(meta.read_text())["format"], meta.with_suffix(".bin").read_bytes())
    spec = graph.inputs[0]
    wrong = torch.zeros([d + 1 for d in spec["shape"]], device="flagos")
    rest = [torch.zeros(s["shape"], device="flagos") for s in graph.inputs[1:]]
    outs = [torch.empty(s["shape"], device="flagos") for s in graph.outputs]
    ws = torch.empty(graph.workspace_size, dtype=torch.uint8, device="flagos")
    with pytest.raises(ValueError, match=r"input 0 \(input_0\) has shape .* the compiled graph expects"):
        graph.execute([wrong, *rest], outs, ws)
    with pytest.raises(ValueError, match="is on cpu"):
        graph.execute([wrong.cpu(), *rest], outs, ws)


def test_weights_changed_after_compile_are_refused(graph_runtime, policy, cache_dir):
    model, inputs, _ = _on_flagos(policy)
    compiled = torch.compile(model, backend=OffloadBackend(cache_dir=cache_dir))
    with torch.no_grad():
        compiled(*inputs)
        model.fuse.weight.mul_(2.0)
        with pytest.raises(RuntimeError, match="changed after it was compiled"):
            compiled(*inputs)


def test_policy_on_opaque_memory(graph_runtime, cache_dir):
    """FLAGOS_NO_TWIN=1 (read when flagos loads): a process of its own."""
    env = dict(os.environ, FLAGOS_NO_TWIN="1", FLAGOS_OFFLOAD_CACHE=str(cache_dir))
    proc = subprocess.run([sys.executable, str(HERE / "offload_opaque_run.py")], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OPAQUE-OK one region, split into 2 + eager" in proc.stdout, proc.stdout
