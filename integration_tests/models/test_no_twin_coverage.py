"""Without a twin, every call of the benchmarked models has a kernel on the device: each is
served by FlagGems 5.0 (Hopper kernels, as the cuda HAL loads it) or by one of
flagos-ops-gems' own kernels, and none is left for the CPU fallback. Read on sim by
``no_twin_coverage.py`` (FlagGems' table and guards, no FlagGems kernel run)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("flag_gems") is None,
                                reason="FlagGems is not installed")

# flagos.bench's Llama training step; the zoo's Llama, Mixtral (mixture of experts), Diffusers
# UNet, VAE decoder, Flux and Qwen-Image transformer forwards; its DDIM and Qwen-Image
# pipelines, whole (text to image, and from a condition image through a vision encoder)
CASES = ["tinyllama", "Llama", "Mixtral", "UNet2DModel", "AutoencoderKL decode",
         "Flux transformer (MMDiT)", "QwenImage21 transformer", "DDIMPipeline (UNet2DModel)",
         "QwenImage21Pipeline (text to image)", "QwenImage21Pipeline (condition image)"]


def test_every_call_has_a_kernel_on_the_device_without_a_twin() -> None:
    env = {**os.environ, "FLAGOS_NO_TWIN": "1", "FLAGOS_HAL": "sim", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, str(Path(__file__).with_name("no_twin_coverage.py")),
                        *CASES], capture_output=True, text=True, env=env, timeout=600,
                       check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    report = json.loads(r.stdout[r.stdout.index("{"):])
    for case in CASES:
        verdicts = report[case]
        assert verdicts["declined"] == {} and verdicts["cpu"] == {}, (case, verdicts)
        assert sum(verdicts["served"].values()) > 50, (case, verdicts)
    # the own kernels are what makes it so
    assert report["tinyllama"]["own"].keys() >= {"aten::mul.Tensor", "aten::nll_loss_backward"}
    assert "aten::native_group_norm" in report["UNet2DModel"]["own"]
    assert "aten::index.Tensor" in report["QwenImage21 transformer"]["own"]
    assert report["Mixtral"]["own"].keys() >= {"aten::histc", "aten::_grouped_mm", "aten::cumsum"}
