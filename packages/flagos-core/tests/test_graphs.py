"""Graph capture and replay (torch.flagos.Graph / graph / make_graphed_callables, and
torch.accelerator.Graph): replays give eager results, new inputs copied in give new
results, random ops draw fresh numbers per replay, a freed graph's memory goes back, and
work that cannot be recorded on a stream fails the capture with the op and provider."""

from __future__ import annotations

import copy
import gc
import weakref

import flagos.routing
import pytest
import torch

F = torch.flagos


@pytest.fixture(autouse=True)
def _no_capture_outlives_its_test(monkeypatch):
    """A test that fails between capture_begin and capture_end leaves its stream capturing
    (its traceback holds the graph), and every later test would fail on that stream: the
    graphs a test began are reset after it, which ends a capture still under way."""
    begun: list[weakref.ref] = []
    capture_begin = F.Graph.capture_begin

    def tracked(self, *args, **kwargs):
        capture_begin(self, *args, **kwargs)
        begun.append(weakref.ref(self))

    monkeypatch.setattr(F.Graph, "capture_begin", tracked)
    yield
    for ref in begun:
        g = ref()
        if g is not None:
            g.reset()


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def test_forward_replays_eager_results_and_follows_new_inputs(device0):
    model = _mlp()
    dev = copy.deepcopy(model).to("flagos")
    x = torch.randn(8, 16)
    static_x = x.to("flagos")
    with torch.no_grad():
        dev(static_x)  # warm-up outside the capture
        g = F.Graph()
        with F.graph(g):
            static_y = dev(static_x)
        g.replay()
        torch.testing.assert_close(static_y.cpu(), model(x))
        x2 = torch.randn(8, 16)
        static_x.copy_(x2.to("flagos"))
        g.replay()
        torch.testing.assert_close(static_y.cpu(), model(x2))


def _train_step(model, opt, x, target):
    loss = ((model(x) - target) ** 2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
    return loss


def test_training_step_replays_match_cpu_steps(device0):
    cpu_model = _mlp()
    model = copy.deepcopy(cpu_model).to("flagos")
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.05, momentum=0.9)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, target = torch.randn(8, 16), torch.randn(8, 4)
    static_x, static_t = x.to("flagos"), target.to("flagos")
    with F.stream(F.Stream()):  # warm-up on a side stream, as torch.cuda documents
        for _ in range(2):
            _train_step(model, opt, static_x, static_t)
            _train_step(cpu_model, cpu_opt, x, target)
    F.synchronize()
    g = F.Graph()
    with F.graph(g):
        static_loss = _train_step(model, opt, static_x, static_t)
    for _ in range(3):
        g.replay()
        expected = _train_step(cpu_model, cpu_opt, x, target)
        torch.testing.assert_close(static_loss.cpu(), expected.detach())
    for p, q in zip(model.parameters(), cpu_model.parameters(), strict=True):
        torch.testing.assert_close(p.detach().cpu(), q.detach())


def test_dropout_differs_between_replays_and_follows_the_seed(device0, sim_only):
    x = torch.ones(4096, device="flagos")
    g = F.Graph()
    with F.graph(g):
        y = torch.nn.functional.dropout(x, 0.5)
    torch.manual_seed(7)
    g.replay()
    first = y.cpu()
    g.replay()
    second = y.cpu()
    assert not torch.equal(first, second)
    assert set(first.unique().tolist()) <= {0.0, 2.0}
    torch.manual_seed(7)
    g.replay()
    torch.testing.assert_close(y.cpu(), first)


def test_a_freed_graph_gives_its_memory_back(device0):
    x = torch.ones(1 << 16, device="flagos")
    F.synchronize()
    F.empty_cache()
    reserved, allocated = F.memory_reserved(), F.memory_allocated()
    g = F.Graph()
    with F.graph(g):
        y = (x * 2).sum()
    assert F.memory_reserved() > reserved
    g.replay()
    assert y.item() == 2 * (1 << 16)
    del y
    g.reset()
    del g
    gc.collect()
    F.synchronize()
    F.empty_cache()
    assert F.memory_allocated() == allocated
    assert F.memory_reserved() == reserved


