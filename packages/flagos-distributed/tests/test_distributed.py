"""ProcessGroupFlagOS on the sim HAL: 2 and 4 processes on one CPU machine, Gloo inside.

Each multi-process test starts WORLD subprocesses running ``_dist_worker.py SCENARIO``;
the worker raises on any mismatch and prints ``RANK r OK`` when done.
"""

from __future__ import annotations

import importlib.metadata
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import flagos_distributed as fd
import pytest
import torch
import torch.distributed as dist

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_dist_worker.py"
# The ranks import flagos_distributed from where this test process did (the installed
# package, or the source tree in a development run with an in-place build).
PKG_PYTHON = Path(fd.__file__).resolve().parent.parent


def _free_port() -> int:
    # init_modes uses PORT, PORT+1, PORT+2
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65000:
            return port
    raise RuntimeError("no free port")


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PKG_PYTHON), env.get("PYTHONPATH", "")) if p)
    env.setdefault("FLAGOS_HAL", "sim")
    env.pop("FLAGOS_DIST_BACKEND", None)
    env.pop("FLAGOS_DIST_CHECK", None)
    env.pop("FLAGOS_DIST_STAGED", None)
    env.update(extra or {})
    return env


def _launch(scenario: str, world: int, killed: tuple[int, ...] = (), timeout: float = 120,
            env: dict[str, str] | None = None) -> list[str]:
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, str(WORKER), scenario, str(r), str(world),
                               str(port)], env=_env(env), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(world)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, (p, out) in enumerate(zip(procs, outs)):
        if r in killed:
            assert p.returncode == -signal.SIGKILL, f"rank {r} was meant to die:\n{out}"
            continue
        assert p.returncode == 0 and f"RANK {r} OK" in out, \
            f"{scenario} rank {r} exited with {p.returncode}:\n{out[-6000:]}"
    return outs


# The collective matrix and the failure tests exercise the Gloo delegate on sim, whatever
# HAL the suite runs on (4 ranks do not fit 2 GPUs, and NCCL's failure handling is its own);
# on a CUDA HAL, DDP, FSDP2 and the init modes below run with NCCL inside.
ON_SIM = {"FLAGOS_HAL": "sim"}


def _hal_is_sim() -> bool:
    return torch.flagos.get_device_properties(0).hal == "sim"


@pytest.mark.parametrize("world", [2, 4])
def test_every_collective_matches_gloo_on_cpu(world):
    """all_reduce (every ReduceOp, AVG, PREMUL_SUM), broadcast, reduce, all_gather(+tensor),
    reduce_scatter(+tensor), all_to_all(+single, uneven), gather, scatter, send/recv,
    batch_isend_irecv, coalesced variants, async work; zero-copy and staged paths;
    shape/dtype mismatches are errors."""
    outs = _launch("collectives", world, env=ON_SIM)
    # all_gather_single is newer than torch 2.11; the worker checks what this torch has.
    optional = sum(hasattr(dist, n) for n in ("all_gather_into_tensor", "all_gather_single"))
    assert f"compared {2 * (33 + optional)} collectives" in outs[0]


def _one_device_per_rank(world: int) -> None:
    """Ranks on a device HAL go through its collective library (NCCL on CUDA), which
    refuses two ranks on one GPU; sim ranks may share a device."""
    if not _hal_is_sim() and torch.flagos.device_count() < world:
        pytest.skip(f"{world} ranks need {world} devices; this machine has "
                    f"{torch.flagos.device_count()}")


def test_init_process_group_modes():
    """init_process_group("flagos"), init_process_group() and "cpu:gloo,flagos:flagos"."""
    _one_device_per_rank(2)
    _launch("init_modes", 2)


def test_ddp_matches_single_process():
    """DDP (its C++ Reducer over ProcessGroupFlagOS) == one process on the global batch."""
    _one_device_per_rank(2)
    outs = _launch("ddp", 2)
    assert "DDP matched single-process training" in outs[0]


def test_fsdp2_trains():
    """fully_shard on a small MLP trains, and matches one process on the global batch."""
    _one_device_per_rank(2)
    outs = _launch("fsdp", 2)
    assert "FSDP2 matched single-process training" in outs[0]


def test_dead_peer_gives_timeout_error():
    """A stalled peer and a killed peer: DistBackendError within the 2 s group timeout."""
    outs = _launch("peer_failure", 2, killed=(1,), env={"FLAGOS_TEST_TIMEOUT": "2", **ON_SIM})
    assert "stalled peer -> DistBackendError" in outs[0]
    assert "killed peer -> DistBackendError" in outs[0]


# ---- in-process: registration and delegate selection -----------------------------------

