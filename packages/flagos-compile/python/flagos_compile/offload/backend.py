"""The offload backend: ``torch.compile`` for HALs whose chip runs whole compiled graphs.

For each graph Dynamo captures: trace it to core ATen ops at its static shapes, with
module weights frozen; ask the HAL's graph compiler which nodes it takes and partition
the graph into regions of those (``CapabilityBasedPartitioner``); export each region to
ONNX, compile it (or take it from the disk cache), load it with the HAL's graph runtime;
run the rest op by op through flagos' routes on the same device. A region that fails to
export, compile or load runs eagerly, unless ``strict``. ``explain()`` says what went where.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

from flagos_compile.offload import cache as cache_mod
from flagos_compile.offload.export import exporter_missing, to_onnx
from flagos_compile.offload.region import OffloadedRegion
from flagos_compile.offload.support import CompilerSupport

log = logging.getLogger(__name__)

# Nodes that move no data on a chip (metadata only): they do not count toward min_block_size.
_VIEWS = frozenset({"aten.view", "aten._unsafe_view", "aten.reshape", "aten.squeeze", "aten.unsqueeze",
                    "aten.alias", "aten.clone"})


class OffloadError(RuntimeError):
    """Raised in strict mode where the default would run part of the graph eagerly."""


@dataclass
class RegionReport:
    """One partition of supported nodes and what became of it."""
    name: str
    ops: list[str]                 # ATen ops, in graph order
    offloaded: bool = False
    reason: str = ""               # why it runs eagerly (when not offloaded)
    onnx_ops: list[str] = field(default_factory=list)
    format: str = ""
    cache: str = ""                # "hit", "miss" or "" (no cache)
    compile_s: float = 0.0


@dataclass
class GraphReport:
    """One graph Dynamo handed to the backend."""
    device: str = ""
    hal: str = ""
    compiler: str = ""
    whole_graph_reason: str = ""   # set when nothing could be offloaded at all
    regions: list[RegionReport] = field(default_factory=list)
    eager_nodes: list[tuple[str, str]] = field(default_factory=list)  # (node, why)

    def text(self) -> str:
        head = f"graph on {self.device or '?'} (HAL {self.hal or '?'}, compiler {self.compiler or 'none'})"
        lines = [head]
        if self.whole_graph_reason:
            lines.append(f"  everything eager: {self.whole_graph_reason}")
        for r in self.regions:
            if r.offloaded:
                lines.append(f"  {r.name}: offloaded, {len(r.ops)} ops as {r.format} "
                             f"(cache {r.cache or 'off'}, {r.compile_s:.2f}s): {', '.join(r.ops)}")
            else:
                lines.append(f"  {r.name}: eager, {len(r.ops)} ops: {r.reason}")
        for node, why in self.eager_nodes:
            lines.append(f"  eager node {node}: {why}")
        return "\n".join(lines)


def _flagos_device(example_inputs: Sequence[Any]) -> int | None:
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.device.type == "flagos":
            return x.device.index or 0
    return None


def _graph_target(device: int) -> tuple[Any, str] | str:
    """The graph compiler and artifact format for flagos:`device`, or why there is none."""
    from flagos import provider_api

    props = provider_api.device_properties(device)
    hal_formats = provider_api.graph_formats(device)
    if not hal_formats:
        abi = next((h["abi_version"] for h in provider_api.hal_info() if h["path"] == props["hal_path"]), "?")
        return (f"the HAL '{props['hal']}' (ABI {abi}) has no graph runtime: its chip runs ops, "
                "not compiled graphs")
    from flagos_hal.graph_compiler import find
    compiler = find(props["hal"])
    if compiler is None:
        return (f"no graph compiler is installed for HAL '{props['hal']}' (entry point group "
                "flagos.graph_compiler)")
    fmt = next((f for f in compiler.formats if f in hal_formats), None)
    if fmt is None:
        return (f"{compiler.name} writes {', '.join(compiler.formats)}; the HAL '{props['hal']}' "
                f"loads {', '.join(hal_formats)}: no format in common")
    return exporter_missing() or (compiler, fmt)


def unavailable_reason(device: int = 0) -> str | None:
    """Why graphs cannot be offloaded to flagos:`device` (no graph runtime in its HAL, no
    graph compiler installed for it, no artifact format in common, no ONNX exporter), or
    None when they can. Every compiled graph on such a device runs eagerly."""
    target = _graph_target(device)
    return target if isinstance(target, str) else None


def _is_weight(node: torch.fx.Node, value: Any) -> bool:
    """A Dynamo graph input that is a module's parameter or buffer."""
    if isinstance(value, torch.nn.Parameter):
        return True
    arg = node.meta.get("grapharg")
    source = getattr(arg, "source", None)
    name = getattr(source, "name", "")  # a property in recent torch releases, a method before
    name = str(name() if callable(name) else name)
    return "._buffers[" in name or "._parameters[" in name


