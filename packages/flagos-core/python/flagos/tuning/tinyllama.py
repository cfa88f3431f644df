"""A recorded workload of one TinyLlama training step (forward, backward, AdamW) on flagos."""

from __future__ import annotations

import torch

from flagos.models import LlamaConfig, TinyLlama

from .recorder import record
from .workload import Workload

__all__ = ["CONFIGS", "record_training_step", "training_step"]

# (config, batch, sequence length) per size: `tiny` for CPU checks, `default` for a device.
CONFIGS: dict[str, tuple[LlamaConfig, int, int]] = {
    "tiny": (LlamaConfig(vocab_size=128, dim=64, n_layers=1, n_heads=2, hidden_dim=172,
                         max_seq_len=32), 2, 16),
    "default": (LlamaConfig(vocab_size=4096, dim=512, n_layers=4, n_heads=8, hidden_dim=1376,
                            max_seq_len=256), 8, 256),
}


def _config(size: str) -> tuple[LlamaConfig, int, int]:
    if size not in CONFIGS:
        raise ValueError(f"unknown TinyLlama size {size!r}; sizes: {', '.join(CONFIGS)}")
    return CONFIGS[size]


def training_step(size: str = "tiny", device: str = "flagos", seed: int = 0):
    """A closure running one training step of a seeded TinyLlama on ``device``; returns the
    loss (a tensor). Same seed, same model and batch on every device."""
    cfg, batch, seq = _config(size)
    torch.manual_seed(seed)
    model = TinyLlama(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1))
    model, tokens = model.to(device), tokens.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> torch.Tensor:
        loss = model.loss(tokens)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    step.model = model  # type: ignore[attr-defined]
    return step


def record_training_step(size: str = "tiny", device: str = "flagos") -> Workload:
    """Record the second training step (the first creates AdamW's state) of TinyLlama."""
    step = training_step(size, device)
    step()
    with record(f"tinyllama-train-{size}") as rec:
        step()
    torch.flagos.synchronize()
    return rec.workload
