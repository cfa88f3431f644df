"""Emulated FP8 / NVFP4 against bf16 and against native FP8, side by side in one run:

    FLAGOS_HAL=cuda python packages/flagos-quant/benchmarks/quant_bench.py [--quick] [--json PATH]
        [--only linear,decode,graph,accuracy]

1. linear layers (batch 1 decode and batch 16): bf16 vs FP8 and NVFP4 weights, emulated
   (weight-only, and the format's activation scheme through aten::_scaled_mm routed to
   ``emulation``) and, on a GPU with FP8 units, FP8 through the twin's native
   ``_scaled_mm`` (the same op routed to ``boxing``); native CUDA bf16 / FP8 beside them;
2. a small Llama's decode step (batch 1, KV cache): bf16 vs FP8 / NVFP4 weights;
3. the decode step (static KV cache) eager and replayed from a graph: torch.flagos.graph
   (bf16, FP8 weight-only fused) beside torch.cuda.graph on plain CUDA;
4. accuracy of emulated and native FP8 ``_scaled_mm`` against a float64 reference.

Times are medians of calibrated rounds of calls (flagos.bench.timeit); the decode variants
are timed in interleaved rounds (each round runs every variant), so that they share the
host's drift. Ratios: time / the bf16 time on flagos (and / native CUDA where given). On
sim (no GPU) it runs as a smoke test.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import flagos
import torch
import torch.nn.functional as F
from flagos import launch_cache
from flagos.bench import native_reference, timeit
from flagos.bench_results import Plot, Table, write_json
from flagos_quant import FP8Linear, quantize_fp8, quantize_linears, set_weight_only
from flagos_quant.dequant import dequantize_fp8
from flagos_quant.fused_linear import FP8_WEIGHT_LINEAR, NVFP4_WEIGHT_LINEAR

# The weight-only linear ops routed to the twin's fused kernel (boxing: Triton on CUDA), or
# to the formula from routed flagos ops (dequantize the whole weight, then a bf16 matmul).
FUSED = {FP8_WEIGHT_LINEAR: "boxing", NVFP4_WEIGHT_LINEAR: "boxing"}
UNFUSED = {FP8_WEIGHT_LINEAR: "emulation", NVFP4_WEIGHT_LINEAR: "emulation"}
UNCACHED = "launch cache off"  # every packed linear launched through Python


def _time_us(fn, dev: str, min_time: float) -> float:
    """Median microseconds per call (flagos.bench.timeit: calibrated, synchronized)."""
    return timeit(fn, torch.device(dev, 0), min_time) * 1e6


NATIVE_BF16 = "bf16, plain CUDA (no flagos)"
GREEDY_TOKENS = 8


def _twin_is_cuda() -> bool:
    return flagos.get_device_properties(0).twin_device == "cuda"


def _native_cuda() -> torch.device | None:
    """The CUDA GPU under flagos:0 (its twin, or without a twin the device its HAL drives),
    for native references in the same process; None on other HALs."""
    native = native_reference(0)
    return native if native is not None and native.type == "cuda" else None


def _native_fp8() -> bool:
    return _twin_is_cuda() and torch.cuda.get_device_capability() >= (8, 9)


def _layers(n: int, k: int, dev: str):
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02
    fp8 = FP8Linear(k, n, static_input=False, device=dev)
    q, s = quantize_fp8(w)
    fp8.weight.data, fp8.weight_scale.data = q, s
    base = torch.nn.Linear(k, n, bias=False, device=dev, dtype=torch.bfloat16)
    base.weight.data = w
    holder = torch.nn.Sequential(torch.nn.Linear(k, n, bias=False, device=dev,
                                                 dtype=torch.bfloat16))
    holder[0].weight.data = w.clone()
    quantize_linears(holder, "NVFP4", skip=())
    return base, fp8, holder[0]


def _cuda_fp8(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """FP8 linear on plain CUDA tensors: per-tensor activation quantization, then the
    GPU's FP8 _scaled_mm."""
    xq, xs = quantize_fp8(x)
    return torch._scaled_mm(xq, q.t(), xs, s, out_dtype=torch.bfloat16)


