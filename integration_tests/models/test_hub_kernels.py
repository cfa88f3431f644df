"""transformers' hub kernels on flagos: a checkpoint loaded with ``device_map="flagos"``
and a model moved there and switched to training run the model's own PyTorch layers
(the ``kernels`` library knows no flagos device), and match the CPU."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("kernels", reason="transformers' hub kernels need the kernels package "
                                      "(a dependency of transformers 5.24 and newer)")

from transformers_zoo import _lm_inputs, llama


def test_from_pretrained_onto_flagos_and_train(tmp_path):
    torch.manual_seed(0)
    llama().save_pretrained(tmp_path)
    inputs = _lm_inputs()
    on_cpu = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    want = on_cpu(**inputs).logits
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, device_map="flagos")
    assert model.device.type == "flagos" and not model.use_kernels
    got = model(**{k: v.to("flagos") for k, v in inputs.items()}).logits
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    moved = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).to("flagos")
    moved.train()  # switching modes re-kernelizes in transformers: declines on flagos
    loss = moved(**{k: v.to("flagos") for k, v in inputs.items()}).loss
    loss.backward()
    assert torch.isfinite(loss.detach().cpu())