def test_graphs_share_a_pool(device0):
    x = torch.ones(64, device="flagos")
    pool = F.graph_pool_handle()
    g1, g2 = F.Graph(), F.Graph()
    with F.graph(g1, pool=pool):
        a = x + 1
    with F.graph(g2, pool=g1.pool()):
        b = a * 3
    assert g1.pool() == g2.pool() == pool
    g1.replay()
    g2.replay()
    torch.testing.assert_close(b.cpu(), torch.full((64,), 6.0))


def test_two_streams_capture_into_one_pool_at_once(device0):
    # One capture ending must not end the other's use of the shared pool: what the other
    # allocates afterwards still comes from the pool, never from memory eager work frees.
    x = torch.ones(1024, device="flagos")
    s1, s2 = F.Stream(), F.Stream()
    with F.stream(s2):
        freed = torch.empty(1024, device="flagos")  # cached on s2 once freed
        freed_ptr = freed.data_ptr()
        del freed
    pool = F.graph_pool_handle()
    g1, g2 = F.Graph(), F.Graph()
    with F.stream(s1):
        g1.capture_begin(pool=pool)
    with F.stream(s2):
        g2.capture_begin(pool=pool)
    with F.stream(s1):
        a = x + 1
        g1.capture_end()
    with F.stream(s2):
        b = x * 3
        g2.capture_end()
    assert b.data_ptr() != freed_ptr
    with F.stream(s2):
        g2.replay()
        g1.replay()
    F.synchronize()
    torch.testing.assert_close(b.cpu(), torch.full((1024,), 3.0))
    torch.testing.assert_close(a.cpu(), torch.full((1024,), 2.0))


def test_capture_reaching_the_cpu_fallback_fails_and_the_device_stays_usable(device0):
    x = torch.ones(8, device="flagos")
    g = F.Graph()
    refused = r"aten::mul\.\w+ through provider 'cpu' \(cpu fallback\), which is not capture-safe"
    with (flagos.routing.override({"aten::mul.out": "cpu", "aten::mul.Tensor": "cpu"}),
          pytest.raises(RuntimeError, match=refused), F.graph(g)):
        x * 3
    assert not F.is_current_stream_capturing()
    torch.testing.assert_close((x * 3).cpu(), torch.full((8,), 3.0))
    with F.graph(g):  # the graph captures again after the failed capture
        y = x + 1
    g.replay()
    torch.testing.assert_close(y.cpu(), torch.full((8,), 2.0))


def test_reading_device_memory_on_the_host_fails_the_capture(device0):
    x = torch.ones(8, device="flagos")
    with pytest.raises(RuntimeError, match="cannot be captured"), F.graph(F.Graph()):
        (x + 1).sum().item()
    assert (x + 1).sum().item() == 16


def test_synchronizing_the_device_fails_and_the_capture_goes_on(device0):
    # From another stream too: a device-wide wait would meet the capturing stream.
    x = torch.ones(8, device="flagos")
    g = F.Graph()
    with F.graph(g):
        y = x + 1
        with pytest.raises(RuntimeError, match=r"waiting for every stream of flagos:0 .*"
                                                r"cannot be captured"):
            F.synchronize()
        with F.stream(F.Stream()), pytest.raises(RuntimeError, match="cannot be captured"):
            torch.accelerator.synchronize()
        z = y * 2
    g.replay()
    torch.testing.assert_close(z.cpu(), torch.full((8,), 4.0))


def test_the_default_stream_cannot_capture(device0):
    with pytest.raises(RuntimeError, match="cannot capture the default stream"):
        F.Graph().capture_begin()


def test_explain_says_whether_the_provider_is_capture_safe(device0):
    text = str(flagos.routing.explain("aten::mm"))
    assert "graph capture: yes" in text
    with flagos.routing.override({"aten::mm": "cpu"}):
        assert "graph capture: no" in str(flagos.routing.explain("aten::mm"))


@pytest.mark.skipif(not hasattr(torch.accelerator, "Graph"),
                    reason="torch.accelerator.Graph needs torch's device-generic graph interface")
