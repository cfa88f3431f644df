"""Small reference models built from a config with random weights (no downloads), used
by the demo, the benchmarks and the model tests."""

from flagos.models.llama import LlamaConfig, TinyLlama

__all__ = ["LlamaConfig", "TinyLlama"]
