"""Transformers models of the zoo, unchanged library code built from tiny configs (random
weights, nothing downloaded): a few layers of width 32, a vocabulary of 128."""

from __future__ import annotations

import torch
from zoo_check import Case

VOCAB = 128
SMALL = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "max_position_embeddings": 64}
LM_CHECKS = ("forward", "train", "generate")


def _tokens(batch: int = 2, length: int = 12) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, length))


def _lm_inputs() -> dict:
    ids = _tokens()
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def _causal_lm(config_name: str, **config) -> object:
    import transformers

    cfg = getattr(transformers, config_name)(vocab_size=VOCAB, pad_token_id=0, bos_token_id=1,
                                             eos_token_id=2, **config)
    return transformers.AutoModelForCausalLM.from_config(cfg)


def llama():
    return _causal_lm("LlamaConfig", num_key_value_heads=2, **SMALL)


def qwen3():
    return _causal_lm("Qwen3Config", num_key_value_heads=2, head_dim=8, **SMALL)


def qwen2_moe():
    return _causal_lm("Qwen2MoeConfig", num_key_value_heads=2, moe_intermediate_size=32,
                      shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                      decoder_sparse_step=1, **SMALL)


def mixtral():
    return _causal_lm("MixtralConfig", num_key_value_heads=2, num_local_experts=4,
                      num_experts_per_tok=2, **SMALL)


def gpt2():
    import transformers

    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2,
                                  n_head=4, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


def bert():
    import transformers

    cfg = transformers.BertConfig(vocab_size=VOCAB, num_labels=3, pad_token_id=0, **SMALL)
    return transformers.BertForSequenceClassification(cfg)


def bert_inputs() -> dict:
    ids = _tokens()
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # the second sequence is padded: attention must not see its tail
    ids[1, 7:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0, 2])}


def t5():
    import transformers

    cfg = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                num_heads=4, decoder_start_token_id=0, pad_token_id=0,
                                eos_token_id=1)
    return transformers.T5ForConditionalGeneration(cfg)


def t5_inputs() -> dict:
    ids = _tokens()
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "labels": _tokens(length=6)}


def vit():
    import transformers

    cfg = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, num_labels=5,
                                 hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4)
    return transformers.ViTForImageClassification(cfg)


def vit_inputs() -> dict:
    return {"pixel_values": torch.randn(2, 3, 32, 32), "labels": torch.tensor([1, 4])}


def whisper():
    import transformers

    cfg = transformers.WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=16, encoder_layers=2, decoder_layers=2, d_model=32,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_source_positions=32, max_target_positions=32, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    return transformers.WhisperForConditionalGeneration(cfg)


def whisper_inputs() -> dict:
    # log-mel features: 16 bins by 2 * max_source_positions frames
    return {"input_features": torch.randn(2, 16, 64), "labels": _tokens(length=6)}


CASES = [
    Case("Llama", "transformers", llama, _lm_inputs, LM_CHECKS),
    Case("Qwen3", "transformers", qwen3, _lm_inputs, LM_CHECKS),
    Case("Qwen2-MoE", "transformers", qwen2_moe, _lm_inputs, LM_CHECKS),
    Case("Mixtral", "transformers", mixtral, _lm_inputs, LM_CHECKS),
    Case("GPT-2", "transformers", gpt2, _lm_inputs, LM_CHECKS),
    Case("BERT (padding mask)", "transformers", bert, bert_inputs, ("forward", "train")),
    Case("T5", "transformers", t5, t5_inputs, LM_CHECKS),
    Case("ViT", "transformers", vit, vit_inputs, ("forward", "train")),
    Case("Whisper", "transformers", whisper, whisper_inputs, LM_CHECKS),
]