def test_torch_accelerator_graph_runs_on_flagos(device0):
    x = torch.ones(4, device="flagos")
    graph = torch.accelerator.Graph()
    with torch.Stream(device="flagos"), graph:
        x.add_(1)
    graph.replay()
    graph.replay()
    F.synchronize()
    torch.testing.assert_close(x.cpu(), torch.full((4,), 3.0))


def test_make_graphed_callables_matches_eager_forward_and_backward(device0):
    cpu_model = _mlp()
    model = copy.deepcopy(cpu_model).to("flagos")
    sample = torch.randn(8, 16, device="flagos", requires_grad=True)
    graphed = F.make_graphed_callables(model, (sample,))
    for _ in range(2):
        x = torch.randn(8, 16)
        xd = x.to("flagos").requires_grad_()
        xc = x.clone().requires_grad_()
        out = graphed(xd)
        ref = cpu_model(xc)
        torch.testing.assert_close(out.cpu(), ref)
        out.sum().backward()
        ref.sum().backward()
        torch.testing.assert_close(xd.grad.cpu(), xc.grad)
        for p, q in zip(model.parameters(), cpu_model.parameters(), strict=True):
            torch.testing.assert_close(p.grad.cpu(), q.grad)
            p.grad = None
            q.grad = None


def test_a_capturable_adamw_step_with_layer_norm_replays_like_cpu(device0):
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                    torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
    model = copy.deepcopy(cpu_model).to("flagos")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2)
    x, target = torch.randn(8, 16), torch.randn(8, 4)
    static_x, static_t = x.to("flagos"), target.to("flagos")

    def step(m, o, a, b):
        loss = torch.nn.functional.mse_loss(m(a), b)
        loss.backward()
        o.step()
        o.zero_grad(set_to_none=False)
        return loss

    side = F.Stream()
    with F.stream(side):
        for _ in range(2):
            step(model, opt, static_x, static_t)
            step(cpu_model, cpu_opt, x, target)
    F.synchronize()
    g = F.Graph()
    with F.graph(g, stream=side):
        static_loss = step(model, opt, static_x, static_t)
    for _ in range(3):
        g.replay()
        expected = step(cpu_model, cpu_opt, x, target)
        torch.testing.assert_close(static_loss.cpu(), expected.detach(), atol=1e-5, rtol=1e-4)
    for p, q in zip(model.parameters(), cpu_model.parameters(), strict=True):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), atol=1e-5, rtol=1e-4)


def test_views_and_lists_of_results_are_captured(device0):
    y = torch.arange(12.0, device="flagos").reshape(3, 4)
    g = F.Graph()
    with F.graph(g):
        parts = torch.split(y * 2, 2, dim=1)
        diagonal = torch.diagonal(y + 0)
        roots = torch._foreach_sqrt([y, y + 1])
    y.add_(1)  # after the capture: the replay reads the new values
    g.replay()
    expected = torch.arange(12.0).reshape(3, 4) + 1
    torch.testing.assert_close(torch.cat([p.cpu() for p in parts], dim=1), expected * 2)
    torch.testing.assert_close(diagonal.cpu(), torch.diagonal(expected))
    torch.testing.assert_close(roots[0].cpu(), expected.sqrt())
    torch.testing.assert_close(roots[1].cpu(), (expected + 1).sqrt())


def test_a_graph_captures_on_the_current_device(two_devices):
    for device in (1, 0):
        with F.device(device):
            x = torch.ones(4, device="flagos")
            g = F.Graph()
            with F.graph(g):
                y = x * 2
            x.fill_(3.0)  # the replay reads it: the work was captured, not run
            g.replay()
            assert y.device == torch.device("flagos", device)
            torch.testing.assert_close(y.cpu(), torch.full((4,), 6.0))


def _needs_cuda_twin() -> None:
    twin = flagos.twin_device(0)
    if twin is None or twin.type != "cuda":
        pytest.skip("needs the CUDA twin (boxing on the cuda HAL)")


