"""One rank of a multi-process test of ProcessGroupFlagOS (started by test_distributed.py).

usage: python _dist_worker.py SCENARIO RANK WORLD PORT

Prints ``RANK <r> OK`` on success; any failure raises (non-zero exit code).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import time
from datetime import timedelta

# A rare abort at teardown after FSDP2 ("terminate called without an active exception")
# has no stack yet: on SIGABRT (and SIGSEGV) print where every Python thread was, into the
# output the test shows when a rank fails.
faulthandler.enable(all_threads=True)

import flagos_distributed as fd
import torch
import torch.distributed as dist

SCENARIO, RANK, WORLD, PORT = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
FLAGOS = torch.device("flagos", RANK % torch.flagos.device_count())
torch.flagos.set_device(FLAGOS.index)


def init(backend: str | None, offset: int = 0, timeout: float = 60.0) -> None:
    kwargs = {} if backend is None else {"backend": backend}
    dist.init_process_group(init_method=f"tcp://127.0.0.1:{PORT + offset}", rank=RANK,
                            world_size=WORLD, timeout=timedelta(seconds=timeout), **kwargs)


def same(name: str, cpu: list[torch.Tensor], flg: list[torch.Tensor]) -> None:
    assert len(cpu) == len(flg), (name, len(cpu), len(flg))
    for i, (a, b) in enumerate(zip(cpu, flg)):
        assert b.device.type == "flagos", (name, i, b.device)
        b = b.cpu()
        assert a.dtype == b.dtype and a.shape == b.shape, (name, i, a.dtype, b.dtype, a.shape,
                                                           b.shape)
        if a.is_floating_point():
            ok = torch.allclose(a, b, rtol=1e-6, atol=1e-6)
        else:
            ok = torch.equal(a, b)
        assert ok, f"{name}[{i}] rank {RANK}: gloo on cpu {a} != flagos {b}"


def data(n: int, dtype: torch.dtype, dev, salt: int = 0) -> torch.Tensor:
    """Rank-dependent values that are exact in every dtype used."""
    t = (torch.arange(n, dtype=torch.int64) * 3 + RANK * 7 + salt) % 11 + 1
    return t.to(dtype).to(dev)


# ---- every collective: flagos through ProcessGroupFlagOS vs cpu through gloo -------------

def compare_collectives(group) -> int:
    """Run each collective on cpu (gloo) and on flagos (ProcessGroupFlagOS); compare."""
    W, R = dist.get_world_size(group), dist.get_rank(group)
    g = group
    checks = 0

    def both(name, fn, reference=None):
        nonlocal checks
        flg = fn(FLAGOS)
        cpu = reference() if reference else fn("cpu")
        same(name, cpu, flg)
        checks += 1

    ops_f = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
    ops_i = ops_f + [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
    for dtype, ops in ((torch.float32, ops_f), (torch.int64, ops_i), (torch.float64, ops_f[:1]),
                       (torch.int32, ops_f[:1])):
        for op in ops:
            def ar(dev, op=op, dtype=dtype):
                t = data(37, dtype, dev)
                dist.all_reduce(t, op=op, group=g)
                return [t]
            both(f"all_reduce {dtype} {op}", ar)

    # AVG and PREMUL_SUM: Gloo has neither; ProcessGroupFlagOS emulates them on Gloo.
    def avg(dev):
        t = data(16, torch.float32, dev)
        dist.all_reduce(t, op=dist.ReduceOp.AVG, group=g)
        return [t]

    def avg_ref():
        t = data(16, torch.float32, "cpu")
        dist.all_reduce(t, group=g)
        return [t / W]
    both("all_reduce AVG", avg, avg_ref)

    def premul(dev):
        t = data(16, torch.float32, dev)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5), group=g)
        return [t]

    def premul_ref():
        t = data(16, torch.float32, "cpu") * 0.5
        dist.all_reduce(t, group=g)
        return [t]
    both("all_reduce PREMUL_SUM", premul, premul_ref)

    def bcast(dev):
        t = data(10, torch.float32, dev)
        dist.broadcast(t, group_src=W - 1, group=g)
        return [t]
    both("broadcast", bcast)

    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
        def red(dev, op=op):
            t = data(9, torch.float32, dev)
            dist.reduce(t, group_dst=0, op=op, group=g)
            return [t] if R == 0 else []
        both(f"reduce {op}", red)

    def ag(dev):
        out = [torch.zeros(5, 3, device=dev) for _ in range(W)]
        dist.all_gather(out, data(15, torch.float32, dev).view(5, 3), group=g)
        return out
    both("all_gather", ag)

    for fn_name in ("all_gather_into_tensor", "all_gather_single"):
        if not hasattr(dist, fn_name):
            continue

        def agt(dev, fn_name=fn_name):
            out = torch.zeros(W * 6, device=dev)
            getattr(dist, fn_name)(out, data(6, torch.float32, dev), group=g)
            return [out]
        both(fn_name, agt)

    def rs(dev):
        out = torch.zeros(4, device=dev)
        dist.reduce_scatter(out, [data(4, torch.float32, dev, salt=i) for i in range(W)],
                            group=g)
        return [out]
    both("reduce_scatter", rs)

    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
        def rst(dev, op=op):
            out = torch.zeros(3, device=dev)
            dist.reduce_scatter_tensor(out, data(3 * W, torch.float32, dev), op=op, group=g)
            return [out]
        both(f"reduce_scatter_tensor {op}", rst)

    def rst_avg(dev):
        out = torch.zeros(3, device=dev)
        dist.reduce_scatter_tensor(out, data(3 * W, torch.float32, dev), op=dist.ReduceOp.AVG,
                                   group=g)
        return [out]

    def rst_avg_ref():
        out = torch.zeros(3)
        dist.reduce_scatter_tensor(out, data(3 * W, torch.float32, "cpu"), group=g)
        return [out / W]
    both("reduce_scatter_tensor AVG", rst_avg, rst_avg_ref)

    def a2a(dev):
        out = [torch.zeros(2, device=dev) for _ in range(W)]
        dist.all_to_all(out, [data(2, torch.float32, dev, salt=10 * i) for i in range(W)],
                        group=g)
        return out

    def a2a_ref():  # what rank i sent here (Gloo before torch 2.12 has no list all_to_all)
        src = [dist.get_global_rank(g, i) if g is not dist.group.WORLD else i for i in range(W)]
        return [((torch.arange(2) * 3 + s * 7 + 10 * R) % 11 + 1).float() for s in src]
    both("all_to_all", a2a, a2a_ref)

    def a2a_single(dev):
        out = torch.zeros(4 * W, device=dev)
        dist.all_to_all_single(out, data(4 * W, torch.float32, dev), group=g)
        return [out]
    both("all_to_all_single", a2a_single)

    # uneven splits: rank r sends (j + 1) rows to rank j, receives (r + 1) rows from each
    def a2a_uneven(dev):
        in_splits = [j + 1 for j in range(W)]
        out_splits = [R + 1] * W
        inp = data(sum(in_splits) * 2, torch.float32, dev).view(-1, 2)
        out = torch.zeros(sum(out_splits), 2, device=dev)
        dist.all_to_all_single(out, inp, out_splits, in_splits, group=g)
        return [out]
    both("all_to_all_single uneven", a2a_uneven)

    def gat(dev):
        out = [torch.zeros(6, device=dev) for _ in range(W)] if R == 0 else None
        dist.gather(data(6, torch.float32, dev), out, group_dst=0, group=g)
        return out or []
    both("gather", gat)

    def sca(dev):
        out = torch.zeros(5, device=dev)
        src = [data(5, torch.float32, dev, salt=i) for i in range(W)] if R == 0 else None
        dist.scatter(out, src, group_src=0, group=g)
        return [out]
    both("scatter", sca)

    def p2p(dev):
        t = data(8, torch.float32, dev)
        out = torch.zeros(8, device=dev)
        nxt, prv = (R + 1) % W, (R - 1) % W
        if R % 2 == 0:
            dist.send(t, group_dst=nxt, group=g)
            dist.recv(out, group_src=prv, group=g)
        else:
            dist.recv(out, group_src=prv, group=g)
            dist.send(t, group_dst=nxt, group=g)
        return [out]
    both("send/recv", p2p)

    def p2p_async(dev):
        t = data(8, torch.float32, dev, salt=3)
        out = torch.zeros(8, device=dev)
        ops = [dist.P2POp(dist.isend, t, group=g, group_peer=(R + 1) % W),
               dist.P2POp(dist.irecv, out, group=g, group_peer=(R - 1) % W)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return [out]
    both("batch_isend_irecv", p2p_async)

    # coalesced fast paths (_coalescing_manager: allreduce_coalesced,
    # allgather_into_tensor_coalesced, reduce_scatter_tensor_coalesced)
    def coalesced(dev, with_device=False):
        # with a device, the backend's startCoalescing/endCoalescing run too (Gloo lacks them)
        cdev = torch.device(dev) if with_device else None
        a, b = data(5, torch.float32, dev), data(7, torch.float32, dev, salt=1)
        with dist._coalescing_manager(group=g, device=cdev, async_ops=True) as cm:
            dist.all_reduce(a, group=g)
            dist.all_reduce(b, group=g)
        cm.wait()
        o1, o2 = torch.zeros(3 * W, device=dev), torch.zeros(2 * W, device=dev)
        with dist._coalescing_manager(group=g, device=cdev, async_ops=True) as cm:
            dist.all_gather_into_tensor(o1, data(3, torch.float32, dev), group=g)
            dist.all_gather_into_tensor(o2, data(2, torch.float32, dev, salt=5), group=g)
        cm.wait()
        r1, r2 = torch.zeros(2, device=dev), torch.zeros(3, device=dev)
        with dist._coalescing_manager(group=g, device=cdev, async_ops=True) as cm:
            dist.reduce_scatter_tensor(r1, data(2 * W, torch.float32, dev), group=g)
            dist.reduce_scatter_tensor(r2, data(3 * W, torch.float32, dev, salt=2), group=g)
        cm.wait()
        return [a, b, o1, o2, r1, r2]
    both("coalesced", coalesced)
    both("coalesced (start/endCoalescing)", lambda dev: coalesced(dev, dev != "cpu"))

    # async work objects: wait, is_completed, get_future, then()
    def asynchronous(dev):
        t = data(12, torch.float32, dev)
        w = dist.all_reduce(t, group=g, async_op=True)
        fut = w.get_future()
        doubled = fut.then(lambda f: f.value()[0] * 2)
        assert w.wait()
        assert w.is_completed()
        res = fut.wait()
        assert res[0].device == t.device and res[0].data_ptr() == t.data_ptr()
        return [t, doubled.wait()]
    both("async all_reduce", asynchronous)

    dist.barrier(group=g)
    return checks


def metadata_mismatch(group) -> None:
    """Shapes or dtypes that differ across ranks are an error on every rank, not garbage."""
    R = dist.get_rank(group)
    for bad in (torch.ones(4 + R, device=FLAGOS),
                torch.ones(4, device=FLAGOS, dtype=torch.float32 if R == 0 else torch.int32)):
        try:
            dist.all_reduce(bad, group=group)
        except RuntimeError as e:
            assert "ranks disagree on allreduce" in str(e), e
        else:
            raise AssertionError("mismatched all_reduce did not raise")
    t = torch.ones(3, device=FLAGOS)  # the group still works afterwards
    dist.all_reduce(t, group=group)
    assert t.cpu().tolist() == [dist.get_world_size(group)] * 3


def scenario_collectives() -> None:
    init("cpu:gloo,flagos:flagos")
    b = fd.backend_of()
    assert isinstance(b, fd.ProcessGroupFlagOS), type(b)
    assert (b.delegate, b.path, b.metadata_check) == ("gloo", "host", True)
    n = compare_collectives(dist.group.WORLD)
    metadata_mismatch(dist.group.WORLD)
    # the staged path (pinned host buffers), forced on host-addressable sim memory
    os.environ["FLAGOS_DIST_STAGED"] = "1"
    staged = dist.new_group(backend="cpu:gloo,flagos:flagos")
    del os.environ["FLAGOS_DIST_STAGED"]
    assert fd.backend_of(staged).path == "staged"
    n += compare_collectives(staged)
    # with the metadata check off
    b.metadata_check = False
    before = b.metadata_checks_run
    t = torch.ones(2, device=FLAGOS)
    dist.all_reduce(t)
    assert b.metadata_checks_run == before
    print(f"RANK {RANK} compared {n} collectives")
    dist.destroy_process_group()


def scenario_init_modes() -> None:
    # 1. init_process_group("flagos"): flagos only
    init("flagos", offset=0)
    assert dist.get_backend() == "flagos"
    t = torch.full((3,), float(RANK + 1), device=FLAGOS)
    dist.all_reduce(t)
    assert t.cpu().tolist() == [WORLD * (WORLD + 1) / 2] * 3
    dist.barrier()
    objs = [None] * WORLD
    dist.all_gather_object(objs, {"rank": RANK})
    assert [o["rank"] for o in objs] == list(range(WORLD)), objs
    dist.destroy_process_group()
    # 2. init_process_group(): flagos is torch's accelerator -> the registered default
    assert torch.accelerator.current_accelerator().type == "flagos"
    assert dist.Backend.default_device_backend_map["flagos"] == "flagos"
    init(None, offset=1)
    assert isinstance(fd.backend_of(), fd.ProcessGroupFlagOS)
    t = torch.full((3,), float(RANK + 1), device=FLAGOS)
    dist.all_reduce(t)
    assert t.cpu().tolist() == [WORLD * (WORLD + 1) / 2] * 3
    dist.barrier()
    dist.destroy_process_group()
    # 3. "cpu:gloo,flagos:flagos"
    init("cpu:gloo,flagos:flagos", offset=2)
    c, f = torch.ones(2), torch.ones(2, device=FLAGOS)
    dist.all_reduce(c)
    dist.all_reduce(f)
    assert c.tolist() == f.cpu().tolist() == [WORLD] * 2
    assert dist.get_backend_config() == "cpu:gloo,flagos:flagos", dist.get_backend_config()
    dist.destroy_process_group()


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _batches(steps: int, global_batch: int):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(global_batch, 8, generator=g), torch.randn(global_batch, 4, generator=g))
            for _ in range(steps)]


def _reference(steps: int, global_batch: int, lr: float) -> list[torch.Tensor]:
    """Single-process training on the whole global batch (on flagos, one device)."""
    model = _mlp().to(FLAGOS)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in _batches(steps, global_batch):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x.to(FLAGOS)), y.to(FLAGOS)).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def scenario_ddp() -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    init("flagos")
    steps, gb, lr = 5, 8 * WORLD, 0.1
    model = DDP(_mlp().to(FLAGOS), bucket_cap_mb=0.0005)  # several buckets
    assert isinstance(model.reducer, torch._C._distributed_c10d.Reducer)  # the C++ reducer
    assert isinstance(fd.backend_of(), fd.ProcessGroupFlagOS)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    before = fd.backend_of()._get_sequence_number_for_group()
    for x, y in _batches(steps, gb):
        lo, hi = RANK * gb // WORLD, (RANK + 1) * gb // WORLD
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x[lo:hi].to(FLAGOS)), y[lo:hi].to(FLAGOS)).backward()
        opt.step()
    used = fd.backend_of()._get_sequence_number_for_group() - before
    assert used >= steps, f"DDP issued only {used} collectives through ProcessGroupFlagOS"
    ref = _reference(steps, gb, lr)
    for p, r in zip(model.module.parameters(), ref):
        assert torch.allclose(p.detach().cpu(), r, rtol=1e-5, atol=1e-6), (p, r)
    print(f"RANK {RANK} DDP matched single-process training ({used} collectives)")
    dist.destroy_process_group()


def scenario_fsdp() -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    init("flagos")
    mesh = init_device_mesh("flagos", (WORLD,))
    steps, gb, lr = 4, 8 * WORLD, 0.1
    model = _mlp().to(FLAGOS)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    assert all(isinstance(p, DTensor) for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for x, y in _batches(steps, gb):
        lo, hi = RANK * gb // WORLD, (RANK + 1) * gb // WORLD
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[lo:hi].to(FLAGOS)), y[lo:hi].to(FLAGOS))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    full = [p.full_tensor().detach().cpu() for p in model.parameters()]
    ref = _reference(steps, gb, lr)
    for p, r in zip(full, ref):
        assert torch.allclose(p, r, rtol=1e-5, atol=1e-6), (p, r)
    print(f"RANK {RANK} FSDP2 matched single-process training; losses {losses}")
    dist.destroy_process_group()


def scenario_peer_failure() -> None:
    """Rank 1 first stalls (alive, never joins), then dies (SIGKILL)."""
    timeout = float(os.environ.get("FLAGOS_TEST_TIMEOUT", "2"))
    init("flagos", timeout=timeout)
    other = dist.new_group(backend="flagos", timeout=timedelta(seconds=timeout))
    fd.backend_of(other).metadata_check = False  # hit the collective itself, not the check
    t = torch.ones(4, device=FLAGOS)
    dist.all_reduce(t)  # all alive: works
    dist.all_reduce(t, group=other)
    if RANK == 1:
        time.sleep(timeout + 0.5)  # stall through rank 0's first attempt
        os.kill(os.getpid(), signal.SIGKILL)
    for label, group in (("stalled", None), ("killed", other)):
        if label == "killed":
            time.sleep(1.5)  # rank 1 is dead by now
        start = time.monotonic()
        try:
            dist.all_reduce(t, group=group)
        except dist.DistBackendError as e:
            took = time.monotonic() - start
            msg = str(e)
            assert "ProcessGroupFlagOS[gloo] rank 0/2" in msg, msg
            assert "a peer rank died, hung, or did not reach this collective" in msg, msg
            assert took < timeout + 4.0, f"{label}: error after {took:.1f}s"
            print(f"RANK 0 {label} peer -> DistBackendError after {took:.1f}s: "
                  f"{msg.splitlines()[0][:200]}")
        else:
            raise AssertionError(f"{label}: all_reduce with a dead peer returned")
    print(f"RANK {RANK} OK", flush=True)
    os._exit(0)  # the group cannot be destroyed cleanly with a dead peer


SCENARIOS = {
    "collectives": scenario_collectives,
    "init_modes": scenario_init_modes,
    "ddp": scenario_ddp,
    "fsdp": scenario_fsdp,
    "peer_failure": scenario_peer_failure,
}

if __name__ == "__main__":
    SCENARIOS[SCENARIO]()
    print(f"RANK {RANK} OK", flush=True)
    # A normal exit: interpreter teardown is part of what the test checks (exit code 0).
