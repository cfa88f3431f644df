"""gpt-oss MXFP4 experts: dequantization bit for bit against transformers' own rule, the
experts' forward against transformers' ``GptOssExperts`` on the dequantized weights, and
the tiny checkpoint (make_mxfp4_checkpoint.py) loaded with unchanged transformers code,
``from_pretrained(path, device_map="flagos")``: experts stay packed on the device (measured
with the flagos allocator), logits and greedy generation agree with the dequantized bf16
reference on CPU, a bad config is a clear error naming the field, and loads not onto
flagos are transformers' own."""

from __future__ import annotations

import gc
import json
import shutil
from pathlib import Path

import pytest
import reference_rules as ref
import torch
from flagos_quant import QuantConfigError
from flagos_quant.mxfp4_moe import Mxfp4Experts, dequantize_mxfp4
from flagos_quant.quantize import quantize_mxfp4
from quant_testing import exact_hal

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # device_map= needs it
from transformers.integrations.mxfp4 import convert_moe_packed_tensors
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

IDS = torch.randint(3, 256, (2, 12), generator=torch.Generator().manual_seed(5))
EXPERTS_PER_LAYER, LAYERS = 4, 2


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import make_mxfp4_checkpoint

    out = tmp_path_factory.mktemp("mxfp4")
    make_mxfp4_checkpoint.write(out)
    return out


def _load(path: Path, **kw):
    return transformers.AutoModelForCausalLM.from_pretrained(str(path), **kw).eval()


def _greedy(model, ids: torch.Tensor) -> torch.Tensor:
    return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8,
                          do_sample=False)[:, ids.shape[1]:].cpu()