@torch.no_grad()
def bench_linears(shapes, batches, min_time: float) -> list[list]:
    def timed(dev: str, fn, *args) -> float:
        return _time_us(lambda: fn(*args), dev, min_time)

    rows = []
    for n, k in shapes:
        base, fp8, nv = _layers(n, k, "flagos")
        for m in batches:
            x = torch.randn(m, k, device="flagos", dtype=torch.bfloat16)
            t_bf16 = timed("flagos", base, x)
            cases = {"bf16": t_bf16}
            for label, layer, wo, routes in (
                    ("FP8 weight-only, fused", fp8, True, FUSED),
                    ("FP8 weight-only, dequantize then matmul", fp8, True, UNFUSED),
                    ("FP8 emulated, per-tensor activations", fp8, False, {}),
                    ("NVFP4 weight-only, fused", nv, True, FUSED),
                    ("NVFP4 weight-only, dequantize then matmul", nv, True, UNFUSED),
                    ("NVFP4 emulated, per-16 activations", nv, False, {})):
                layer.weight_only = wo
                with flagos.routing.override(routes):
                    cases[label] = timed("flagos", layer, x)
            if _native_fp8():
                fp8.weight_only = False
                with flagos.routing.override({"aten::_scaled_mm": "boxing"}):
                    cases["FP8 native _scaled_mm (boxing)"] = timed("flagos", fp8, x)
            native = {}
            if _twin_is_cuda():
                xc = x.cpu().cuda()
                native["bf16"] = timed("cuda", F.linear, xc, base.weight.cpu().cuda())
                fp8.weight_only = nv.weight_only = True
                native["FP8 weight-only, fused"] = timed("cuda", fp8.to("cuda"), xc)
                native["NVFP4 weight-only, fused"] = timed("cuda", nv.to("cuda"), xc)
                fp8.to("flagos"), nv.to("flagos")
                if _native_fp8():
                    native["FP8 native _scaled_mm (boxing)"] = timed(
                        "cuda", _cuda_fp8, xc, fp8.weight.cpu().cuda(),
                        fp8.weight_scale.cpu().cuda())
            for label, t in cases.items():
                nat = native.get(label)
                rows.append(["linear", f"{m}x{k} @ {k}x{n}", label, round(t, 1),
                             round(t / t_bf16, 3), "-" if nat is None else round(nat, 1),
                             "-" if nat is None else round(t / nat, 3)])
    return rows


def _greedy_tokens(model, ids: torch.Tensor, n: int) -> list[int]:
    """``n`` greedy tokens after the prompt ``ids`` (on the model's device), with a KV cache."""
    out = model(ids, use_cache=True)
    cache, tok, tokens = out.past_key_values, out.logits[:, -1:].argmax(-1), []
    for _ in range(n):
        tokens.append(int(tok))
        out = model(tok, past_key_values=cache, use_cache=True)
        cache, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    return tokens


