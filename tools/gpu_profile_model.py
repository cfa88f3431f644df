"""Profile of the bench's bf16 TinyLlama training step (8 x 2048), for finding where flagos
time goes on a GPU machine: step time, torch.profiler tables by device and host time, and
(on flagos) the routed ops by host time.

    FLAGOS_HAL=cuda python tools/gpu_profile_model.py flagos
    TORCH_DEVICE_BACKEND_AUTOLOAD=0 python tools/gpu_profile_model.py cuda   # native, no flagos
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

LLAMA = pathlib.Path(__file__).resolve().parent.parent / "packages/flagos-core/python/flagos/models/llama.py"


def main() -> None:
    dev = sys.argv[1] if len(sys.argv) > 1 else "flagos"
    # The model file by path: importing the flagos package would register the device.
    spec = importlib.util.spec_from_file_location("llama", LLAMA)
    llama = importlib.util.module_from_spec(spec)
    sys.modules["llama"] = llama
    spec.loader.exec_module(llama)
    cfg = llama.LlamaConfig(dim=2048, n_layers=8, n_heads=16, hidden_dim=5632,
                            max_seq_len=1025, vocab_size=32000)
    torch.manual_seed(0)
    model = llama.TinyLlama(cfg).to(device=dev, dtype=torch.bfloat16)
    tokens = torch.randint(0, cfg.vocab_size, (8, 1025)).to(dev)
    sync = torch.get_device_module(dev).synchronize
    for _ in range(2):
        model.loss(tokens).backward()
    sync()
    start = time.perf_counter()
    for _ in range(3):
        model.loss(tokens).backward()
    sync()
    print(f"{dev}: {(time.perf_counter() - start) / 3 * 1e3:.1f} ms/step", flush=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            model.loss(tokens).backward()
        sync()
    averages = prof.key_averages()
    for key in ("self_cuda_time_total", "self_cpu_time_total"):
        print(averages.table(sort_by=key, row_limit=22, max_name_column_width=60))
    if dev == "flagos":
        import flagos

        rows = sorted(((per["boxing"]["total_us"], per["boxing"]["calls"], op)
                       for op, per in flagos.routing.stats().items() if "boxing" in per),
                      reverse=True)
        print("routed ops by host time (all steps):")
        for us, calls, op in rows[:30]:
            print(f"  {op:50} {calls:7d} calls {us / 1e3:9.1f} ms {us / calls:8.1f} us/call")


if __name__ == "__main__":
    main()
