"""transformers' hub kernels on flagos: a checkpoint loaded with ``device_map="flagos"``
and a model moved there and switched to training run the model's own PyTorch layers
(the ``kernels`` library knows no flagos device), and match the CPU."""

from __future__ import annotations

import subprocess
import sys

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


def test_a_device_map_of_indices_is_the_flagos_device(tmp_path):
    # accelerate's and transformers' tests name devices by index ({"": 0}, max_memory={0: ..}):
    # an index is the current accelerator's, flagos here.
    torch.manual_seed(0)
    llama().save_pretrained(tmp_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, device_map={"": 0})
    assert model.device.type == "flagos" and not model.use_kernels


def test_hub_kernels_decline_when_transformers_imports_torch_first(tmp_path):
    # transformers' modeling_utils imports torch, which loads flagos half-way through it.
    code = ("import transformers.modeling_utils as mu\n"
            "import transformers.integrations.hub_kernels as hk\n"
            "assert mu.kernelize._flagos_declines and hk.kernelize is mu.kernelize\n")
    done = subprocess.run([sys.executable, "-c", code], check=False,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
