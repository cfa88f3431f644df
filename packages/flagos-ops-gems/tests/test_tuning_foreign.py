"""The route tuner and shadow verification over a foreign-kernel provider: the project's own
Triton kernels (``tritontest``, served as FlagGems is), under Triton's interpreter on sim."""

from __future__ import annotations

import torch
from flagos import routing, tuning
from flagos.routing import shadow


def _t(shape: list[int]) -> dict:
    return {"tensor": {"shape": shape, "stride": [1] if len(shape) == 1 else [shape[1], 1],
                       "offset": 0, "dtype": "float32"}}


def test_tuner_measures_the_foreign_provider(test_library) -> None:
    w = tuning.Workload("foreign", [tuning.OpCall("aten::neg", [_t([64])], {}),
                                    tuning.OpCall("aten::add.Tensor", [_t([64]), _t([64])], {})])
    result = tuning.tune(w, providers=["tritontest", "boxing"], warmup=1, reps=3,
                         target_ms=0.5, max_calls=4)
    for choice in result.choices:
        run = choice.calls[0].runs["tritontest"]
        assert run.status == "ok", (choice.op, run)
        assert run.timing is not None and run.timing.median_us > 0
        assert set(choice.totals) == {"tritontest", "boxing"}
        assert choice.baseline == "tritontest"  # the fixture's routes
        assert choice.chain[-1] == "cpu" and set(choice.chain) == {"tritontest", "boxing", "cpu"}
    assert '"aten::neg" = [' in result.routes_text()


def test_shadow_checks_the_foreign_provider(test_library) -> None:
    shadow.enable("aten::neg", rate=1.0)
    try:
        x = torch.randn(32)
        torch.testing.assert_close((-x.to("flagos")).cpu(), -x)
        row = routing.stats()["aten::neg"]["tritontest"]
        assert row["shadowed"] == 1 and row["mismatches"] == 0
    finally:
        shadow.disable(clear=True)
