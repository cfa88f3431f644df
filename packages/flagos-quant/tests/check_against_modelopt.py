"""Checks make_checkpoints.py against NVIDIA ModelOpt's own exporter, tensor for tensor and
byte for byte (not part of the test suite: it needs nvidia-modelopt, which needs no GPU
but brings dependencies the suite does not install). In a throwaway environment:

    python3 -m venv /tmp/mo && echo torch==2.13.0 > /tmp/mo/c.txt
    /tmp/mo/bin/pip install -c /tmp/mo/c.txt torch==2.13.0 "transformers>=5.17,<5.24" \\
        safetensors requests omegaconf pulp scipy nvidia-ml-py
    /tmp/mo/bin/pip install --no-deps nvidia-modelopt==0.47.0
    PYTHONPATH=packages/flagos-quant/python /tmp/mo/bin/python \\
        packages/flagos-quant/tests/check_against_modelopt.py OUT_DIR

It writes OUT_DIR/<format> with make_checkpoints.py and OUT_DIR/<format>-modelopt by
quantizing the same seeded model with ``mtq.FP8_DEFAULT_CFG`` / ``mtq.NVFP4_DEFAULT_CFG``
on the same calibration batch and ``export_hf_checkpoint``; exits 1 on any difference
(tensor names, dtypes, shapes, bytes, or the quantization configs apart from "producer").
"""

from __future__ import annotations

import json
from pathlib import Path

import make_checkpoints as mc
import tool_check
import torch


def _configs(d: Path) -> tuple[dict, dict]:
    qc = json.loads((d / "config.json").read_text())["quantization_config"]
    hf = json.loads((d / "hf_quant_config.json").read_text())
    qc.pop("producer", None)
    hf.pop("producer", None)
    return qc, hf


def export(fmt: str, out: Path) -> Path:
    """ModelOpt's own export of ``fmt`` (quantized on the same calibration batch)."""
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint

    recipe = {"modelopt-fp8": mtq.FP8_DEFAULT_CFG, "modelopt-nvfp4": mtq.NVFP4_DEFAULT_CFG}[fmt]
    calib = torch.randint(3, mc.VOCAB, (4, 32), generator=torch.Generator().manual_seed(1))

    def forward(m):
        with torch.no_grad():
            m(calib)
    model = mtq.quantize(mc.base_model(), recipe, forward)
    theirs = out / f"{fmt}-modelopt"
    with torch.inference_mode():
        export_hf_checkpoint(model, export_dir=str(theirs))
    return theirs


def main(out: Path) -> int:
    return tool_check.compare(out, mc.MODELOPT_FORMATS, export, _configs, "producer")


if __name__ == "__main__":
    tool_check.run(__doc__, main)
