"""Checks make_hf_checkpoints.py's compressed-tensors fixtures against llm-compressor's own
export (``oneshot`` with the ``FP8_DYNAMIC``, ``FP8`` and ``NVFP4`` schemes on the same
seeded model and calibration tokens), tensor for tensor and byte for byte. Not part of the
test suite (llm-compressor brings dependencies the suite does not install); it runs on a
CPU machine. In a throwaway environment:

    python3 -m venv /tmp/llmc && echo torch==2.13.0 > /tmp/llmc/c.txt
    /tmp/llmc/bin/pip install -c /tmp/llmc/c.txt torch==2.13.0 llmcompressor==0.14.0.1 \\
        accelerate
    PYTHONPATH=packages/flagos-quant/python /tmp/llmc/bin/python \\
        packages/flagos-quant/tests/check_against_llmcompressor.py OUT_DIR

It writes OUT_DIR/<format> with make_checkpoints.py and OUT_DIR/<format>-llmcompressor
with llm-compressor, and exits 1 on any difference in tensor names, dtypes, shapes or
bytes, or in the quantization configs (apart from ``version``).

Verified with llmcompressor 0.14.0.1, compressed-tensors 0.19.0, transformers 5.17.0 and
torch 2.13.0 (CPU): ``ct-fp8-dynamic`` equal in all 35 tensors; ``ct-fp8-static`` and
``ct-nvfp4`` equal in every weight, weight scale and global weight scale and in every
static input scale except those of the two ``mlp.down_proj`` layers (2 of 49 and 2 of 63
tensors: llm-compressor's calibration sees a down_proj input amax about 0.5% below the
bf16 model's own forward, e.g. 36.1 against 36.25), which this script reports as
differences.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import make_checkpoints as mc
import tool_check
import torch

SCHEMES = {"ct-fp8-dynamic": "FP8_DYNAMIC", "ct-fp8-static": "FP8", "ct-nvfp4": "NVFP4"}


def _config(d: Path) -> dict:
    qc = json.loads((d / "config.json").read_text())["quantization_config"]
    qc.pop("version", None)
    return qc


def _tokenizer():
    """A word-level tokenizer over the model's 256 ids (oneshot wants a processor)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    t = Tokenizer(models.WordLevel({str(i): i for i in range(mc.VOCAB)}, unk_token="0"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=t, unk_token="0", pad_token="0",
                                   bos_token="1", eos_token="2")


def export(fmt: str, out: Path) -> Path:
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM

    base = Path(tempfile.mkdtemp()) / "base"
    tok = _tokenizer()
    mc.base_model().save_pretrained(base)
    tok.save_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)
    ids = torch.randint(3, mc.VOCAB, (4, 32), generator=torch.Generator().manual_seed(1))
    ds = Dataset.from_dict({"input_ids": ids.tolist(),
                            "attention_mask": torch.ones_like(ids).tolist()})
    recipe = QuantizationModifier(targets="Linear", scheme=SCHEMES[fmt], ignore=["lm_head"])
    theirs = out / f"{fmt}-llmcompressor"
    oneshot(model=model, dataset=ds, recipe=recipe, processor=tok, num_calibration_samples=4,
            max_seq_length=32, output_dir=str(theirs))
    return theirs


def main(out: Path) -> int:
    return tool_check.compare(out, SCHEMES, export, _config, "version")


if __name__ == "__main__":
    tool_check.run(__doc__, main)