@torch.no_grad()
def bench_decode(cfg: dict, steps: int, prompt: int, rounds: int) -> tuple[list[list], list[str]]:
    """Each variant's decode step, timed in ``rounds`` rounds that go through all the
    variants in turn (in a rotating order), each round ``steps`` tokens a variant: the
    host's speed drifts by tens of percent over a run on a shared machine, and every
    variant then sees the same drift. Per variant: the median round. On a CUDA GPU the
    same bf16 model on plain CUDA (no flagos) is timed beside them, and its greedy tokens
    are compared with flagos' (the notes)."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**cfg)
    base = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    ids = torch.randint(3, cfg["vocab_size"], (1, prompt))
    variants = [("bf16", None, False), ("FP8 weight-only, fused", "FP8", True),
                (f"FP8 weight-only, fused, {UNCACHED}", "FP8", True),
                ("FP8 weight-only, dequantize then matmul", "FP8", True),
                ("FP8 emulated, per-tensor activations", "FP8", False),
                ("NVFP4 weight-only, fused", "NVFP4", True)]
    if _native_fp8():
        variants.append(("FP8 native _scaled_mm (boxing)", "FP8", False))
    native = _native_cuda()
    if native is not None:
        variants.append((NATIVE_BF16, None, False))
    runs, notes = [], []
    for label, algo, wo in variants:
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
        model.load_state_dict(base.state_dict())
        dev = native if label == NATIVE_BF16 else torch.device("flagos", 0)
        model = model.to(dev)
        if algo:
            quantize_linears(model, algo)
            set_weight_only(model, wo)
        weight_bytes = sum(p.untyped_storage().nbytes() for n, p in model.named_parameters()
                           if "layers." in n)
        routes = {"aten::_scaled_mm": "boxing"} if "native" in label else \
            UNFUSED if "dequantize" in label else FUSED if "fused" in label else {}
        with flagos.routing.override(routes):
            if label in ("bf16", NATIVE_BF16) and native is not None:
                notes.append(f"greedy tokens, {label}: "
                             f"{_greedy_tokens(model, ids.to(dev), GREEDY_TOKENS)}")
            out = model(ids.to(dev), use_cache=True)
            state = {"cache": out.past_key_values, "tok": out.logits[:, -1:].argmax(-1)}

            def step(model=model, state=state):
                out = model(state["tok"], past_key_values=state["cache"], use_cache=True)
                state["cache"], state["tok"] = out.past_key_values, out.logits[:, -1:].argmax(-1)

            step()  # warm-up
        if UNCACHED in label:
            step = _uncached(step)
        runs.append((label, routes, step, weight_bytes))
    def sync() -> None:
        torch.flagos.synchronize()
        if native is not None:
            torch.cuda.synchronize(native)

    sync()
    times: dict[str, list[float]] = {label: [] for label, *_ in runs}
    for r in range(rounds):
        for label, routes, step, _ in runs[r % len(runs):] + runs[:r % len(runs)]:
            with flagos.routing.override(routes):
                sync()
                t = time.perf_counter()
                for _ in range(steps):
                    step()
                sync()
                times[label].append((time.perf_counter() - t) / steps * 1e6)
    rows, t_bf16, g_bf16 = [], None, None
    for label, routes, step, weight_bytes in runs:
        us = statistics.median(times[label])
        with flagos.routing.override(routes):
            gpu = _gpu_us_per_call(step, steps)
            if label != NATIVE_BF16:
                notes.append(_launch_cache_note(label, step, steps))
        t_bf16 = t_bf16 or us
        g_bf16 = g_bf16 or gpu
        shape = (f"Llama {cfg['num_hidden_layers']}x{cfg['hidden_size']}, "
                 f"decoder weights {weight_bytes / 2**20:.0f} MiB")
        rows.append(["decode step", shape, label, round(us, 1), round(us / t_bf16, 3),
                     "-" if gpu is None else round(gpu, 1),
                     "-" if gpu is None or not g_bf16 else round(gpu / g_bf16, 3)])
    if native is not None:
        walls = {row[2]: row[3] for row in rows}
        notes.append(f"flagos bf16 / {NATIVE_BF16} wall time per token: "
                     f"{walls['bf16'] / walls[NATIVE_BF16]:.3f}")
    return rows, notes


@torch.no_grad()
def bench_graph_decode(cfg: dict, steps: int, prompt: int, rounds: int) -> list[list]:
    """The decode step (batch 1, a static KV cache so that every step has the same shapes)
    eager and replayed from a graph: ``torch.flagos.graph`` for bf16 and FP8 weight-only
    (fused) on flagos, ``torch.cuda.graph`` for bf16 on plain CUDA beside them when the twin
    is CUDA. A graph's step is the whole token: the forward, the argmax into the next
    input, the position's increment. Per variant: wall us per token (median of rounds),
    the eager step's GPU kernel us per token, and whether its tokens equal eager's."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**cfg)
    base = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    ids = torch.randint(3, cfg["vocab_size"], (1, prompt))
    max_len = prompt + 2 * steps + 8  # the eager tokens, then the profiled steps
    devices = [("flagos", torch.flagos)] + ([("cuda", torch.cuda)] if _twin_is_cuda() else [])
    variants = [(dev, api, label, algo) for dev, api in devices
                for label, algo in [("bf16", None), ("FP8 weight-only, fused", "FP8")]
                if dev == "flagos" or algo is None]
    rows = []
    for dev, api, label, algo in variants:
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
        model.load_state_dict(base.state_dict())
        model = model.to(dev)
        if algo:
            quantize_linears(model, algo)
            set_weight_only(model, True)
        routes = FUSED if algo and dev == "flagos" else {}
        with flagos.routing.override(routes):
            cache = transformers.StaticCache(config=config, max_cache_len=max_len)
            tok = torch.zeros(1, 1, dtype=torch.long, device=dev)
            pos = torch.zeros(1, dtype=torch.long, device=dev)

            def prefill(model=model, cache=cache, tok=tok, pos=pos, dev=dev):
                # the cache keeps its own write position: reset, it starts over in place
                cache.reset()
                out = model(ids.to(dev), past_key_values=cache, use_cache=True,
                            cache_position=torch.arange(prompt, device=dev))
                tok.copy_(out.logits[:, -1:].argmax(-1))
                pos.fill_(prompt)

            def step(model=model, cache=cache, tok=tok, pos=pos):
                o = model(tok, past_key_values=cache, use_cache=True, cache_position=pos)
                tok.copy_(o.logits[:, -1:].argmax(-1))
                pos.add_(1)

            prefill()
            eager_tokens = []
            for _ in range(steps):  # also the warm-up, on the default stream
                step()
                eager_tokens.append(tok.item())
            gpu, kernels = _gpu_per_call(step, steps)
            graph = api.CUDAGraph() if dev == "cuda" else api.Graph()
            side = api.Stream()
            with api.stream(side):  # warm-up on the capture stream (its library workspaces)
                prefill()
                for _ in range(2):
                    step()
            api.synchronize()
            prefill()
            api.synchronize()
            with api.graph(graph, stream=side):
                step()
            graph_tokens = []
            for _ in range(steps):
                graph.replay()
                graph_tokens.append(tok.item())
            timed = {"eager": step, "graph": graph.replay}
            times: dict[str, list[float]] = {k: [] for k in timed}
            for _ in range(rounds):
                for kind, fn in timed.items():
                    prefill()
                    api.synchronize()
                    t = time.perf_counter()
                    for _ in range(steps):
                        fn()
                    api.synchronize()
                    times[kind].append((time.perf_counter() - t) / steps * 1e6)
        for kind in timed:
            us = statistics.median(times[kind])
            case = f"{label}, {kind}" + (" (torch.cuda.graph)" if dev == "cuda" and kind == "graph"
                                         else "")
            rows.append([dev if dev == "flagos" else "plain cuda", case, round(us, 1),
                         "-" if gpu is None else round(gpu, 1),
                         "-" if kernels is None else round(kernels, 1),
                         "-" if gpu is None else round(us / gpu, 3),
                         "yes" if kind == "eager" or graph_tokens == eager_tokens else "NO"])
        del graph
    cuda_graph = [r[2] for r in rows if r[0] == "plain cuda" and "graph" in r[1]]
    for r in rows:  # each flagos graph beside the same model's torch.cuda.graph
        r.insert(6, round(r[2] / cuda_graph[0], 3) if cuda_graph and r[0] == "flagos" and
                 r[1].endswith("graph") else "-")
    return rows