def _random_experts(experts: int, rows: int, cols: int, seed: int):
    """Blocks with every byte value and scales with every finite E8M0 byte (0-254)."""
    g = torch.Generator().manual_seed(seed)
    blocks = torch.randint(0, 256, (experts, rows, cols // 32, 16), dtype=torch.uint8, generator=g)
    scales = torch.randint(0, 255, (experts, rows, cols // 32), dtype=torch.uint8, generator=g)
    return blocks, scales


@pytest.mark.parametrize("device", ["cpu", "flagos"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_dequantization_bit_exact_against_transformers(device, dtype) -> None:
    """transformers' rule (``convert_moe_packed_tensors``: E2M1 table, ``ldexp`` by
    ``byte - 127``, transposed to [experts, in, out]) bit for bit, every E2M1 code and
    every finite scale byte; 0xFF, NaN by the MX spec, is not a scale checkpoints hold."""
    blocks, scales = _random_experts(3, 40, 96, seed=0)
    blocks[0, 0, 0] = torch.arange(16, dtype=torch.uint8) * 17  # every nibble, both halves
    scales[0, :, 0] = torch.arange(40, dtype=torch.uint8)  # the subnormal float32 scales
    want = convert_moe_packed_tensors(blocks, scales, dtype=dtype).transpose(1, 2)
    got = dequantize_mxfp4(blocks.to(device), scales.to(device)).to(dtype).cpu()
    bits = torch.int16 if dtype == torch.bfloat16 else torch.int32  # -0 != +0
    assert torch.equal(got.view(bits), want.contiguous().view(bits))
    # and the format written out from its bit layout
    e8m0 = scales[1, :4].view(torch.float8_e8m0fnu)
    rule = ref.fp4_block(blocks[1, :4].reshape(4, 48), e8m0, 32, None)
    assert torch.equal(dequantize_mxfp4(blocks[1, :4], scales[1, :4]), rule)


def test_quantize_mxfp4_rule() -> None:
    """Power-of-two scale amax / 6 rounded up (6 at amax = 6 * 2^k exactly), ties away."""
    x = torch.tensor([[6.0, 5.0, 0.25, -0.75, 1.25] + [0.0] * 27,
                      [12.1, 0.0, 3.0] + [0.0] * 29])
    packed, scale = quantize_mxfp4(x)
    assert scale.view(torch.uint8).tolist() == [[127], [129]]  # 2^0; 12.1 / 6 -> 2^2
    d = dequantize_mxfp4(packed.reshape(2, 1, 16), scale).tolist()
    assert d[0][:5] == [6.0, 6.0, 0.5, -1.0, 1.5]  # 5 -> 6, 0.25 -> 0.5, ... (away)
    assert d[1][:3] == [12.0, 0.0, 4.0]  # 3 / 4 = 0.75 -> 1.0


@pytest.mark.parametrize("impl", ["eager", "grouped_mm"])
@pytest.mark.parametrize("device", ["cpu", "flagos"])
def test_experts_match_gpt_oss_experts(device, impl, monkeypatch) -> None:
    """Mxfp4Experts on flagos equals transformers' GptOssExperts (its eager loop and its
    grouped_mm path) on the dequantized bf16 weights, and dequantizes only the experts
    that tokens are routed to."""
    cfg = transformers.GptOssConfig(num_local_experts=6, hidden_size=64, intermediate_size=96,
                                    num_experts_per_tok=2, swiglu_limit=3.0)
    cfg._experts_implementation = impl
    packed = Mxfp4Experts.from_config(cfg)
    assert (packed.alpha, packed.limit) == (1.702, 3.0)
    want_mod = GptOssExperts(cfg).to(torch.bfloat16)
    want_mod.limit = cfg.swiglu_limit  # transformers 5.17 hard-codes 7 in GptOssExperts
    g = torch.Generator().manual_seed(3)
    for i, (proj, rows, cols) in enumerate((("gate_up_proj", 192, 64), ("down_proj", 64, 96))):
        w = torch.randn(6, rows, cols, generator=g) * 0.3
        q, s = quantize_mxfp4(w)
        blocks, scales = q.reshape(6, rows, cols // 32, 16), s.view(torch.uint8)
        bias = (torch.randn(6, rows, generator=g) * 0.5).bfloat16()
        getattr(packed, f"{proj}_blocks").data = blocks
        getattr(packed, f"{proj}_scales").data = scales
        getattr(packed, f"{proj}_bias").data = bias
        getattr(want_mod, proj).data = convert_moe_packed_tensors(blocks, scales)
        getattr(want_mod, f"{proj}_bias").data = bias.clone()
    x = (torch.randn(9, 64, generator=g) * 2).bfloat16()
    idx = torch.tensor([[0, 2], [2, 0], [5, 2]] * 3)  # experts 1, 3 and 4 get no token
    weights = torch.softmax(torch.randn(9, 2, generator=g), -1).bfloat16()
    with torch.no_grad():
        want = want_mod(x, idx, weights)
        assert want.abs().max() > 0
        seen = []
        real = Mxfp4Experts.dequantized_weight
        monkeypatch.setattr(Mxfp4Experts, "dequantized_weight",
                            lambda self, proj, e, dtype: seen.append(e) or real(self, proj, e, dtype))
        got = packed.to(device)(x.to(device), idx.to(device), weights.to(device)).cpu()
    assert sorted(set(seen)) == [0, 2, 5] and len(seen) == 6
    if device == "cpu" or exact_hal():
        assert torch.equal(got, want)
    else:
        assert (got.float() - want.float()).abs().max() <= 1e-2 * want.float().abs().max()


def test_experts_stay_packed_on_flagos(checkpoint: Path) -> None:
    gc.collect()  # earlier tests' flagos tensors are not freed while this one measures
    torch.flagos.synchronize()
    before = torch.flagos.memory_allocated()
    model = _load(checkpoint / "gpt-oss-mxfp4", device_map="flagos")
    torch.flagos.synchronize()
    loaded = torch.flagos.memory_allocated() - before
    experts = [m for m in model.modules() if isinstance(m, Mxfp4Experts)]
    assert len(experts) == LAYERS
    assert not any(isinstance(m, GptOssExperts) for m in model.modules())
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}.values()
    assert all(t.device.type == "flagos" for t in tensors)
    # every byte on the device is the checkpoint's own tensors, as stored (the allocator
    # rounds each block to 512 bytes)
    assert loaded == sum(-(-t.untyped_storage().nbytes() // 512) * 512 for t in tensors)
    for m in experts:
        weights = 0
        for proj, (rows, cols) in {"gate_up_proj": (2 * m.intermediate_size, m.hidden_size),
                                   "down_proj": (m.hidden_size, m.intermediate_size)}.items():
            blocks, scales = getattr(m, f"{proj}_blocks"), getattr(m, f"{proj}_scales")
            assert blocks.dtype == scales.dtype == torch.uint8
            n = EXPERTS_PER_LAYER * rows * cols
            # 4 bits a weight and one byte per 32: 0.53125 byte per weight
            assert blocks.untyped_storage().nbytes() + scales.untyped_storage().nbytes() == \
                n * 17 // 32
            weights += n
        assert weights == EXPERTS_PER_LAYER * 3 * m.hidden_size * m.intermediate_size


def test_logits_and_greedy_generation_against_bf16_reference(checkpoint: Path) -> None:
    """The experts compute on the reference's very bf16 weights in the same order of
    operations: logits equal the reference on CPU bit for bit where flagos runs CPU
    kernels, else within 2% relative L2 (bf16 arithmetic in other kernels: the reference
    itself is 1.5% from its float32 run)."""
    ref_model = _load(checkpoint / "gpt-oss-mxfp4-bf16")
    model = _load(checkpoint / "gpt-oss-mxfp4", device_map="flagos")
    with torch.no_grad():
        want = ref_model(IDS).logits
        got = model(IDS.to("flagos")).logits.cpu()
        rel = ((got.float() - want.float()).norm() / want.float().norm()).item()
        assert rel < 0.02, rel
        if exact_hal():
            assert torch.equal(got, want)
            assert torch.equal(_greedy(model, IDS.to("flagos")), _greedy(ref_model, IDS))


@pytest.mark.parametrize(("change", "field"), [
    ({"modules_to_not_convert": 3}, "quantization_config.modules_to_not_convert"),
    ({"modules_to_not_convert": ["lm_head", 7]}, "quantization_config.modules_to_not_convert"),
    ({"dequantize": "yes"}, "quantization_config.dequantize"),
    ({"modules_to_not_convert": ["model.layers"]}, "quantization_config.quant_method"),
])
def test_bad_config_names_the_field(checkpoint: Path, tmp_path: Path, change, field) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(checkpoint / "gpt-oss-mxfp4", bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["quantization_config"].update(change)
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(QuantConfigError, match=f"^{field}: ") as e:
        _load(bad, device_map="flagos")
    assert e.value.field == field.removeprefix("quantization_config.")


def test_loads_not_onto_flagos_are_transformers_own(checkpoint: Path) -> None:
    """device_map="cpu", and dequantize=True onto flagos, run transformers' own mxfp4
    code: here (no Triton MoE kernels) the experts dequantized to bf16 GptOssExperts, the
    very weights of the reference."""
    ref_model = _load(checkpoint / "gpt-oss-mxfp4-bf16")
    cpu = _load(checkpoint / "gpt-oss-mxfp4", device_map="cpu")
    deq = _load(checkpoint / "gpt-oss-mxfp4", device_map="flagos",
                quantization_config=transformers.Mxfp4Config(dequantize=True))
    for model in (cpu, deq):
        assert not any(isinstance(m, Mxfp4Experts) for m in model.modules())
        experts = model.model.layers[0].mlp.experts
        assert isinstance(experts, GptOssExperts)
        assert torch.equal(experts.gate_up_proj.cpu(),
                           ref_model.model.layers[0].mlp.experts.gate_up_proj)
    assert deq.model.layers[0].mlp.experts.gate_up_proj.device.type == "flagos"
    with torch.no_grad():
        assert torch.equal(cpu(IDS).logits, ref_model(IDS).logits)


def test_save_pretrained_writes_the_checkpoint_back(checkpoint: Path, tmp_path: Path) -> None:
    """The packed modules hold the checkpoint's own tensors under its names: saving the
    model loaded onto flagos writes every tensor of the checkpoint back as it was."""
    from safetensors.torch import load_file

    model = _load(checkpoint / "gpt-oss-mxfp4", device_map="flagos")
    model.save_pretrained(tmp_path / "saved")
    want = load_file(checkpoint / "gpt-oss-mxfp4" / "model.safetensors")
    got = load_file(tmp_path / "saved" / "model.safetensors")
    assert sorted(got) == sorted(want)
    assert all(got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]) for k in want)
    cfg = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "mxfp4"
