"""The main job: a Llama-style model trains on flagos, checked against the same run on CPU.

    python -m flagos.demo [--steps N] [--layers N] [--dim N] [--device flagos:0]

Both runs start from the same weights and see the same batches; the losses must agree
within tolerance. At the end it prints the routing summary: which provider served which
op, how often, and for how long.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time

import torch

import flagos
from flagos.models import LlamaConfig, TinyLlama


def train(model: TinyLlama, batches: list[torch.Tensor], device: torch.device,
          lr: float) -> tuple[list[float], float]:
    """AdamW steps over ``batches`` on ``device``; (losses, seconds)."""
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    start = time.perf_counter()
    for tokens in batches:
        loss = model.loss(tokens.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, time.perf_counter() - start


def routing_summary(top: int = 15) -> str:
    """The busiest ops of this run per provider, from flagos.routing.stats()."""
    rows = []
    for op, per in flagos.routing.stats().items():
        for provider, s in per.items():
            rows.append((s["total_us"], op, provider, s["calls"], s["declined"]))
    rows.sort(reverse=True)
    by_provider: dict[str, int] = {}
    for _, _, provider, calls, _ in rows:
        by_provider[provider] = by_provider.get(provider, 0) + calls
    lines = ["routing summary (calls per provider: " +
             ", ".join(f"{p}={n}" for p, n in sorted(by_provider.items())) +
             f"; {len({r[1] for r in rows})} distinct ops)",
             f"  {'op':40} {'provider':10} {'calls':>7} {'total ms':>10}"]
    for total_us, op, provider, calls, _ in rows[:top]:
        lines.append(f"  {op:40} {provider:10} {calls:>7} {total_us / 1000:>10.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--device", default="flagos:0")
    p.add_argument("--rtol", type=float, default=1e-3)
    args = p.parse_args(argv)

    torch.manual_seed(0)
    cfg = LlamaConfig(dim=args.dim, n_layers=args.layers, n_heads=max(1, args.dim // 32),
                      hidden_dim=int(args.dim * 8 / 3) // 8 * 8, max_seq_len=args.seq + 1)
    model = TinyLlama(cfg)
    batches = [torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1))
               for _ in range(args.steps)]
    n_params = sum(p.numel() for p in model.parameters())
    device = torch.device(args.device)
    props = flagos.get_device_properties(device.index or 0)
    print(f"TinyLlama: {n_params / 1e6:.2f}M parameters, {cfg.n_layers} layers, dim {cfg.dim}; "
          f"{args.steps} AdamW steps of batch {args.batch}x{args.seq}")
    print(f"flagos device: {device} = {props.name} (HAL {props.hal}, native twin "
          f"{props.native_device})")

    for dev in (torch.device("cpu"), device):  # warm-up: first-call costs stay out of the times
        train(copy.deepcopy(model), batches[:1], dev, 3e-3)
    flagos.routing.reset_stats()
    ref_losses, ref_s = train(copy.deepcopy(model), batches, torch.device("cpu"), 3e-3)
    losses, flagos_s = train(copy.deepcopy(model), batches, device, 3e-3)
    print(f"{'step':>4} {'cpu loss':>10} {'flagos loss':>12} {'rel diff':>10}")
    worst = 0.0
    for i, (a, b) in enumerate(zip(ref_losses, losses, strict=True)):
        rel = abs(a - b) / max(abs(a), 1e-12)
        worst = max(worst, rel)
        print(f"{i:>4} {a:>10.5f} {b:>12.5f} {rel:>10.2e}")
    print(f"time: cpu {ref_s:.2f} s, flagos {flagos_s:.2f} s")
    print(routing_summary())
    learned = losses[-1] < losses[0]
    ok = worst <= args.rtol and learned
    print(f"result: {'OK' if ok else 'MISMATCH'} (worst relative loss difference {worst:.2e}, "
          f"tolerance {args.rtol:g}; loss {'fell' if learned else 'did not fall'} "
          f"{losses[0]:.3f} -> {losses[-1]:.3f})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