def test_registered_for_the_flagos_device():
    assert "flagos" in dist.Backend.backend_list
    assert "FLAGOS" in dist.Backend._plugins
    assert dist.Backend.backend_capability["flagos"] == ["flagos"]
    assert dist.Backend.default_device_backend_map["flagos"] == "flagos"
    assert issubclass(fd.ProcessGroupFlagOS, torch._C._distributed_c10d.Backend)


def test_sim_selects_gloo_zero_copy(monkeypatch):
    if not _hal_is_sim():
        pytest.skip("selection on a sim HAL")
    monkeypatch.delenv("FLAGOS_DIST_BACKEND", raising=False)
    monkeypatch.delenv("FLAGOS_DIST_STAGED", raising=False)
    d = fd.select_delegate(0)
    assert (d.name, d.path) == ("gloo", "host")
    assert "nccl: the HAL's memory is not CUDA memory" in d.reason
    monkeypatch.setenv("FLAGOS_DIST_STAGED", "1")
    assert fd.select_delegate(0).path == "staged"


@pytest.mark.parametrize("name, message", [
    ("nccl", "FLAGOS_DIST_BACKEND=nccl was requested, but the HAL's memory is not CUDA"),
    ("flagcx", "FLAGOS_DIST_BACKEND=flagcx was requested, but FlagCX"),
    ("hccl", "FLAGOS_DIST_BACKEND=hccl was requested, but HCCL"),
])
def test_forcing_a_missing_library_is_an_error(monkeypatch, name, message):
    if name == "nccl" and not _hal_is_sim():
        pytest.skip("NCCL is not missing on a CUDA HAL")
    monkeypatch.setenv("FLAGOS_DIST_BACKEND", name)
    with pytest.raises(RuntimeError, match=message):
        fd.select_delegate(0)


def test_forcing_gloo_and_unknown_names(monkeypatch):
    monkeypatch.setenv("FLAGOS_DIST_BACKEND", "gloo")
    assert fd.select_delegate(0).reason == "forced by FLAGOS_DIST_BACKEND=gloo"
    monkeypatch.setenv("FLAGOS_DIST_BACKEND", "mpi")
    with pytest.raises(ValueError, match="expected auto or one of"):
        fd.select_delegate(0)


def test_wrong_delegates_are_errors_not_crashes():
    """The constructor's checks, in process (no GPU needed): what the NCCL path would hand
    a wrong or missing delegate is refused with a message instead of being cast or used."""
    from datetime import timedelta

    store = dist.HashStore()
    gloo = dist.ProcessGroupGloo(store, 0, 1, timedelta(seconds=10))
    t = timedelta(seconds=10)
    make = fd.ProcessGroupFlagOS
    with pytest.raises(TypeError, match="inner must be a torch c10d Backend"):
        make(0, 1, object(), None, "gloo", "host", False, t, [-1])
    with pytest.raises(TypeError, match="checker must be a torch c10d Backend"):
        make(0, 1, gloo, "gloo", "gloo", "host", False, t, [-1])
    with pytest.raises(RuntimeError, match="no delegate backend given"):
        make(0, 1, None, None, "gloo", "host", False, t, [-1])
    with pytest.raises(RuntimeError, match="the delegate backend is 'gloo', expected 'nccl'"):
        make(0, 1, gloo, None, "nccl", "cuda", False, t, [0])
    with pytest.raises(RuntimeError, match="the cuda path needs the nccl delegate"):
        make(0, 1, gloo, None, "gloo", "cuda", False, t, [0])
    with pytest.raises(ValueError, match="path must be host, staged or cuda"):
        make(0, 1, gloo, None, "gloo", "gpu", False, t, [0])
    pg = make(0, 1, gloo, gloo, "gloo", "host", True, t, [-1])
    assert (pg.delegate, pg.path, pg.metadata_check) == ("gloo", "host", True)
    del gloo  # the backend keeps its delegate alive
    import gc

    gc.collect()
    x = torch.ones(3, device="flagos:0")
    pg.allreduce([x]).wait()
    assert x.cpu().tolist() == [1.0, 1.0, 1.0]


def test_entry_points_when_installed():
    try:
        dist_meta = importlib.metadata.distribution("flagos-distributed")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("flagos-distributed is not installed (in-tree run): no entry points")
    eps = {(e.group, e.name): e.value for e in dist_meta.entry_points}
    # One autoload for the whole project: flagos-core's torch.backends entry point imports
    # flagos, which calls the flagos.plugins entry points.
    assert ("torch.backends", "flagos_distributed") not in eps
    assert eps[("flagos.plugins", "distributed")] == "flagos_distributed:register"
    # plain `import torch` registers the backend
    code = ("import torch, torch.distributed as d; "
            "assert 'FLAGOS' in d.Backend._plugins, d.Backend._plugins")
    subprocess.run([sys.executable, "-c", code], env=_env(), check=True, timeout=60)
