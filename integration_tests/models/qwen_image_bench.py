"""Qwen-Image 2.1's denoising step on flagos against the native device: the unchanged
``QwenImage21Transformer2DModel`` built from its config (no download) at full width and
reduced depth, in bf16, one forward of a 1024x1024 text-to-image step (4,096 image tokens
and 256 text tokens), same weights and inputs on both sides, timed alternately.

    FLAGOS_HAL=cuda [FLAGOS_NO_TWIN=1] python integration_tests/models/qwen_image_bench.py [--layers 4] [--json F]

The native device is flagos:0's twin, or without a twin (``FLAGOS_NO_TWIN=1``) the GPU
the cuda HAL drives, through plain PyTorch; flagos then runs FlagGems through the HAL (the
gems routing file).

On the sim (its twin is the CPU) ``--quick`` is implied: a narrow model and a 128x128 image.
The ratio is native time / flagos time (higher is better; 1.0 is parity).
"""

from __future__ import annotations

import argparse
import sys

import flagos
import torch
from flagos.bench import native_reference, paired
from flagos.bench_results import Plot, Table, write_json

TEXT_TOKENS = 256


def build(layers: int, quick: bool) -> torch.nn.Module:
    import diffusers

    diffusers.utils.logging.set_verbosity_error()  # its note on casting a built model

    if quick:
        return diffusers.QwenImage21Transformer2DModel(
            num_layers=layers, attention_head_dim=32, num_attention_heads=4,
            context_in_dim=256, mlp_ratio=3, axes_dims_rope=(8, 12, 12))
    # The released model's width (32 heads of 128, 4096-wide text features); 32 layers deep.
    return diffusers.QwenImage21Transformer2DModel(num_layers=layers)


def inputs(model: torch.nn.Module, pixels: int) -> dict:
    """A text-to-image step as QwenImage21Pipeline hands it to the transformer: latents of
    16x downsampling, one mask slot per 2x2 group of them after the text's positions."""
    side = pixels // 16
    tokens = side * side
    cfg = model.config
    img_mask = torch.cat([torch.zeros(1, TEXT_TOKENS, dtype=torch.bool),
                          torch.ones(1, tokens // 4, dtype=torch.bool)], dim=1)
    g = torch.Generator().manual_seed(0)
    return {"hidden_states": torch.randn(1, tokens, cfg.in_channels, generator=g),
            "encoder_hidden_states": torch.randn(1, TEXT_TOKENS, cfg.context_in_dim, generator=g),
            "encoder_hidden_states_mask": torch.ones(1, TEXT_TOKENS, dtype=torch.bool),
            "timestep": torch.tensor([0.5]), "img_shapes": [[(1, side, side)]],
            "img_mask": img_mask}


def to(x: object, device: torch.device, dtype: torch.dtype) -> object:
    if isinstance(x, torch.Tensor):
        return x.to(device, dtype=dtype if x.is_floating_point() else None)
    return x


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4, help="transformer blocks (the model has 32)")
    p.add_argument("--quick", action="store_true", help="a narrow model and a small image")
    p.add_argument("--min-time", type=float, default=0.5, help="seconds per timing")
    p.add_argument("--json", default="", help="also write the table here (JSON)")
    args = p.parse_args(argv)
    native = native_reference(0)
    if native is None:
        raise SystemExit("this benchmark compares against a native device; flagos:0 has no "
                         "twin and its HAL names no device this process can use")
    no_twin = flagos.twin_device(0) is None
    if no_twin:  # without a twin flagos computes with FlagGems through the HAL
        flagos.routing.load("gems")
    quick = args.quick or native.type == "cpu"
    pixels = 128 if quick else 1024
    dtype = torch.bfloat16
    torch.manual_seed(0)
    model = build(args.layers, quick).eval()
    x = inputs(model, pixels)
    dev = torch.device("flagos", 0)
    fl_model = model.to(dev, dtype)
    fl_x = {k: to(v, dev, dtype) for k, v in x.items()}
    torch.manual_seed(0)
    nat_model = build(args.layers, quick).eval().to(native, dtype)
    nat_model.load_state_dict({k: v.cpu() for k, v in fl_model.state_dict().items()})
    nat_x = {k: to(v, native, dtype) for k, v in x.items()}

    def step(m: torch.nn.Module, kw: dict):
        with torch.no_grad():
            return m(**kw, return_dict=False)[0]

    got, want = step(fl_model, fl_x).float().cpu(), step(nat_model, nat_x).float().cpu()
    diff = (got - want).abs().max().item()
    flagos.routing.reset_stats()
    f, n = paired(lambda: step(fl_model, fl_x), lambda: step(nat_model, nat_x), native,
                  args.min_time)
    width = model.config.num_attention_heads * model.config.attention_head_dim
    name = f"QwenImage21 transformer {args.layers}x{width}"
    table = Table("qwen-image-no-twin" if no_twin else "qwen-image", (f"Qwen-Image 2.1 denoising step: transformer forward, "
                                 f"{args.layers} of 32 blocks at width {width}, bf16, "
                                 f"{pixels}x{pixels} image + {TEXT_TOKENS} text tokens, "
                                 f"flagos{' without a twin (gems routes)' if no_twin else ''}"
                                 f" vs {native.type}"),
                  ["model", "flagos ms/step", "native ms/step", "throughput ratio"],
                  plot=Plot("bar", "model", ["throughput ratio"],
                            ylabel="native / flagos step time", reference=1.0))
    table.add(name, f * 1e3, n * 1e3, n / f)
    used: dict[str, int] = {}
    for per in flagos.routing.stats().values():
        for provider, st in per.items():
            used[provider] = used.get(provider, 0) + st["calls"]
    table.notes.append(f"largest difference from {native.type}: {diff:.3g} (bf16)")
    table.notes.append("flagos ops by provider: " +
                       ", ".join(f"{k} {v}" for k, v in sorted(used.items())))
    print(table.format())
    if args.json:
        write_json(args.json, [table])
    return 0


if __name__ == "__main__":
    sys.exit(main())
