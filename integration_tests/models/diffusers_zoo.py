"""Diffusers models of the zoo, unchanged library code built from tiny configs (random
weights, nothing downloaded): two resolution levels of 32 and 64 channels, 16x16 samples;
Qwen-Image 2.1 with widths of 8 to 32, 64x64 images."""

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


# Qwen-Image 2.1: a Qwen3-VL text encoder (with its processor and tokenizer), the
# single-stream block-causal transformer and a 16x VAE of 16 latent channels; 64x64 images
# are 4x4 latents, one vision-encoder slot per 2x2 of them.
QWEN_LATENT = 16
QWEN_TEXT = 32  # the text encoder's width, the transformer's context_in_dim
QWEN_SPECIAL = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                "<|image_pad|>", "<|video_pad|>"]
# Qwen3-VL's chat template for the messages the pipeline formats with it: text, and a
# vision placeholder per image.
QWEN_CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{- message.content }}"
    "{%- else %}{%- for content in message.content %}"
    "{%- if content.type == 'text' %}{{- content.text }}"
    "{%- else %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}{%- endif %}"
    "{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def qwen_tokenizer():
    """Qwen's byte-level BPE tokenizer class (the one Qwen3-VL loads) over the 256 byte
    symbols with no merges, so any text tokenizes, plus Qwen's special tokens."""
    import transformers
    from tokenizers import pre_tokenizers

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab["<|endoftext|>"] = len(vocab)
    return transformers.Qwen2Tokenizer(vocab=vocab, merges=[], eos_token="<|im_end|>",
                                       pad_token="<|endoftext|>",
                                       extra_special_tokens=QWEN_SPECIAL)


def qwen3vl_processor():
    """Qwen3VLProcessor with that tokenizer and Qwen2-VL's PIL image processor (16-pixel
    patches, 2x2 merged: one vision token per 32x32 pixels, as the VAE's 2x2 latents).

    No video processor: transformers checks a processor's video processor against a base
    class that it exports only where torchvision is installed, which the zoo does not
    need; the pipeline reads no video, so none is given and that one check is skipped."""
    import transformers

    class Qwen3VLProcessorWithoutVideo(transformers.Qwen3VLProcessor):
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    images = transformers.Qwen2VLImageProcessorPil(
        patch_size=16, temporal_patch_size=2, merge_size=2,
        size={"shortest_edge": 32 * 32, "longest_edge": 256 * 256})
    return Qwen3VLProcessorWithoutVideo(image_processor=images, tokenizer=qwen_tokenizer(),
                                        video_processor=None, chat_template=QWEN_CHAT_TEMPLATE)


def qwen3vl_text_encoder(tokenizer):
    import transformers

    ids = {name: tokenizer.convert_tokens_to_ids(f"<|{name}|>")
           for name in ("image_pad", "video_pad", "vision_start", "vision_end")}
    cfg = transformers.Qwen3VLConfig(
        text_config={"vocab_size": len(tokenizer), "hidden_size": QWEN_TEXT,
                     "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 256,
                     "pad_token_id": tokenizer.pad_token_id,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                         "mrope_section": [2, 1, 1], "mrope_interleaved": True}},
        vision_config={"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                       "patch_size": 16, "out_hidden_size": QWEN_TEXT,
                       "num_position_embeddings": 16, "deepstack_visual_indexes": [0]},
        image_token_id=ids["image_pad"], video_token_id=ids["video_pad"],
        vision_start_token_id=ids["vision_start"], vision_end_token_id=ids["vision_end"])
    return transformers.Qwen3VLForConditionalGeneration(cfg)


def qwenimage21_transformer():
    import diffusers

    return diffusers.QwenImage21Transformer2DModel(
        in_channels=QWEN_LATENT, out_channels=QWEN_LATENT, num_layers=2, attention_head_dim=16,
        num_attention_heads=2, context_in_dim=QWEN_TEXT, mlp_ratio=2, axes_dims_rope=(4, 6, 6))