def _launch_cache_note(label: str, step, steps: int) -> str:
    """How ``steps`` calls of ``step`` went through the launch cache, per token: calls
    relaunched from C++, calls through Python, and why recorded ones were not kept."""
    stats, not_kept = launch_cache.stats(), launch_cache.not_kept()
    for _ in range(steps):
        step()
    torch.flagos.synchronize()
    after = launch_cache.stats()
    why = "; ".join(f"{r}: {n / steps:g}" for r, n in launch_cache.not_kept_since(not_kept).items())
    return (f"launch cache, {label}, per token: "
            f"{(after['relaunched'] - stats['relaunched']) / steps:g} relaunched, "
            f"{(after['python'] - stats['python']) / steps:g} through Python"
            + (f"; not kept: {why}" if why else ""))


def _uncached(step):
    def uncached():
        with launch_cache.disabled():
            step()
    return uncached


def _gpu_us_per_call(fn, calls: int) -> float | None:
    """Microseconds of GPU kernel time per call (the sum of the kernels' own durations from
    torch.profiler's CUDA activity): what a step costs the GPU, without the host's launch
    gaps. None without a CUDA twin or when the profiler cannot trace it."""
    return _gpu_per_call(fn, calls)[0]


def _gpu_per_call(fn, calls: int) -> tuple[float | None, float | None]:
    """GPU kernel microseconds and GPU activities (kernels, copies, memsets) per call, from
    torch.profiler's CUDA activity; (None, None) without a CUDA twin or when the profiler
    cannot trace it. The count tells two steps apart that compute the same thing with
    different kernels (a decomposed normalization or attention)."""
    if _native_cuda() is None:
        return None, None
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            torch.flagos.synchronize()
            torch.cuda.synchronize()
        total = sum(e.self_device_time_total for e in prof.key_averages())
        count = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    except Exception as e:  # noqa: BLE001 - report the column as missing, keep the run
        print(f"  (GPU kernel time not measured: {type(e).__name__}: {e})")
        return None, None
    return (total / calls if total else None), (count / calls if count else None)


