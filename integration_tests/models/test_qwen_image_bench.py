"""The Qwen-Image 2.1 benchmark runs and writes its table (on sim: the quick model)."""

from __future__ import annotations

import json

import pytest


def test_the_benchmark_writes_a_ratio(tmp_path) -> None:
    pytest.importorskip("diffusers")
    import qwen_image_bench

    out = tmp_path / "qwen.json"
    assert qwen_image_bench.main(["--layers", "1", "--quick", "--min-time", "0.05",
                                  "--json", str(out)]) == 0
    table = json.loads(out.read_text())["tables"][0]
    assert table["benchmark"] == "qwen-image"
    row = dict(zip(table["columns"], table["rows"][0]))
    assert row["flagos ms/step"] > 0 and row["native ms/step"] > 0
    assert row["throughput ratio"] == pytest.approx(row["native ms/step"] / row["flagos ms/step"])
    assert "boxing" in table["notes"][-1] or "cpu" in table["notes"][-1]
