"""The tiny ModelOpt checkpoints (make_checkpoints.py) loaded with unchanged transformers
code, ``from_pretrained(path, device_map="flagos")``: weights stay packed on the device
(measured with the flagos allocator), logits agree with the dequantized bf16 reference on
CPU, greedy generation is equal, and a bad config is a clear error naming the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from flagos_quant import FP8Linear, NVFP4Linear, QuantConfigError, set_weight_only
from quant_testing import calls, exact_hal, greedy, load, load_onto_flagos_exactly, rel_l2

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # device_map= needs it
FORMATS = {"modelopt-fp8": (FP8Linear, 1.0), "modelopt-nvfp4": (NVFP4Linear, 0.5625)}
IDS = torch.randint(3, 256, (2, 12), generator=torch.Generator().manual_seed(5))





@pytest.mark.parametrize("fmt", FORMATS)
def test_weights_stay_packed_on_flagos(checkpoints: Path, fmt: str, stats) -> None:
    layer_type, bytes_per_weight = FORMATS[fmt]
    # every byte the load takes on the device is the checkpoint's own tensors, as stored
    model = load_onto_flagos_exactly(checkpoints / fmt)
    layers = [m for m in model.modules() if isinstance(m, layer_type)]
    assert len(layers) == 14  # 7 per decoder layer; lm_head is in "ignore"
    assert type(model.lm_head) is torch.nn.Linear
    for m in layers:
        stored = sum(t.untyped_storage().nbytes() for n, t in m.named_parameters()
                     if n.startswith("weight"))
        scalar = 4  # the float32 per-tensor scale (FP8) or global scale (NVFP4)
        assert stored - scalar == m.in_features * m.out_features * bytes_per_weight
    assert layers[0].weight.dtype == (torch.float8_e4m3fn if fmt == "modelopt-fp8"
                                      else torch.uint8)
    with torch.no_grad():
        model(IDS.to("flagos"))
    op = "aten::_scaled_mm" if fmt == "modelopt-fp8" else "aten::_scaled_mm_v2"
    assert calls(op, "emulation") == 14


@pytest.mark.parametrize("fmt", FORMATS)
def test_logits_against_dequantized_bf16_reference(checkpoints: Path, fmt: str) -> None:
    """Weight-only compute multiplies the very bf16 weights of the reference: within 2%
    relative L2 (bf16 arithmetic: the reference itself is 1.5% from its float32 run). The
    format's own activation quantization (FP8 per tensor, NVFP4 per 16) adds its error:
    within 20% (FP8) and 50% (NVFP4) on this random model; dropping a scale gives ~100%."""
    ref = load(checkpoints / f"{fmt}-bf16")
    model = load(checkpoints / fmt, device_map="flagos")
    with torch.no_grad():
        want = ref(IDS).logits
        scheme = model(IDS.to("flagos")).logits.cpu()
        set_weight_only(model)
        weight_only = model(IDS.to("flagos")).logits.cpu()
    assert rel_l2(weight_only, want) < 0.02
    assert rel_l2(scheme, want) < (0.2 if fmt == "modelopt-fp8" else 0.5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_greedy_generation_equal(checkpoints: Path, fmt: str) -> None:
    """In float32 compute: the format's scheme on flagos equals the same model on CPU (the
    emulation's own arithmetic) logit for logit and token for token; weight-only on flagos
    generates what the dequantized reference generates."""
    if not exact_hal():
        pytest.skip("token-for-token equality with CPU holds where flagos runs CPU kernels")
    kw = {"dtype": torch.float32}
    cpu = load(checkpoints / fmt, **kw)
    model = load(checkpoints / fmt, device_map="flagos", **kw)
    ids = IDS.to("flagos")
    with torch.no_grad():
        assert torch.equal(model(ids).logits.cpu(), cpu(IDS).logits)
        assert torch.equal(greedy(model, ids), greedy(cpu, IDS))
        set_weight_only(model)
        ref = load(checkpoints / f"{fmt}-bf16", **kw)
        assert torch.equal(greedy(model, ids), greedy(ref, IDS))


@pytest.mark.parametrize(("change", "field"), [
    ({"quant_algo": "W4A8_AWQ"}, "quantization_config.quant_algo"),
    ({"quant_algo": None}, "quantization_config.quant_algo"),
    ({"group_size": 32}, "quantization_config.group_size"),
    ({"kv_cache_scheme": {"type": "float", "num_bits": 8}}, "quantization_config.kv_cache_scheme"),
    ({"ignore": 3}, "quantization_config.ignore"),
])
def test_bad_config_names_the_field(checkpoints: Path, tmp_path: Path, change, field) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(checkpoints / "modelopt-nvfp4", bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["quantization_config"].update(change)
    if change.get("quant_algo", "") is None:
        del cfg["quantization_config"]["quant_algo"]
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(QuantConfigError, match=f"^{field}: ") as e:
        load(bad, device_map="flagos")
    assert e.value.field == field.removeprefix("quantization_config.")