def test_cuda_twin_temporaries_stay_in_a_graph_pool_of_their_own(device0):
    # The twin's kernels take temporaries from PyTorch's CUDA allocator: during the capture
    # it serves them from a graph pool, so CUDA tensors made between replays never take
    # memory the replays write.
    _needs_cuda_twin()
    from flagos import graphs

    torch.manual_seed(0)
    x, w = torch.randn(64, 256), torch.randn(256, 256)
    dx, dw = x.to("flagos"), w.to("flagos")
    expected = torch.softmax(x @ w, dim=-1).sum(0)
    g = F.Graph()
    with flagos.routing.override({"aten::mm": "boxing", "aten::_softmax": "boxing",
                                  "aten::sum.dim_IntList": "boxing"}), F.graph(g):
        y = torch.softmax(dx @ dw, dim=-1).sum(0)
    assert len(graphs._twin_cuda_pools._pools) == 1
    churn = [torch.full((1 << 18,), 7.0, device="cuda") for _ in range(16)]
    for _ in range(2):
        g.replay()
        torch.testing.assert_close(y.cpu(), expected, rtol=1e-4, atol=1e-3)
        assert all(bool((c == 7.0).all()) for c in churn)
    del churn, y
    g.reset()
    del g
    gc.collect()
    assert not graphs._twin_cuda_pools._pools


class _CudaAllocatorPools:
    """PyTorch's CUDA allocator's graph-pool rules, for the twin pools' bookkeeping: a pool
    records for one capture at a time, and each beginAllocateToPool is a reference that
    releasePool returns."""

    def __init__(self) -> None:
        self.recording: set = set()
        self.references: dict = {}

    def begin(self, device, pool):
        if pool in self.recording:
            raise RuntimeError("beginAllocateToPool: already recording to mempool_id")
        self.recording.add(pool)
        self.references[pool] = self.references.get(pool, 0) + 1

    def end(self, device, pool):
        if pool not in self.recording:
            raise RuntimeError("endAllocatePool: not currently recording to mempool_id")
        self.recording.remove(pool)

    def release(self, device, pool):
        self.references[pool] -= 1


def test_twin_pool_shared_by_two_captures_records_once_and_is_released(monkeypatch):
    # Two flagos captures into one pool at once (two streams): the CUDA twin's pool records
    # from the first begin to the last end, and goes back when the last graph is gone.
    from flagos import graphs

    cuda = _CudaAllocatorPools()
    monkeypatch.setattr(graphs._TwinCudaPools, "_twin", staticmethod(lambda device: 0))
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: (0, 99))
    monkeypatch.setattr(torch._C, "_cuda_beginAllocateToPool", cuda.begin, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", cuda.end, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_releasePool", cuda.release, raising=False)
    pools, flagos_pool = graphs._TwinCudaPools(), (0, 1)
    pools.begin_allocate(0, flagos_pool)
    pools.begin_allocate(0, flagos_pool)
    pools.end_allocate(0, flagos_pool)
    assert cuda.recording == {(0, 99)}  # the other capture still allocates from it
    pools.end_allocate(0, flagos_pool)
    assert not cuda.recording
    pools.begin_allocate(0, flagos_pool)  # a third graph into the same pool, later
    pools.end_allocate(0, flagos_pool)
    for _ in range(2):
        pools.release(0, flagos_pool)
        assert cuda.references[(0, 99)] == 2
    pools.release(0, flagos_pool)
    assert cuda.references[(0, 99)] == 0 and not pools._pools


_SAME_NUMBERS = "a random op whose kernel would draw the same numbers at every replay"


def test_random_ops_on_the_cuda_twin_fail_the_capture_by_name(device0):
    _needs_cuda_twin()
    x = torch.ones(64, device="flagos")
    with (flagos.routing.override({"aten::native_dropout": "boxing"}),
          pytest.raises(RuntimeError, match=rf"aten::native_dropout through provider 'boxing' .*"
                                            rf"{_SAME_NUMBERS}"),
          F.graph(F.Graph())):
        torch.nn.functional.dropout(x, 0.5)
    assert not F.is_current_stream_capturing()
    assert (x * 2).sum().item() == 128


