"""Diffusers models of the zoo, unchanged library code built from tiny configs (random
weights, nothing downloaded): two resolution levels of 32 and 64 channels, 16x16 samples."""

from __future__ import annotations

import torch
from zoo_check import Case

BLOCKS = (32, 64)


def unet2d():
    import diffusers

    return diffusers.UNet2DModel(
        sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
        block_out_channels=BLOCKS, norm_num_groups=8, attention_head_dim=8,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"))


def unet2d_inputs() -> dict:
    return {"sample": torch.randn(2, 3, 16, 16), "timestep": torch.tensor([10, 500])}


def ddim_pipeline():
    import diffusers

    return diffusers.DDIMPipeline(unet=unet2d(),
                                  scheduler=diffusers.DDIMScheduler(num_train_timesteps=100))


def ddim_inputs() -> dict:
    return {"seed": 0, "batch_size": 2, "num_inference_steps": 3}


def unet2d_condition():
    import diffusers

    return diffusers.UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=BLOCKS, norm_num_groups=8, cross_attention_dim=32,
        attention_head_dim=8, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))


def unet2d_condition_inputs() -> dict:
    return {"sample": torch.randn(2, 4, 16, 16), "timestep": torch.tensor([10, 500]),
            "encoder_hidden_states": torch.randn(2, 7, 32)}


def autoencoder_kl():
    import diffusers

    return diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=BLOCKS,
        norm_num_groups=8, layers_per_block=1, sample_size=32,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"))


def vae_decode_inputs() -> dict:
    return {"z": torch.randn(2, 4, 8, 8)}


def flux():
    import diffusers

    return diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
        attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
        pooled_projection_dim=32, guidance_embeds=False, axes_dims_rope=(4, 4, 8))


def flux_inputs() -> dict:
    h = w = 4  # a 4x4 latent image, one token per position
    img_ids = torch.zeros(h, w, 3)
    img_ids[..., 1] = torch.arange(h)[:, None]
    img_ids[..., 2] = torch.arange(w)[None, :]
    return {"hidden_states": torch.randn(2, h * w, 16),
            "encoder_hidden_states": torch.randn(2, 8, 32),
            "pooled_projections": torch.randn(2, 32), "timestep": torch.tensor([0.3, 0.9]),
            "img_ids": img_ids.reshape(h * w, 3), "txt_ids": torch.zeros(8, 3)}


def _sample_loss(out) -> torch.Tensor:
    return out.sample.float().pow(2).mean()


CASES = [
    Case("UNet2DModel", "diffusers", unet2d, unet2d_inputs, ("forward", "train"),
         loss=_sample_loss),
    Case("DDIMPipeline (UNet2DModel)", "diffusers", ddim_pipeline, ddim_inputs, ("pipeline",)),
    Case("UNet2DConditionModel", "diffusers", unet2d_condition, unet2d_condition_inputs,
         ("forward", "train"), loss=_sample_loss),
    Case("AutoencoderKL decode", "diffusers", autoencoder_kl, vae_decode_inputs, ("forward",),
         forward=lambda m, x: m.decode(**x)),
    Case("Flux transformer (MMDiT)", "diffusers", flux, flux_inputs, ("forward", "train"),
         loss=_sample_loss),
]
