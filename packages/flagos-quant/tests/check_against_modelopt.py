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
import sys
from pathlib import Path

import make_checkpoints as mc
import torch


def _configs(d: Path) -> tuple[dict, dict]:
    qc = json.loads((d / "config.json").read_text())["quantization_config"]
    hf = json.loads((d / "hf_quant_config.json").read_text())
    qc.pop("producer", None)
    hf.pop("producer", None)
    return qc, hf


def main(out: Path) -> int:
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint

    recipes = {"modelopt-fp8": mtq.FP8_DEFAULT_CFG, "modelopt-nvfp4": mtq.NVFP4_DEFAULT_CFG}
    failures = 0
    for fmt in mc.MODELOPT_FORMATS:
        mc.write(out, fmt)
        model = mc.base_model()
        calib = torch.randint(3, mc.VOCAB, (4, 32), generator=torch.Generator().manual_seed(1))

        def forward(m, calib=calib):
            with torch.no_grad():
                m(calib)
        model = mtq.quantize(model, recipes[fmt], forward)
        theirs_dir = out / f"{fmt}-modelopt"
        with torch.inference_mode():
            export_hf_checkpoint(model, export_dir=str(theirs_dir))
        count, bad = mc.differing_tensors(out / fmt, theirs_dir)
        same_config = _configs(out / fmt) == _configs(theirs_dir)
        failures += mc.report(fmt, count, bad, same_config, "producer")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(main(Path(sys.argv[1])))
