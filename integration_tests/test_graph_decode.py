"""A transformers Llama's decode step (static KV cache) captured once with
torch.flagos.graph and replayed token after token gives the eager tokens, and the CPU's."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

PROMPT, STEPS = 12, 6


def _decode(model, config, ids, device: str, graphed: bool) -> list[int]:
    cache = transformers.StaticCache(config=config, max_cache_len=PROMPT + STEPS + 4)
    out = model(ids.to(device), past_key_values=cache, use_cache=True,
                cache_position=torch.arange(PROMPT, device=device))
    tok = out.logits[:, -1:].argmax(-1)
    pos = torch.tensor([PROMPT], device=device)

    def step():
        o = model(tok, past_key_values=cache, use_cache=True, cache_position=pos)
        tok.copy_(o.logits[:, -1:].argmax(-1))
        pos.add_(1)

    tokens = [tok.item()]
    if not graphed:
        for _ in range(STEPS):
            step()
            tokens.append(tok.item())
        return tokens
    step()  # the first token eagerly: warm-up
    tokens.append(tok.item())
    graph = torch.flagos.Graph()
    with torch.flagos.graph(graph):
        step()
    for _ in range(STEPS - 1):
        graph.replay()
        tokens.append(tok.item())
    return tokens


@torch.no_grad()
def test_graph_replayed_decode_gives_the_eager_tokens():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=128)
    cpu_model = transformers.LlamaForCausalLM(config).eval()
    model = transformers.LlamaForCausalLM(config).eval()
    model.load_state_dict(cpu_model.state_dict())
    model.to("flagos")
    ids = torch.randint(3, 512, (1, PROMPT))
    expected = _decode(cpu_model, config, ids, "cpu", graphed=False)
    assert _decode(model, config, ids, "flagos", graphed=False) == expected
    assert _decode(model, config, ids, "flagos", graphed=True) == expected