@torch.no_grad()
def accuracy(m: int, k: int, n: int) -> list[list]:
    """Error of emulated (and native) FP8 _scaled_mm against float64 of the same FP8
    operands, relative L2."""
    g = torch.Generator().manual_seed(0)
    a, sa = quantize_fp8(torch.randn(m, k, generator=g))
    w, sw = quantize_fp8(torch.randn(n, k, generator=g))
    ref = dequantize_fp8(a, sa).double() @ dequantize_fp8(w, sw).double().t()
    fa, fw, fsa, fsw = (t.to("flagos") for t in (a, w, sa, sw))
    rows = []
    routes = [("FP8 emulated", "emulation")] + ([("FP8 native _scaled_mm (boxing)", "boxing")]
                                                if _native_fp8() else [])
    for label, route in routes:
        with flagos.routing.override({"aten::_scaled_mm": route}):
            got = torch._scaled_mm(fa, fw.t(), fsa, fsw, out_dtype=torch.bfloat16).cpu()
        err = ((got.double() - ref).norm() / ref.norm()).item()
        rows.append(["accuracy", f"{m}x{k} @ {k}x{n}, tensorwise, bf16 out", label, err])
    return rows


NOTES = [
    ("weight-only, fused = bf16 activations times the packed weight in one op "
     "(flagos_quant::fp8_weight_linear / nvfp4_weight_linear through boxing: a Triton kernel "
     "that reads the packed weight and dequantizes in registers); weight-only, dequantize "
     "then matmul = the same op routed to emulation: the whole weight dequantized at each "
     "call by routed ops, then a bf16 matmul"),
    ("per-tensor / per-16 activations = the format's activation quantization, then "
     "aten::_scaled_mm routed to flagos-quant's emulation provider"),
    "FP8 native _scaled_mm (boxing) = the same op routed to the CUDA twin's FP8 kernel",
    ("launch cache off = the Triton kernel launched through Python at every call "
     "(flagos.launch_cache.disabled()); otherwise its repeated one-row launches are made "
     "from C++"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small shapes (sim smoke test)")
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    ap.add_argument("--min-time", type=float, default=0.3,
                    help="seconds of calls per linear-layer timing (default 0.3)")
    ap.add_argument("--batches", default="1,16",
                    help="activation rows of the linear-layer timings (default 1,16)")
    ap.add_argument("--rounds", type=int, default=12,
                    help="rounds of the decode timing, each 8 tokens a variant (default 12)")
    ap.add_argument("--only", default="linear,decode,graph,accuracy",
                    help="the tables to run, of linear, decode, graph, accuracy (default all)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    done: list[Table] = []

    def report(table: Table) -> None:  # as each table completes: a cut run keeps them
        print(table.format(), end="\n\n", flush=True)
        done.append(table)
        if args.json:
            write_json(args.json, done)

    gpu = _twin_is_cuda()
    quick = args.quick or not gpu
    shapes = [(1024, 1024)] if quick else [(4096, 4096), (14336, 4096), (4096, 14336)]
    min_time = 0.05 if quick else args.min_time
    # two decoder layers of Llama-3-8B's shapes: at batch 1 their GPU time is the weights'
    # bytes (memory-bound), while eager decoding stays bound by the host's launches
    cfg = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
           "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 8,
           "max_position_embeddings": 512}
    if quick:
        cfg.update(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, vocab_size=1024)
    linear = Table("quant-linear", "FP8 / NVFP4 linear layers on flagos vs bf16 and native",
                   ["shape", "case", "flagos us", "vs flagos bf16", "native cuda us",
                    "vs native cuda"], notes=[*NOTES, ("native cuda = the same computation "
                                                       "on plain CUDA tensors, same process")])
    if "linear" in only:
        for row in bench_linears(shapes, [int(b) for b in args.batches.split(",")], min_time):
            linear.add(*row[1:])
        report(linear)
    no_twin = flagos.twin_device(0) is None
    decode = Table("quant-decode-no-twin" if no_twin else "quant-decode",
                   "Llama decode step (batch 1, KV cache) with FP8 / NVFP4 weights vs bf16"
                   + (", flagos without a twin" if no_twin else ""), ["model", "case", "flagos us per token",
                                       "vs flagos bf16", "GPU kernel us per token",
                                       "GPU time vs bf16"],
                   notes=[*NOTES, ("GPU kernel us = the kernels' own durations per token "
                                   "(torch.profiler, CUDA activity): the memory-bound cost; "
                                   "us per token = wall time, bound by the host's launches "
                                   "in eager decoding")],
                   plot=Plot("bar", x="case", y=["vs flagos bf16", "GPU time vs bf16"],
                             ylabel="time / bf16 on flagos", reference=1.0))
    tokens = {"steps": 4 if quick else 8, "prompt": 16 if quick else 64,
              "rounds": 2 if quick else args.rounds}
    if "decode" in only:
        rows, notes = bench_decode(cfg, **tokens)
        for row in rows:
            decode.add(*row[1:])
        decode.notes += notes
        report(decode)
    graph = Table("quant-graph-decode", "Llama decode step (batch 1, static KV cache) eager and "
                  "replayed from a graph", ["device", "case", "us per token",
                                             "GPU kernel us per token", "GPU activities per token",
                                             "wall / GPU kernel time", "vs torch.cuda.graph",
                                             "tokens equal eager"],
                  notes=[*NOTES, ("graph = torch.flagos.graph on flagos, torch.cuda.graph on "
                                  "plain CUDA: the whole token (forward, argmax, position) "
                                  "replayed with one call"),
                         ("GPU kernel us, GPU activities = the eager step's kernels, copies "
                          "and memsets (torch.profiler, CUDA activity), on each device")],
                  plot=Plot("bar", x="case", y=["wall / GPU kernel time"],
                            ylabel="wall time / GPU kernel time", reference=1.2))
    if "graph" in only:
        for row in bench_graph_decode(cfg, **tokens):
            graph.add(*row)
        report(graph)
    acc = Table("quant-accuracy", "FP8 _scaled_mm, emulated and native, vs float64 of the "
                "same FP8 operands", ["shape", "case", "relative L2 error"], notes=NOTES)
    if "accuracy" in only:
        for row in accuracy(16, 1024 if quick else 4096, 1024 if quick else 4096):
            acc.add(*row[1:3], row[-1])
        report(acc)


if __name__ == "__main__":
    main()