class _LaunchSeededKernels(flagos.routing.Provider):
    """A capture-safe provider of a random op whose kernel would take its seed at launch
    (as Triton's and vendor libraries' random kernels do); it declines every call."""

    name = "graphs_test_launch_seeded"
    capture_safe = True

    def serves(self, op: str) -> bool:
        return op.startswith("aten::native_dropout")

    def __call__(self, op, args, kwargs):
        return NotImplemented


def test_random_ops_of_a_capture_safe_kernel_provider_fail_the_capture(device0):
    flagos.routing.register_provider(_LaunchSeededKernels())
    x = torch.ones(64, device="flagos")
    route = {"aten::native_dropout": ["graphs_test_launch_seeded", "boxing"]}
    with flagos.routing.override(route):  # explain says so, as for any other refusal
        text = str(flagos.routing.explain("aten::native_dropout"))
    assert "graph capture: no (a random op: its kernel would draw the same numbers" in text
    # Through the twin, as routed by default: captured where each replay draws afresh.
    default = str(flagos.routing.explain("aten::native_dropout.out"))
    if flagos.get_device_properties(0).twin_device == "cpu":
        assert "graph capture: yes" in default
    else:
        assert "graph capture: no (a random op" in default
    with (flagos.routing.override(route),
          pytest.raises(RuntimeError, match=rf"aten::native_dropout through provider "
                                            rf"'graphs_test_launch_seeded' .*{_SAME_NUMBERS}"),
          F.graph(F.Graph())):
        torch.nn.functional.dropout(x, 0.5)
    assert not F.is_current_stream_capturing()


@pytest.fixture
def twin_hooks():
    """Installs test hooks for the twin allocator (what flagos.graphs sets for a CUDA
    twin) and restores flagos' own afterwards."""
    from flagos import _C, graphs

    def install(begin, end, release):
        _C._set_twin_allocator_hooks(begin, end, release)

    yield install
    pools = graphs._twin_cuda_pools
    _C._set_twin_allocator_hooks(pools.begin_allocate, pools.end_allocate, pools.release)


def test_a_failing_twin_allocator_hook_leaves_no_stream_capturing(device0, twin_hooks):
    calls = []

    def fail(what):
        def hook(device, pool):
            calls.append(what)
            raise RuntimeError(f"twin allocator: {what} failed")
        return hook

    x = torch.ones(8, device="flagos")
    twin_hooks(fail("begin"), None, lambda d, p: calls.append("release"))
    g = F.Graph()
    with pytest.raises(RuntimeError, match="begin failed"), F.graph(g):
        x + 1
    assert not F.is_current_stream_capturing()
    twin_hooks(None, fail("end"), lambda d, p: calls.append("release"))
    with pytest.raises(RuntimeError, match="end failed"), F.graph(g):
        y = x + 1
    assert not F.is_current_stream_capturing()
    g.reset()  # what the failed end had captured is released
    twin_hooks(None, None, None)
    with F.graph(g):
        y = x + 1
    g.replay()
    torch.testing.assert_close(y.cpu(), torch.full((8,), 2.0))
    assert calls == ["begin", "end", "release"]  # a pool whose begin failed has no user


AS_ITSELF_IN_A_CAPTURE = """
import torch, flagos
from flagos.provider_api import route_ops_as_themselves
route_ops_as_themselves(["aten::full"])  # as a kernel library serving it would
with flagos.routing.override({"aten::full": "cpu"}):
    assert "graph capture: as its parts" in str(flagos.routing.explain("aten::full"))
    g = torch.flagos.Graph()
    with torch.flagos.graph(g):
        y = torch.full((16,), 2.0, device="flagos")
y.zero_()
g.replay()
assert torch.equal(y.cpu(), torch.full((16,), 2.0))
assert "aten::full" not in flagos.routing.stats()
print("ok")
"""


@pytest.mark.parametrize("memory", ["host", "opaque"])
def test_an_op_routed_as_itself_with_only_the_cpu_fallback_left_is_captured(run_python, memory):
    # Its composite kernel runs (empty, then fill_ down its own route), not the fallback.
    env = {"FLAGOS_NO_TWIN": "1"} if memory == "opaque" else {}
    r = run_python(AS_ITSELF_IN_A_CAPTURE, env=env, check=False)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stderr[-3000:])