def qwenimage21_transformer_inputs() -> dict:
    """The joint sequence as the pipeline hands it over: 6 text tokens, a condition image
    of 2x2 latents (one encoder slot), 3 text tokens; then the 4x4 target latents (4
    slots). The second prompt is 2 tokens shorter: its mask pads them."""
    slots = 10  # the encoder's positions: 9 text tokens and the condition image's slot
    img_mask = torch.zeros(2, slots + 4, dtype=torch.bool)
    img_mask[:, 6] = True
    img_mask[:, slots:] = True
    text_mask = torch.ones(2, slots, dtype=torch.bool)
    text_mask[1, 8:] = False
    return {"hidden_states": torch.randn(2, 4 + 16, QWEN_LATENT),
            "encoder_hidden_states": torch.randn(2, slots, QWEN_TEXT),
            "encoder_hidden_states_mask": text_mask, "timestep": torch.tensor([0.3, 0.9]),
            "img_shapes": [[(1, 2, 2), (1, 4, 4)]] * 2, "img_mask": img_mask}


def qwenimage21_vae():
    import diffusers

    # Five levels: four 2x up- and downsamplings, the 16x of the pipeline's latents.
    return diffusers.AutoencoderKLQwenImage21(
        base_dim=8, decoder_base_dim=8, z_dim=QWEN_LATENT, dim_mult=[1, 1, 2, 2, 2],
        num_res_blocks=1, temperal_downsample=[False, True, True, True],
        latents_mean=[0.1 * i - 0.8 for i in range(QWEN_LATENT)],
        latents_std=[1.0 + 0.1 * i for i in range(QWEN_LATENT)])


def qwenimage21_vae_decode_inputs() -> dict:
    return {"z": torch.randn(2, QWEN_LATENT, 1, 4, 4)}  # one frame of 4x4 latents: 64x64


def qwenimage21_pipeline():
    """The unchanged pipeline, its prompts through the processor and the text encoder."""
    import diffusers

    processor = qwen3vl_processor()
    text_encoder = qwen3vl_text_encoder(processor.tokenizer)
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True,
                                                          shift_terminal=0.02)
    modules = {"vae": qwenimage21_vae(), "text_encoder": text_encoder,
               "transformer": qwenimage21_transformer()}
    for m in modules.values():
        m.eval()
    return diffusers.QwenImage21Pipeline(scheduler=scheduler, processor=processor, **modules)


# Two prompts of different lengths: the shorter one's padding is masked in the transformer.
QWEN_PROMPTS = ["a red cube on a wooden table", "two cats"]


def qwenimage21_pipeline_inputs() -> dict:
    # three steps: the first prefills the text's keys and values, the others decode from them
    return {"seed": 0, "prompt": QWEN_PROMPTS, "height": 64, "width": 64,
            "num_inference_steps": 3}


def qwenimage21_condition_inputs() -> dict:
    """A 64x64 condition image: read by the text encoder's vision tower and, encoded by the
    VAE, put before the noise as a bidirectional image block."""
    from PIL import Image

    pixels = torch.randint(0, 256, (64, 64, 3), dtype=torch.uint8).numpy()
    return {"seed": 0, "prompt": QWEN_PROMPTS, "image": Image.fromarray(pixels),
            "output_resolution": 64, "num_inference_steps": 2}


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
    Case("QwenImage21 transformer", "diffusers", qwenimage21_transformer,
         qwenimage21_transformer_inputs, ("forward", "train"), loss=_sample_loss),
    Case("AutoencoderKLQwenImage21 decode", "diffusers", qwenimage21_vae,
         qwenimage21_vae_decode_inputs, ("forward",), forward=lambda m, x: m.decode(**x)),
    Case("QwenImage21Pipeline (text to image)", "diffusers", qwenimage21_pipeline,
         qwenimage21_pipeline_inputs, ("pipeline",)),
    Case("QwenImage21Pipeline (condition image)", "diffusers", qwenimage21_pipeline,
         qwenimage21_condition_inputs, ("pipeline",)),
]
