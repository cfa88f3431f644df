"""The replay admission check (flagos_ops_gems.replay_admission) on sim without a twin: a
kernel library whose kernel is one HAL launch of a C kernel for the simulated device is
admitted; one that computes with ATen, or computes wrongly, is not."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

SCALE_C = r"""
#include <stddef.h>
#include <stdint.h>
#include "flagos_hal/sim_runtime.h"
static void scale(const flagos_hal_sim_program_t* p, void* const* args) {
  const float* x = *(const float* const*)args[0];
  float* out = *(float* const*)args[1];
  float alpha = *(const float*)args[2];
  int64_t n = *(const int64_t*)args[3];
  for (uint32_t t = 0; t < p->block[0]; ++t) {
    int64_t i = (int64_t)p->program_id[0] * p->block[0] + t;
    if (i < n) out[i] = alpha * x[i];
  }
}
static const size_t scale_args[] = {sizeof(void*), sizeof(void*), sizeof(float), sizeof(int64_t)};
__attribute__((visibility("default"))) const flagos_hal_sim_kernel_t flagos_sim_kernels[] = {
    {"scale", scale, 4, scale_args},
    {NULL, NULL, 0, NULL},
};
"""

CHECK = r"""
import sys
import torch, flagos
from flagos import kernels, launch_cache, provider_api
from flagos_ops_gems.replay_admission import check_op

kernel = kernels.KernelModule(0, "flagos-sim-kernels-v1", open(sys.argv[1], "rb").read()).kernel(
    "scale", ("*fp32", "*fp32", "fp32", "i64"))
lib = torch.library.Library("flagos_test_admit", "DEF")
for name in ("launched", "with_aten", "wrong"):
    lib.define(f"{name}(Tensor x, float alpha) -> Tensor")
    lib.impl(name, lambda x, alpha: alpha * x, "CPU")

