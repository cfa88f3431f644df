"""A TinyLlama training step on opaque memory (FLAGOS_NO_TWIN=1, the situation of a
chip whose memory no native torch device can address): every op the sim kernel library
serves runs on `native`, the rest on the CPU fallback, and the loss, the gradients and the
updated weights match the same step on the CPU. Run twice: with RMS norm and attention
spelled as elementwise ops and bmm/softmax, and as F.rms_norm and
F.scaled_dot_product_attention, which reach simk's fused kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("flagos_ops_native")

STEP = r"""
import json, sys, torch, flagos
from flagos.models.llama import LlamaConfig, TinyLlama
from flagos_ops_native import statuses
assert flagos.get_device_properties(0).twin_device == "none"
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=96, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_seq_len=16,
                  fused_ops=sys.argv[1] == "fused")
ref = TinyLlama(cfg)
dev = TinyLlama(cfg)
dev.load_state_dict(ref.state_dict())
dev.to("flagos")
tokens = torch.randint(0, cfg.vocab_size, (2, 12))
results = {}
for name, model, t in (("cpu", ref, tokens), ("flagos", dev, tokens.to("flagos"))):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model.loss(t)
    loss.backward()
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters()}
    opt.step()
    results[name] = (loss.item(), grads, {n: p.detach().cpu() for n, p in model.named_parameters()})
(l0, g0, w0), (l1, g1, w1) = results["cpu"], results["flagos"]
assert abs(l0 - l1) < 1e-4, (l0, l1)
for n in g0:
    torch.testing.assert_close(g1[n], g0[n], rtol=1e-3, atol=1e-5, msg=lambda m: n + ": " + m)
    torch.testing.assert_close(w1[n], w0[n], rtol=1e-4, atol=1e-6, msg=lambda m: n + ": " + m)
served = {op for s in statuses() for op in s.served}
stats = flagos.routing.stats()
print(json.dumps({"served": sorted(served), "stats": stats}))
"""


@pytest.mark.parametrize("spelling", ["unfused", "fused"])
def test_tinyllama_step_native_matches_cpu(spelling):
    env = dict(os.environ, FLAGOS_NO_TWIN="1", FLAGOS_HAL="sim")
    proc = subprocess.run([sys.executable, "-c", STEP, spelling], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    stats, served = out["stats"], set(out["served"])
    on_native = {op for op, row in stats.items() if row.get("native", {}).get("calls")}
    # Every op the library serves ran on native, never on the fallback...
    left = {op: row for op, row in stats.items() if op in served and row.get("cpu")}
    assert not left, left
    # ...and that is the bulk of a transformer step's compute.
    expected = ["aten::mm.out", "aten::silu.out", "aten::silu_backward.grad_input",
                "aten::_log_softmax.out", "aten::embedding_dense_backward", "aten::mul.out",
                "aten::add.out"]
    if spelling == "fused":
        expected += ["aten::_fused_rms_norm", "aten::_fused_rms_norm_backward",
                     "aten::_scaled_dot_product_fused_attention_overrideable",
                     "aten::_scaled_dot_product_fused_attention_overrideable_backward"]
        # the decompositions did not run
        assert "aten::rsqrt.out" not in stats and "aten::_softmax.out" not in stats, stats
    else:
        expected += ["aten::bmm.out", "aten::_softmax.out", "aten::_softmax_backward_data.out",
                     "aten::rsqrt.out", "aten::mean.out"]
    for op in expected:
        assert op in on_native, (op, sorted(on_native))