def _capture(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> torch.fx.GraphModule:
    """The graph as core ATen ops at the example inputs' static shapes (a fresh fake mode:
    Dynamo's own would make the shapes symbolic)."""
    from torch._decomp import core_aten_decompositions
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    mode = FakeTensorMode()
    fakes = [mode.from_tensor(x, static_shapes=True) if isinstance(x, torch.Tensor) else x
             for x in example_inputs]
    with torch.no_grad(), mode:
        return make_fx(gm, decomposition_table=core_aten_decompositions(), tracing_mode="real")(*fakes)


def _example(meta_val: torch.Tensor) -> torch.Tensor:
    return torch.randn(tuple(meta_val.shape)).to(meta_val.dtype)


class OffloadBackend:
    """A Dynamo backend: ``torch.compile(model, backend=OffloadBackend())``.

    strict: raise OffloadError instead of running anything eagerly that should have been
        offloaded (a graph the HAL cannot take, a region that fails to compile).
    min_block_size: regions with fewer compute ops than this stay eager.
    cache_dir: where artifacts are cached (default: FLAGOS_OFFLOAD_CACHE or
        ~/.cache/flagos/offload); False turns the cache off.
    """

    def __init__(self, strict: bool = False, min_block_size: int = 1,
                 cache_dir: str | bool | None = None) -> None:
        self.strict = strict
        self.min_block_size = min_block_size
        if cache_dir is False:
            self.cache = cache_mod.ArtifactCache(None)
        else:
            self.cache = cache_mod.ArtifactCache(cache_dir or cache_mod.default_dir())
        self.reports: list[GraphReport] = []

    # ---- the Dynamo entry --------------------------------------------------------------
    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        report = GraphReport()
        self.reports.append(report)
        try:
            return self._compile(gm, list(example_inputs), report)
        except OffloadError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of the pipeline: eager, or raise if strict
            self._give_up(report, f"offload failed: {type(e).__name__}: {e}")
            log.warning("flagos offload: running the graph eagerly: %s", report.whole_graph_reason)
            return gm.forward

    def explain(self) -> str:
        """What every graph compiled by this backend offloaded, and why the rest was not."""
        return "\n".join(r.text() for r in self.reports) or "no graph compiled by this backend yet"

    # ---- steps -------------------------------------------------------------------------
    def _give_up(self, report: GraphReport, why: str) -> None:
        report.whole_graph_reason = why
        if self.strict:
            raise OffloadError(f"flagos offload (strict): {why}")

    def _compile(self, gm, example_inputs, report: GraphReport) -> Callable:
        from flagos import provider_api

        device = _flagos_device(example_inputs)
        if device is None:
            self._give_up(report, "no input is a flagos tensor")
            return gm.forward
        props = provider_api.device_properties(device)
        report.device, report.hal = f"flagos:{device}", props["hal"]
        target = _graph_target(device)
        if isinstance(target, str):
            self._give_up(report, target)
            return gm.forward
        compiler, fmt = target
        report.compiler = f"{compiler.name} {compiler.version}"
        if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad
                                           for x in example_inputs):
            self._give_up(report, "gradients are enabled: offload is for inference (run under "
                                  "torch.no_grad() or torch.inference_mode())")
            return gm.forward
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        weight_pos = {i for i, (n, x) in enumerate(zip(placeholders, example_inputs)) if _is_weight(n, x)}
        aten = _capture(gm, example_inputs)
        return self._partition_and_offload(aten, example_inputs, weight_pos, compiler, fmt, device, report)

    def _partition_and_offload(self, aten, example_inputs, weight_pos, compiler, fmt, device, report):
        support = CompilerSupport(compiler)
        partitioner = CapabilityBasedPartitioner(aten, support, allows_single_node_partition=True)
        partitions = partitioner.propose_partitions()
        for node in aten.graph.nodes:
            if node.name in support.reasons and node.op == "call_function":
                report.eager_nodes.append((node.name, support.reasons[node.name]))
        kept = []
        for p in partitions:
            compute = [n for n in p.nodes if n.op == "call_function" and n.target is not operator.getitem
                       and str(getattr(n.target, "overloadpacket", "")) not in _VIEWS]
            if len(compute) >= self.min_block_size:
                kept.append(p)
            else:
                for n in p.nodes:
                    why = f"in a region of {len(compute)} compute op(s), below min_block_size={self.min_block_size}"
                    report.eager_nodes.append((n.name, why))
        fused = partitioner.fuse_partitions(kept)
        # Frozen weights: the outer graph's placeholders that are module weights.
        outer_inputs = [n for n in fused.graph.nodes if n.op == "placeholder"]
        values = {n: x for n, x in zip(outer_inputs, example_inputs)}
        weights = {n for i, n in enumerate(outer_inputs) if i in weight_pos}
        for node in list(fused.graph.nodes):
            if node.op != "call_module" or not node.target.startswith("fused_"):
                continue
            sub = getattr(fused, node.target)
            region = RegionReport(name=node.target, ops=[str(n.target) for n in sub.graph.nodes
                                                         if n.op == "call_function"
                                                         and n.target is not operator.getitem])
            report.regions.append(region)
            try:
                setattr(fused, node.target,
                        self._offload(node, sub, values, weights, compiler, fmt, device, region))
                region.offloaded = True
            except OffloadError:
                raise
            except Exception as e:
                region.reason = f"{type(e).__name__}: {e}"
                if self.strict:
                    raise OffloadError(f"flagos offload (strict): {node.target} failed: {region.reason}") from e
                log.warning("flagos offload: %s runs eagerly: %s", node.target, region.reason)
        # It runs the offloaded regions through the HAL, the rest op by op through the routes.
        fused.recompile()
        return fused

    def _offload(self, node, sub, values, weights, compiler, fmt, device, region: RegionReport):
        args = list(node.args)
        if any(not isinstance(a, torch.fx.Node) for a in args):
            raise ValueError("a region argument is not a graph value")
        frozen = {i: values[a] for i, a in enumerate(args) if a in weights}
        # Shapes and dtypes of the other arguments: the outer node's, else the region's own
        # placeholder's (an output of another fused region has only the latter).
        inner = [n for n in sub.graph.nodes if n.op == "placeholder"]
        dyn_meta = [a.meta.get("val", p.meta.get("val")) for i, (a, p) in enumerate(zip(args, inner))
                    if i not in frozen]
        if any(not isinstance(m, torch.Tensor) for m in dyn_meta):
            raise ValueError("a region input is not a tensor of known shape")
        out_val = next(n for n in sub.graph.nodes if n.op == "output").args[0]
        tuple_out = isinstance(out_val, (tuple, list))
        start = time.perf_counter()
        key = cache_mod.key(sub.code, [(tuple(m.shape), m.dtype) for m in dyn_meta], frozen.values(), compiler, fmt)
        hit = self.cache.get(key)
        if hit is not None:
            artifact, meta = hit
            region.cache = "hit"
            region.onnx_ops = meta.get("onnx_ops", [])
        else:
            cpu_frozen = {i: w.detach().to("cpu") for i, w in frozen.items()}
            onnx_model = to_onnx(sub, len(args), cpu_frozen, [_example(m) for m in dyn_meta])
            region.onnx_ops = _onnx_op_types(onnx_model)
            artifact = compiler.compile(onnx_model, fmt)
            if self.cache.dir is not None:
                region.cache = "miss"
                self.cache.put(key, artifact, {"format": fmt, "onnx_ops": region.onnx_ops,
                                               "compiler": f"{compiler.name} {compiler.version}"})
        from flagos import provider_api
        graph = provider_api.Graph(device, fmt, artifact)
        _check_signature(graph, dyn_meta, out_val, node.target)
        region.format = fmt
        region.compile_s = time.perf_counter() - start
        return OffloadedRegion(node.target, graph, len(args), frozen, tuple_out)


def _onnx_op_types(model: bytes) -> list[str]:
    import onnx
    return sorted({n.op_type for n in onnx.load_from_string(model).graph.node})


def _check_signature(graph, dyn_meta, out_val, name: str) -> None:
    """The loaded graph takes the region's inputs and gives its outputs (count, shape, dtype)."""
    outs = out_val if isinstance(out_val, (tuple, list)) else [out_val]
    want_in = [(tuple(m.shape), m.dtype) for m in dyn_meta]
    want_out = [(tuple(o.meta["val"].shape), o.meta["val"].dtype) for o in outs]
    got_in = [(tuple(t["shape"]), t["dtype"]) for t in graph.inputs]
    got_out = [(tuple(t["shape"]), t["dtype"]) for t in graph.outputs]
    if got_in != want_in or got_out != want_out:
        raise ValueError(f"{name}: the compiled graph takes {got_in} and gives {got_out}; the region "
                         f"takes {want_in} and gives {want_out}")


offload_backend = OffloadBackend()
"""The instance behind ``torch.compile(model, backend="flagos_offload")``."""