def launch(x, alpha):
    if x.dtype != torch.float32 or not x.is_contiguous():
        return NotImplemented
    out = torch.empty_like(x)
    kernel.launch(((x.numel() + 63) // 64,), (64,), x, out, alpha, x.numel())
    return out

kernels_ = {"flagos_test_admit::launched": launch,
            "flagos_test_admit::with_aten": lambda x, alpha: x * alpha,
            "flagos_test_admit::wrong": lambda x, alpha: launch(x, alpha + 1)}

class Library(flagos.routing.Provider):
    name, is_cpp = "admittest", True
    def serves(self, op):
        return op in kernels_

provider_api.register_foreign_provider(
    "admittest", {op: launch_cache.watched(k) for op, k in kernels_.items()}.get)
flagos.routing.register_provider(Library())
samples = [((torch.randn(100), 2.0), {}), ((torch.randn(7, 5).mT, 0.5), {}),
           ((torch.randn(100), 2.0), {})]
for op in kernels_:
    v = check_op(op, samples, "admittest")
    print(op, v.admitted, v.samples, v.relaunched, v.reason)
"""


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    from flagos_hal import sim_kernels

    if sim_kernels.compiler() is None:
        pytest.skip("no C compiler to build the sim kernel library")
    library = tmp_path_factory.mktemp("sim_kernels") / "libscale.so"
    sim_kernels.build(SCALE_C, library)
    return library


def test_only_a_kernel_made_of_launches_that_compute_right_is_admitted(run_python, image) -> None:
    code = CHECK.replace("sys.argv[1]", repr(str(image)))
    r = run_python(code, env={"FLAGOS_NO_TWIN": "1", "FLAGOS_HAL": "sim"})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = {line.split()[0]: line.split(maxsplit=4)[1:] for line in r.stdout.splitlines()}
    admitted, samples, relaunched, *_ = lines["flagos_test_admit::launched"]
    # three samples (the transposed one declined to the CPU), the repeat of each kept call
    # relaunched from C++
    assert admitted == "True" and samples == "3" and int(relaunched) >= 2, r.stdout
    assert lines["flagos_test_admit::with_aten"][0] == "False", r.stdout
    assert "never relaunched" in " ".join(lines["flagos_test_admit::with_aten"]), r.stdout
    assert "device work besides its launches" in " ".join(lines["flagos_test_admit::with_aten"])
    assert lines["flagos_test_admit::wrong"][0] == "False", r.stdout
    assert "differs from the CPU" in " ".join(lines["flagos_test_admit::wrong"]), r.stdout


def test_admitted_ops_round_trip_with_their_digests(tmp_path) -> None:
    import json

    from flagos_ops_gems.replay_admission import read_admitted, source_digest, write_admitted

    digest = source_digest(json.dumps)
    assert digest and digest == source_digest(json.dumps)
    path = tmp_path / "replayable.toml"
    write_admitted({"aten::add.Tensor": digest}, "FlagGems 5.0.2", path)
    assert read_admitted(path) == {"aten::add.Tensor": digest}
    assert read_admitted(tmp_path / "absent.toml") == {}


def test_a_fused_adapters_digest_is_its_flaggems_functions() -> None:
    # An admitted _fused_rms_norm is replayed while FlagGems' RMS norm source is the one
    # admitted: the adapter's digest is that of the function it serves with.
    import json

    from flagos_ops_gems._fused_adapters import _adapters
    from flagos_ops_gems.replay_admission import source_digest

    adapters = _adapters(json.dumps, json.loads)
    assert source_digest(adapters["aten::_fused_rms_norm"]) == source_digest(json.dumps)
    assert source_digest(adapters["aten::_fused_rms_norm_backward"]) == source_digest(json.loads)


def test_every_training_step_op_has_samples_in_its_aten_form() -> None:
    # OpInfo entries test Python functions; the admission calls ATen overloads, some of
    # another schema (_softmax, nll_loss_forward, the backwards): each gets samples it takes.
    from flagos_ops_gems.replay_admission import TRAINING_STEP_OPS, opinfo_samples

    for op in TRAINING_STEP_OPS:
        rest = op.partition("::")[2]
        name, _, overload = rest.partition(".")
        fn = getattr(getattr(torch.ops.aten, name), overload or "default")
        taken = 0
        for args, kwargs in opinfo_samples(op, 2, (torch.float32,)):
            try:  # as the admission does, a sample of another overload is left out
                fn(*args, **kwargs)
            except (RuntimeError, TypeError, ValueError):
                continue
            taken += 1
        assert taken >= 2, op


def test_samples_with_4d_tensors_also_come_channels_last() -> None:
    from flagos_ops_gems.replay_admission import opinfo_samples

    layouts = [next((t for t in args if isinstance(t, torch.Tensor)), None)
               for args, _ in opinfo_samples("aten::avg_pool2d", 2, (torch.float32,))]
    four_d = [t for t in layouts if t is not None and t.dim() == 4]
    assert any(t.is_contiguous() for t in four_d)
    assert any(not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)
               for t in four_d)


def test_an_ops_verdicts_per_dtype_merge_to_its_first_failure_or_their_sums() -> None:
    from flagos_ops_gems.replay_admission import Verdict, merge_verdicts

    ok = Verdict("t", True, 4, 6, "")
    no_bf16 = Verdict("t", False, 0, 0, "no sample")
    unkept = Verdict("t", False, 2, 0, "never relaunched: its calls were not kept")
    wrong = Verdict("t", False, 1, 0, "differs from the CPU: mismatch")
    assert merge_verdicts("aten::x", [ok, no_bf16]) == Verdict("aten::x", True, 4, 6, "")
    assert merge_verdicts("aten::x", [ok, unkept]) == Verdict("aten::x", True, 6, 6, "")
    assert merge_verdicts("aten::x", [ok, wrong, no_bf16]).reason.startswith("differs")
    assert not merge_verdicts("aten::x", [wrong, ok]).admitted
    assert merge_verdicts("aten::x", [no_bf16, no_bf16]).reason == "no sample"
    assert merge_verdicts("aten::x", [unkept, no_bf16]).reason.startswith("never relaunched")


def test_checks_in_processes_report_their_verdicts_and_a_slow_one_is_stopped() -> None:
    import json
    import sys

    from flagos_ops_gems.replay_admission import Verdict, run_tasks

    def printing(verdict: dict) -> list[str]:
        return [sys.executable, "-c", f"print('compiling'); print({json.dumps(verdict)!r})"]

    tasks = [
        ("aten::a", printing({"op": "aten::a", "admitted": True, "samples": 2,
                              "relaunched": 3, "reason": ""}), None),
        ("aten::b", [sys.executable, "-c", "import time; time.sleep(60)"], None),
        ("aten::a", printing({"op": "aten::a", "admitted": False, "samples": 0,
                              "relaunched": 0, "reason": "no sample"}), None),
        ("aten::c", [sys.executable, "-c", "import sys; sys.exit('segfaulted in the kernel')"],
         None),
    ]
    got = dict(run_tasks(tasks, jobs=3, timeout=5))
    assert list(got)[-1] == "aten::b"  # the slow op's verdict holds back no other's
    assert sorted(got) == ["aten::a", "aten::b", "aten::c"]
    assert got["aten::a"] == [Verdict("aten::a", True, 2, 3, ""),
                              Verdict("aten::a", False, 0, 0, "no sample")]
    (slow,) = got["aten::b"]
    assert not slow.admitted and slow.reason.startswith("not finished in 5 s, its --task-timeout")
    (crashed,) = got["aten::c"]
    assert not crashed.admitted and "exited 1: segfaulted in the kernel" in crashed.reason


def test_checks_beside_others_tune_on_copies_of_flaggems_caches(tmp_path, monkeypatch) -> None:
    from flagos_ops_gems.replay_admission import _tuning_apart

    kept = tmp_path / "kept"
    (kept / "config_cache").mkdir(parents=True)
    (kept / "config_cache" / "TunedConfig.db").write_bytes(b"tuned")
    monkeypatch.setenv("FLAGGEMS_CACHE_DIR", str(kept))
    monkeypatch.setenv("FLAGGEMS_DB_URL", f"sqlite:///{kept}/other.db")
    env = _tuning_apart(tmp_path / "task-0")
    assert env["FLAGGEMS_CACHE_DIR"] == str(tmp_path / "task-0")
    assert "FLAGGEMS_DB_URL" not in env  # the database is the copy's
    assert (tmp_path / "task-0" / "config_cache" / "TunedConfig.db").read_bytes() == b"tuned"
    monkeypatch.setenv("FLAGGEMS_CACHE_DIR", str(tmp_path / "absent"))
    assert _tuning_apart(tmp_path / "task-1")["FLAGGEMS_CACHE_DIR"] == str(tmp_path / "task-1")
    assert (tmp_path / "task-1").is_dir()


def test_checks_past_the_runs_deadline_are_stopped_or_not_started() -> None:
    import sys
    import time

    from flagos_ops_gems.replay_admission import run_tasks

    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    start = time.monotonic()
    got = dict(run_tasks([("aten::a", sleep, None), ("aten::b", sleep, None)], jobs=1,
                         timeout=None, deadline=start + 3))
    assert time.monotonic() - start < 30
    assert "its --deadline" in got["aten::a"][0].reason
    assert got["aten::b"][0].reason == "not checked: the run's --deadline had passed"


def test_a_relaunch_that_differs_is_told_apart_from_rounding_and_garbage() -> None:
    from flagos_ops_gems.replay_admission import _difference

    cpu = torch.linspace(0, 1, 64)
    rounded = cpu.clone()
    rounded[3] += 1e-7
    garbage = cpu.clone()
    garbage[10:20] = 1e30
    told = _difference(0, cpu, cpu, rounded)
    assert told.startswith("result 0: 1 of 64 elements differ, max |difference| "), told
    assert float(told.split("|difference| ")[1].split(";")[0]) < 1e-6, told
    assert told.endswith("matches the CPU: recorded yes, relaunched yes"), told
    assert "10 of 64 elements differ" in _difference(1, cpu, cpu, garbage)
    assert _difference(1, cpu, cpu, garbage).endswith("recorded yes, relaunched no")
    near = cpu + 1e-3
    assert _difference(0, cpu, near, near).endswith("recorded no, relaunched no")
    assert _difference(0, cpu, near, near, {"rtol": 0, "atol": 1e-2}).endswith(
        "recorded yes, relaunched yes")  # the admission's tolerance, not assert_close's own
    assert "(64,)/(1,) recorded, (8, 8)/(8, 1) relaunched" in _difference(
        0, cpu, cpu, cpu.view(8, 8))


def test_a_run_over_some_ops_leaves_the_others_entries() -> None:
    from flagos_ops_gems.replay_admission import merge_admitted

    previous = {"aten::add.Tensor": "a1", "aten::gelu": "g0", "aten::triu": "t0"}
    # gelu and triu checked again: gelu admitted (its source changed), triu refused
    assert merge_admitted(previous, ["aten::gelu", "aten::triu"], {"aten::gelu": "g1"}) == {
        "aten::add.Tensor": "a1", "aten::gelu": "g1"}
