"""Where accelerate and torch put a model, on flagos: a ``device_map`` over two flagos
devices (model parallelism), one that offloads layers to the CPU and to disk (accelerate
brings their weights to flagos at each forward), a checkpoint loaded by accelerate's
``load_checkpoint_and_dispatch``, a model built under ``with
torch.device("flagos")`` and under ``torch.set_default_device("flagos")``; each matches
the CPU."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from transformers_zoo import _lm_inputs, llama

torch.manual_seed(1)
INPUTS = _lm_inputs()  # random tokens: made once


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny Llama (two layers) saved as safetensors, its state, and its CPU logits on
    INPUTS."""
    torch.manual_seed(0)
    model = llama()
    assert model.config.num_hidden_layers == 2
    path = tmp_path_factory.mktemp("llama")
    model.save_pretrained(path)
    on_cpu = transformers.AutoModelForCausalLM.from_pretrained(path)  # as loaded: eval mode
    return path, on_cpu.state_dict(), on_cpu(**INPUTS).logits.detach()


def _logits(model, device: str) -> torch.Tensor:
    return model(**{k: v.to(device) for k, v in INPUTS.items()}).logits.detach().cpu()


def test_a_device_map_over_two_flagos_devices(checkpoint) -> None:
    if torch.flagos.device_count() < 2:
        pytest.skip("needs two flagos devices")
    path, _, want = checkpoint
    device_map = {"model.embed_tokens": "flagos:0", "model.layers.0": "flagos:0",
                  "model.layers.1": "flagos:1", "model.norm": "flagos:1",
                  "model.rotary_emb": "flagos:1", "lm_head": "flagos:1"}
    model = transformers.AutoModelForCausalLM.from_pretrained(path, device_map=device_map)
    assert model.model.layers[0].mlp.up_proj.weight.device == torch.device("flagos", 0)
    assert model.lm_head.weight.device == torch.device("flagos", 1)
    torch.testing.assert_close(_logits(model, "flagos:0"), want, rtol=1e-4, atol=1e-5)


def test_layers_offloaded_to_the_cpu_and_to_disk_run_on_flagos(checkpoint, tmp_path) -> None:
    path, _, want = checkpoint
    device_map = {"model.embed_tokens": "flagos:0", "model.layers.0": "cpu",
                  "model.layers.1": "disk", "model.norm": "flagos:0",
                  "model.rotary_emb": "flagos:0", "lm_head": "flagos:0"}
    model = transformers.AutoModelForCausalLM.from_pretrained(path, device_map=device_map,
                                                              offload_folder=tmp_path)
    # offloaded: the weights stay off the device between forwards
    assert model.model.layers[1].mlp.up_proj.weight.device == torch.device("meta")
    for _ in range(2):
        torch.testing.assert_close(_logits(model, "flagos:0"), want, rtol=1e-4, atol=1e-5)


def test_a_checkpoint_loaded_onto_flagos_by_accelerate(checkpoint) -> None:
    from accelerate import init_empty_weights, load_checkpoint_and_dispatch

    path, _, want = checkpoint
    with init_empty_weights():
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.from_pretrained(path))
    model = load_checkpoint_and_dispatch(model, str(path / "model.safetensors"),
                                         device_map={"": "flagos:0"}).eval()
    assert {p.device for p in model.parameters()} == {torch.device("flagos", 0)}
    torch.testing.assert_close(_logits(model, "flagos:0"), want, rtol=1e-4, atol=1e-5)


def test_a_model_built_under_a_flagos_device_context(checkpoint) -> None:
    _, state, want = checkpoint
    with torch.device("flagos"):
        model = llama().eval()
    assert {p.device.type for p in model.parameters()} == {"flagos"}
    model.load_state_dict(state)
    torch.testing.assert_close(_logits(model, "flagos"), want, rtol=1e-4, atol=1e-5)


def test_a_model_built_with_flagos_the_default_device(checkpoint) -> None:
    _, state, want = checkpoint
    torch.set_default_device("flagos")
    try:
        assert torch.zeros(2).device.type == "flagos"
        model = llama().eval()
        model.load_state_dict(state)
        got = _logits(model, "flagos")
    finally:
        torch.set_default_device(None)
    assert {p.device.type for p in model.parameters()} == {"flagos"}
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
