"""Helpers of flagos-quant's tests (a module of its own name: the test folders of several
packages may run in one pytest process, each with its own conftest)."""

from __future__ import annotations

import flagos


def calls(op: str, provider: str) -> int:
    """How often ``provider`` served ``op`` since the statistics were reset."""
    return flagos.routing.stats().get(op, {}).get(provider, {}).get("calls", 0)


def exact_hal() -> bool:
    """Whether flagos computes with the CPU's kernels here (sim: the CPU twin, or opaque
    memory staged through the CPU), so results equal CPU results bit for bit. On a GPU
    twin the same math runs in other kernels: compared within bf16 tolerance instead."""
    return (flagos.get_device_properties(0).twin_device or "cpu") == "cpu"


def assert_matches_cpu(got, want) -> None:
    """``got`` (from flagos) equals the CPU result ``want``: exactly where flagos runs CPU
    kernels, else within one bf16 rounding of the largest entry per 100 accumulated terms."""
    import torch

    got = got.cpu()
    if exact_hal():
        assert torch.equal(got, want)
    else:
        err = (got.float() - want.float()).abs().max().item()
        assert err <= 1e-2 * want.float().abs().max().item(), err


def load(path, **kw):
    """``AutoModelForCausalLM.from_pretrained(path, **kw)`` in eval mode."""
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(str(path), **kw).eval()


def rel_l2(a, b) -> float:
    """Relative L2 error of ``a`` against ``b``."""
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def greedy(model, ids):
    """8 greedily generated tokens after ``ids``, on CPU."""
    import torch

    return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8,
                          do_sample=False)[:, ids.shape[1]:].cpu()


def load_onto_flagos_exactly(path):
    """The model at ``path`` loaded with ``device_map="flagos"``, checked to have all its
    tensors on flagos and to have grown the flagos allocator by exactly those tensors
    (each rounded to the allocator's 512-byte blocks): nothing else stays on the device."""
    import gc

    import torch

    gc.collect()  # models of earlier tests still waiting in reference cycles
    torch.flagos.synchronize()
    before = torch.flagos.memory_allocated()
    model = load(path, device_map="flagos")
    torch.flagos.synchronize()
    loaded = torch.flagos.memory_allocated() - before
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}.values()
    assert all(t.device.type == "flagos" for t in tensors)
    own = sum(-(-t.untyped_storage().nbytes() // 512) * 512 for t in tensors)
    assert loaded == own, f"the load took {loaded} bytes, its tensors {own}"
    return model
