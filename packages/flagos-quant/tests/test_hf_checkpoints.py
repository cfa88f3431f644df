"""The tiny HF ``fp8`` and compressed-tensors checkpoints (make_hf_checkpoints.py) loaded
with unchanged transformers code: onto flagos (``device_map="flagos"``) they load into
flagos' packed-weight layers (weights stay FP8 / packed FP4, measured with the flagos
allocator; dequantization bit for bit the format's rule; logits near the dequantized bf16
reference; greedy generation equal); loaded anywhere else they go through transformers'
own quantizer, unchanged; a config flagos cannot load is an error naming the field."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch
from flagos_quant import FP8BlockLinear, QuantConfigError, QuantLinear, set_weight_only
from flagos_quant.ct_modules import CTFP8Linear, CTNVFP4Linear
from make_hf_checkpoints import ct_config
from quant_testing import calls, exact_hal, greedy, load, load_onto_flagos_exactly, rel_l2
from reference_rules import fp4_over_global, fp8_block

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # device_map= needs it
HAS_CT = importlib.util.find_spec("compressed_tensors") is not None
# transformers before 5.23 handles compressed-tensors checkpoints itself where later ones
# leave them to the quantizer: it dequantizes one whose status is not "compressed" (so a
# bad status never reaches flagos' check) and keeps the scales in a dequantized model's
# state dict. Found by the oldest allowed releases (nox -s libraries).
TRANSFORMERS_5_23 = pytest.mark.skipif(
    tuple(int(x) for x in transformers.__version__.split(".")[:2]) < (5, 23),
    reason="transformers < 5.23 dequantizes compressed-tensors checkpoints itself")
# format: (layer class, bytes per weight of the packed weight and its block scales, op)
FORMATS = {
    "hf-fp8": (FP8BlockLinear, 1.0, "aten::_scaled_mm"),
    "ct-fp8-dynamic": (CTFP8Linear, 1.0, "aten::_scaled_mm"),
    "ct-fp8-static": (CTFP8Linear, 1.0, "aten::_scaled_mm"),
    "ct-nvfp4": (CTNVFP4Linear, 0.5625, "aten::_scaled_mm_v2"),
}
# relative L2 of the logits in the format's activation scheme vs the bf16 reference (the
# error of quantizing a random model's activations: 3 mantissa bits, or 1 for FP4)
SCHEME_BOUND = {"hf-fp8": 0.25, "ct-fp8-dynamic": 0.25, "ct-fp8-static": 0.25, "ct-nvfp4": 0.5}
IDS = torch.randint(3, 256, (2, 12), generator=torch.Generator().manual_seed(5))


def _packed_bytes(m: QuantLinear) -> int:
    """Bytes of the packed weight and its per-16 scales (NVFP4) or of the FP8 weight."""
    names = ("weight_packed", "weight_scale") if isinstance(m, CTNVFP4Linear) else ("weight",)
    return sum(getattr(m, n).untyped_storage().nbytes() for n in names)


@pytest.mark.parametrize("fmt", FORMATS)
def test_weights_stay_packed_on_flagos(checkpoints: Path, fmt: str, stats) -> None:
    layer_type, bytes_per_weight, op = FORMATS[fmt]
    # every byte the load takes on the device is the checkpoint's own tensors, as stored
    model = load_onto_flagos_exactly(checkpoints / fmt)
    layers = [m for m in model.modules() if isinstance(m, layer_type)]
    assert len(layers) == 14  # 7 per decoder layer; lm_head is in the ignore list
    assert type(model.lm_head) is torch.nn.Linear
    for m in layers:
        assert _packed_bytes(m) == m.in_features * m.out_features * bytes_per_weight
    packed = layers[0].weight_packed if fmt == "ct-nvfp4" else layers[0].weight
    assert packed.dtype == (torch.uint8 if fmt == "ct-nvfp4" else torch.float8_e4m3fn)
    with torch.no_grad():
        model(IDS.to("flagos"))
    assert calls(op, "emulation") == 14


def _rule(m: QuantLinear) -> torch.Tensor:
    """The layer's weight by its format's rule, written out from the bits (reference_rules)."""
    cpu = {n: t.cpu() for n, t in m.named_parameters()}
    if isinstance(m, FP8BlockLinear):
        return fp8_block(cpu["weight"], cpu["weight_scale_inv"], m.block)
    if isinstance(m, CTFP8Linear):
        return fp8_block(cpu["weight"], cpu["weight_scale"],
                         (1, m.in_features) if m.per_channel else None)
    return fp4_over_global(cpu["weight_packed"], cpu["weight_scale"], 16,
                           cpu["weight_global_scale"].item())


@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantization_bit_exact(checkpoints: Path, fmt: str) -> None:
    """On flagos, the weight dequantizes bit for bit by the format's rule (float32), and
    in bf16 to the reference checkpoint's weight."""
    model = load(checkpoints / fmt, device_map="flagos")
    ref = load(checkpoints / f"{fmt}-bf16")
    name = "model.layers.1.mlp.down_proj"
    m = model.get_submodule(name)
    got = m.dequantized_weight(torch.float32).cpu()
    assert torch.equal(got.view(torch.int32), _rule(m).view(torch.int32))
    assert torch.equal(m.dequantized_weight(torch.bfloat16).cpu(),
                       ref.get_submodule(name).weight)


