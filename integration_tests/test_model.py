"""A real model, no code changes: small Llama- and GPT-style transformers built from a config
with random weights (pure torch.nn, no downloads) train for a few steps on flagos and match
the same run on the CPU (same seed, same initial weights copied from the CPU model)."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import flagos
import pytest
import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class Config:
    arch: str = "llama"  # "llama": RMSNorm, RoPE, SwiGLU; "gpt": LayerNorm, learned pos, GELU
    vocab: int = 96
    dim: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2  # grouped-query attention (llama)
    hidden: int = 128
    max_seq: int = 32
    dropout: float = 0.0


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.c = c
        self.hd = c.dim // c.heads
        kv = c.kv_heads if c.arch == "llama" else c.heads
        self.kv = kv
        self.q = nn.Linear(c.dim, c.heads * self.hd, bias=c.arch == "gpt")
        # No key bias: softmax ignores it, so its gradient is rounding noise, which Adam
        # would turn into full-size, arbitrary updates.
        self.k = nn.Linear(c.dim, kv * self.hd, bias=False)
        self.v = nn.Linear(c.dim, kv * self.hd, bias=c.arch == "gpt")
        self.o = nn.Linear(c.heads * self.hd, c.dim, bias=c.arch == "gpt")

    def forward(self, x, cos=None, sin=None):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.c.heads, self.hd).transpose(1, 2)
        k = self.k(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        if cos is not None:
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        if self.kv != self.c.heads:
            rep = self.c.heads // self.kv
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if self.c.arch == "llama":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # explicit masked softmax attention
            att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            y = att @ v
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.c = c
        norm = (lambda: RMSNorm(c.dim)) if c.arch == "llama" else (lambda: nn.LayerNorm(c.dim))
        self.n1, self.n2 = norm(), norm()
        self.attn = Attention(c)
        if c.arch == "llama":
            self.gate = nn.Linear(c.dim, c.hidden, bias=False)
            self.up = nn.Linear(c.dim, c.hidden, bias=False)
            self.down = nn.Linear(c.hidden, c.dim, bias=False)
        else:
            self.fc = nn.Linear(c.dim, c.hidden)
            self.proj = nn.Linear(c.hidden, c.dim)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x, cos=None, sin=None):
        x = x + self.drop(self.attn(self.n1(x), cos, sin))
        h = self.n2(x)
        if self.c.arch == "llama":
            h = self.down(F.silu(self.gate(h)) * self.up(h))
        else:
            h = self.proj(F.gelu(self.fc(h), approximate="tanh"))
        return x + self.drop(h)


class Transformer(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.c = c
        self.emb = nn.Embedding(c.vocab, c.dim)
        if c.arch == "gpt":
            self.pos = nn.Embedding(c.max_seq, c.dim)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.dim) if c.arch == "llama" else nn.LayerNorm(c.dim)
        self.head = nn.Linear(c.dim, c.vocab, bias=False)
        if c.arch == "gpt":
            self.head.weight = self.emb.weight  # tied

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.emb(idx)
        cos = sin = None
        if self.c.arch == "gpt":
            x = x + self.pos(torch.arange(t, device=idx.device))
        else:
            hd = self.c.dim // self.c.heads
            inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, device=idx.device).float() / hd))
            ang = torch.outer(torch.arange(t, device=idx.device).float(), inv)
            ang = torch.cat([ang, ang], dim=-1)
            cos, sin = ang.cos(), ang.sin()
        for blk in self.blocks:
            x = blk(x, cos, sin)
        return self.head(self.norm(x))


def train(model: nn.Module, batches, device: str, steps: int) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    losses = []
    for step in range(steps):
        idx, tgt = (t.to(device) for t in batches[step])
        logits = model(idx)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


# The shipped routes (boxing on sim, then cpu), cpu only, and the gems routing file (FlagGems'
# Triton kernels; run where gems can: a CUDA HAL with FlagGems installed).
ROUTES = ["configured", "cpu", "gems"]


def _gems_unavailable() -> str | None:
    p = flagos.routing.providers().get("gems")
    if p is None:
        return "flagos-ops-gems is not installed"
    return p.unavailable_on(flagos.get_device_properties(0).hal)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("arch", ["llama", "gpt"])
def test_transformer_trains_like_cpu(arch, route):
    if route == "gems" and (why := _gems_unavailable()):
        pytest.skip(f"gems cannot run here: {why}")
    c = Config(arch=arch)
    torch.manual_seed(0)
    ref = Transformer(c)
    model = copy.deepcopy(ref).to("flagos")
    if arch == "gpt":  # .to() swaps parameter data in place: tied weights stay tied
        assert model.head.weight is model.emb.weight
    g = torch.Generator().manual_seed(1)
    steps = 6
    batches = []
    for _ in range(steps):
        seq = torch.randint(0, c.vocab, (3, c.max_seq + 1), generator=g)
        batches.append((seq[:, :-1], seq[:, 1:]))
    cpu_losses = train(ref, batches, "cpu", steps)
    flagos.routing.reset_stats()
    # FlagGems' Triton kernels reduce in other orders (and its matmuls may use TF32).
    rtol, atol, p_rtol, p_atol = (1e-2, 1e-3, 1e-2, 1e-3) if route == "gems" else \
        (1e-4, 1e-5, 1e-3, 1e-4)
    if route == "cpu":
        with flagos.routing.override({"default": ["cpu"]}):
            fl_losses = train(model, batches, "flagos", steps)
    elif route == "gems":
        try:
            flagos.routing.load("gems")
            fl_losses = train(model, batches, "flagos", steps)
        finally:
            flagos.routing.reset()
    else:
        fl_losses = train(model, batches, "flagos", steps)
    # the counters of the training steps alone: the comparisons below copy to the CPU, and
    # with an installed FlagGems copy_ is routed as itself (on the configured routes)
    stats = flagos.routing.stats()
    assert cpu_losses[-1] < cpu_losses[0]  # it does learn
    torch.testing.assert_close(torch.tensor(fl_losses), torch.tensor(cpu_losses),
                               rtol=rtol, atol=atol)
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        assert p.device.type == "flagos", name
        # AdamW takes its foreach path on flagos and its per-tensor path on the CPU: other
        # rounding, which Adam's normalised update can amplify where a gradient is ~0.
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=p_rtol, atol=p_atol,
                                   msg=lambda m, n=name: f"{n}: {m}")
    # the ops really went through the flagos dispatcher, on the expected providers
    used = {prov for per_op in stats.values() for prov in per_op}
    if route == "cpu":
        assert used == {"cpu"}, {op: sorted(v) for op, v in stats.items() if set(v) != {"cpu"}}
    elif route == "gems":
        assert "gems" in used
    else:
        chain = flagos.routing.resolve("aten::mm.out", 0)
        assert chain[0] in used
    assert sum(v["calls"] for per_op in stats.values() for v in per_op.values()) > 100