@pytest.mark.parametrize("fmt", FORMATS)
def test_logits_and_greedy_generation(checkpoints: Path, fmt: str) -> None:
    """Weight-only compute multiplies the reference's own bf16 weights: logits within 2%
    relative L2 (bf16 arithmetic); the format's activation scheme within SCHEME_BOUND. In
    float32 compute: weight-only generation equals the reference model's with the
    float32 dequantized weights (the format's rule, bit-exact above), and each layer's
    scheme on flagos equals the same layer on the CPU (within float32 rounding)."""
    ref = load(checkpoints / f"{fmt}-bf16")
    model = load(checkpoints / fmt, device_map="flagos")
    ids = IDS.to("flagos")
    with torch.no_grad():
        want = ref(IDS).logits
        scheme = model(ids).logits.cpu()
        set_weight_only(model)
        weight_only = model(ids).logits.cpu()
    assert rel_l2(weight_only, want) < 0.02
    assert rel_l2(scheme, want) < SCHEME_BOUND[fmt]
    if not exact_hal():
        return
    model = load(checkpoints / fmt, device_map="flagos", dtype=torch.float32)
    ref = load(checkpoints / f"{fmt}-bf16", dtype=torch.float32)
    for name, m in model.named_modules():
        if isinstance(m, QuantLinear):
            ref.get_submodule(name).weight.data = m.dequantized_weight(torch.float32).cpu()
    with torch.no_grad():
        set_weight_only(model)
        assert torch.equal(greedy(model, ids), greedy(ref, IDS))
        set_weight_only(model, False)
        # Each layer's scheme on flagos against the same layer on the CPU given the same
        # input: equal up to float32 summation order (the per-block and per-row scaled
        # matmuls sum their blocks in another order there). Whole-model logits are not
        # compared: a last-bit difference upstream (attention decomposes on flagos where
        # the CPU has a fused kernel) can move an activation across an FP8 rounding step.
        seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        hooks = [m.register_forward_hook(
            lambda m, i, o, n=n: seen.__setitem__(n, (i[0].cpu(), o.cpu())))
            for n, m in model.named_modules() if isinstance(m, QuantLinear)]
        model(ids)
        for h in hooks:
            h.remove()
        model.to("cpu")
        assert len(seen) == 14
        for name, (x, on_flagos) in seen.items():
            assert rel_l2(model.get_submodule(name)(x), on_flagos) < 1e-5, name


def _with_config(checkpoints: Path, tmp_path: Path, fmt: str, change) -> Path:
    bad = tmp_path / "bad"
    shutil.copytree(checkpoints / fmt, bad)
    cfg = json.loads((bad / "config.json").read_text())
    change(cfg["quantization_config"])
    (bad / "config.json").write_text(json.dumps(cfg))
    return bad


def _set(path: str, value):
    def change(qc: dict) -> None:
        *parents, leaf = path.split(".")
        d = qc
        for p in parents:
            d = d[p]
        d[leaf] = value
    return change


@pytest.mark.parametrize(("fmt", "path", "value"), [
    ("hf-fp8", "weight_block_size", [64, 64]),
    ("hf-fp8", "activation_scheme", "static"),
    ("hf-fp8", "fmt", "e5m2"),
    ("hf-fp8", "modules_to_not_convert", "lm_head"),
    ("ct-fp8-dynamic", "ignore", 3),
    ("ct-fp8-dynamic", "config_groups.group_0.format", "int-quantized"),
    ("ct-fp8-dynamic", "config_groups.group_0.weights.strategy", "block"),
    ("ct-fp8-dynamic", "config_groups.group_0.input_activations.strategy", "group"),
    ("ct-nvfp4", "config_groups.group_0.weights.group_size", 32),
    ("ct-nvfp4", "config_groups.group_0.input_activations.dynamic", True),
    ("ct-nvfp4", "kv_cache_scheme", {"num_bits": 8, "type": "float"}),
    pytest.param("ct-nvfp4", "quantization_status", "frozen", marks=TRANSFORMERS_5_23),
    ("hf-fp8", "dequantize", "yes"),
    ("ct-nvfp4", "dequantize", "yes"),
])
def test_bad_config_names_the_field(checkpoints: Path, tmp_path: Path, fmt, path, value) -> None:
    bad = _with_config(checkpoints, tmp_path, fmt, _set(path, value))
    with pytest.raises(QuantConfigError, match=f"^quantization_config.{path}: ") as e:
        load(bad, device_map="flagos")
    assert e.value.field == path


@pytest.mark.skipif(torch.cuda.is_available(), reason="transformers dequantizes FP8 at load "
                    "only where no GPU is available")
def test_hf_fp8_on_cpu_is_transformers_own(checkpoints: Path) -> None:
    """device_map="cpu": transformers' own FP8 quantizer, which dequantizes to bf16 on a
    machine without a GPU: exactly the reference's weights (the fixture's rule is
    transformers' own)."""
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer

    model = load(checkpoints / "hf-fp8", device_map="cpu")
    ref = load(checkpoints / "hf-fp8-bf16")
    assert not any(isinstance(m, QuantLinear) for m in model.modules())
    assert type(getattr(model, "hf_quantizer", None)) in (FineGrainedFP8HfQuantizer, type(None))
    want = ref.state_dict()
    for k, v in model.state_dict().items():
        assert torch.equal(v, want[k]), k


def test_hf_fp8_writer_is_transformers_quantizer(checkpoints: Path) -> None:
    """The fixture's tensors are byte for byte what transformers' own FP8 quantization op
    (``Fp8Quantize``, FineGrainedFP8Config's 128x128 blocks) makes of the bf16 model."""
    import make_checkpoints
    from make_hf_checkpoints import HF_FP8_SIZES
    from safetensors.torch import load_file
    from transformers.integrations.finegrained_fp8 import Fp8Quantize
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer
    from transformers.utils.quantization_config import FineGrainedFP8Config

    quantizer = FineGrainedFP8HfQuantizer(FineGrainedFP8Config(), pre_quantized=False)
    op = Fp8Quantize(quantizer)
    stored = load_file(str(checkpoints / "hf-fp8" / "model.safetensors"))
    model = make_checkpoints.base_model(**HF_FP8_SIZES)
    n = 0
    for k, w in model.state_dict().items():
        if k.endswith("proj.weight"):
            for name, t in op.convert({k: w}).items():
                assert stored[name].dtype == t.dtype and torch.equal(
                    stored[name].view(torch.uint8), t.contiguous().view(torch.uint8)), name
                n += 1
    assert n == 28


@pytest.mark.skipif(not HAS_CT, reason="compressed-tensors is not installed")
@TRANSFORMERS_5_23
@pytest.mark.filterwarnings("ignore:You passed `quantization_config`")  # dequantize=True
@pytest.mark.parametrize("fmt", ["ct-fp8-dynamic", "ct-nvfp4"])
def test_compressed_tensors_on_cpu_is_transformers_own(checkpoints: Path, fmt: str) -> None:
    """device_map="cpu": transformers' own compressed-tensors quantizer (with the
    compressed-tensors package); dequantized by it, the weights are exactly the
    reference's (the fixture follows compressed-tensors' rules)."""
    from transformers import CompressedTensorsConfig
    from transformers.quantizers.quantizer_compressed_tensors import (
        CompressedTensorsHfQuantizer,
    )

    model = load(checkpoints / fmt, device_map="cpu")
    assert type(model.hf_quantizer) is CompressedTensorsHfQuantizer
    assert not any(isinstance(m, QuantLinear) for m in model.modules())
    dense = load(checkpoints / fmt, device_map="cpu",
                  quantization_config=CompressedTensorsConfig(dequantize=True))
    want = load(checkpoints / f"{fmt}-bf16").state_dict()
    for k, v in dense.state_dict().items():
        assert torch.equal(v, want[k]), k


def test_flagos_loads_without_the_compressed_tensors_package(checkpoints: Path,
                                                             monkeypatch) -> None:
    """flagos reads compressed-tensors configs itself; without the package a load onto
    flagos works and any other load fails as transformers fails (its own ImportError)."""
    import transformers.utils.quantization_config as qc

    monkeypatch.setattr(qc, "is_compressed_tensors_available", lambda: False)
    model = load(checkpoints / "ct-nvfp4", device_map="flagos")
    assert sum(isinstance(m, CTNVFP4Linear) for m in model.modules()) == 14
    with pytest.raises(ImportError, match="compressed-tensors"):
        load(checkpoints / "ct-nvfp4", device_map="cpu")


@pytest.mark.parametrize(("device_map", "onto_flagos"), [
    ("flagos", True), ("flagos:0", True), (torch.device("flagos", 0), True),
    ({"": torch.device("flagos")}, True), ({"model": "cpu", "lm_head": "flagos"}, True),
    ({"": 0}, torch.device(0).type == "flagos"),  # an index: the current accelerator's
    ("cpu", False), ({"": "cpu"}, False), ({"": torch.device("cpu")}, False), (None, False),
    ({"model": "disk", "lm_head": "cpu"}, False), ("auto", False), ("balanced", False),
])
def test_which_loads_flagos_takes_over(device_map, onto_flagos) -> None:
    """Automatic placements are not flagos: accelerate resolves them after the quantizer
    is chosen."""
    from flagos_quant.hf_takeover import loads_onto_flagos

    assert loads_onto_flagos(device_map) is onto_flagos


@pytest.mark.parametrize("method", ["fp8", "compressed-tensors", "mxfp4"])
def test_every_method_is_taken_over(method: str) -> None:
    from flagos_quant.transformers_hook import taken_over
    from transformers.quantizers import auto

    assert taken_over[method] == "taken over"
    assert auto.AUTO_QUANTIZER_MAPPING[method].__name__.startswith("FlagosOr")


def test_registry_take_over_is_reversible() -> None:
    from flagos_quant import hf_takeover
    from transformers.quantizers import auto
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer
    from transformers.utils.quantization_config import FineGrainedFP8Config

    assert "modelopt" in auto.AUTO_QUANTIZER_MAPPING
    assert issubclass(auto.AUTO_QUANTIZER_MAPPING["fp8"], FineGrainedFP8HfQuantizer)
    ours = auto.AUTO_QUANTIZER_MAPPING["fp8"]
    assert hf_takeover.restore("fp8")
    try:
        assert auto.AUTO_QUANTIZER_MAPPING["fp8"] is FineGrainedFP8HfQuantizer
        assert auto.AUTO_QUANTIZATION_CONFIG_MAPPING["fp8"] is FineGrainedFP8Config
        assert not hf_takeover.restore("fp8")
    finally:
        from flagos_quant.hf_fp8 import quantizer_class
        from flagos_quant.transformers_hook import TAKEOVERS

        assert hf_takeover.take_over("fp8", quantizer_class(),
                                     config=TAKEOVERS["fp8"][1]) == "taken over"
    assert auto.AUTO_QUANTIZER_MAPPING["fp8"].__name__ == ours.__name__


def test_dequantize_true_onto_flagos_is_transformers_own(checkpoints: Path) -> None:
    """Asking transformers to dequantize keeps its dense bf16 model, also on flagos."""
    from transformers.utils.quantization_config import FineGrainedFP8Config

    model = load(checkpoints / "hf-fp8", device_map="flagos",
                 quantization_config=FineGrainedFP8Config(dequantize=True))
    assert not any(isinstance(m, QuantLinear) for m in model.modules())
    want = load(checkpoints / "hf-fp8-bf16").state_dict()
    for k, v in model.state_dict().items():
        assert v.device.type == "flagos" and torch.equal(v.cpu(), want[k]), k


def test_configs_stay_transformers_own() -> None:
    """A config that transformers' class accepts is an instance of exactly that class,
    with nothing of flagos in what it serialises."""
    from transformers.quantizers.auto import AutoQuantizationConfig
    from transformers.utils.quantization_config import FineGrainedFP8Config

    fields = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
              "weight_block_size": [128, 128]}
    config = AutoQuantizationConfig.from_dict(dict(fields))
    assert type(config) is FineGrainedFP8Config
    assert "flagos" not in json.dumps(config.to_dict())
    from flagos_quant.hf_takeover import checkpoint_fields

    assert checkpoint_fields(config) == fields


@pytest.mark.parametrize("quantization_config", [
    {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
    ct_config("ct-nvfp4"),
])
def test_moe_experts_are_refused(tmp_path: Path, quantization_config: dict) -> None:
    """Fused mixture-of-experts weights have no flagos layer: a clear error before any
    weight loads, not FP8 / FP4 bytes in bf16 parameters."""
    from safetensors.torch import save_file

    cfg = transformers.MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                     num_hidden_layers=1, num_attention_heads=2,
                                     num_key_value_heads=2, num_local_experts=2).to_dict()
    cfg["quantization_config"] = quantization_config
    cfg["architectures"] = ["MixtralForCausalLM"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    save_file({"lm_head.weight": torch.zeros(64, 32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(NotImplementedError, match=r"model\.layers\.0\.mlp\.experts: .*"
                       "mixture-of-experts weights are not supported on flagos"):
        load(tmp_path, device_map="flagos")
