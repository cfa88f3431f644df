"""How a zoo model is checked: the same seeded weights on the CPU and on flagos, the same
inputs, and per check the largest difference against the CPU (recorded for the results
table, then asserted within the HAL's tolerance).

Checks: ``forward`` (every tensor of the output), ``train`` (the loss's gradient of every
parameter, then one SGD step: the parameters), ``generate`` (greedy decoding with the KV
cache: the tokens must be equal), ``pipeline`` (a Diffusers pipeline's image).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# Each check's time, as it ends (pytest --log-cli-level=INFO shows it live: a first run on
# a GPU spends minutes compiling and autotuning a kernel library's kernels).
log = logging.getLogger("flagos.zoo")

# Every run of this process appends here; conftest writes them out (FLAGOS_ZOO_RESULTS).
RESULTS: list[dict[str, Any]] = []


@dataclasses.dataclass
class Case:
    """One zoo model: how to build it (on the CPU, seeded) and what to check."""

    name: str
    library: str  # "transformers" or "diffusers"
    build: Callable[[], Any]  # the model (or pipeline), random weights from a tiny config
    inputs: Callable[[], dict[str, Any]]  # CPU inputs (seeded)
    checks: tuple[str, ...] = ("forward",)
    # model, inputs -> output (a ModelOutput, tuple or tensor); default model(**inputs)
    forward: Callable[[Any, dict[str, Any]], Any] | None = None
    # output -> scalar loss for the train check; default output.loss
    loss: Callable[[Any], torch.Tensor] | None = None
    generate_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Tolerance:
    rtol: float
    atol: float


def hal_name() -> str:
    return torch.flagos.get_device_properties(0).hal


def tolerance(check: str) -> Tolerance:
    """fp32 throughout. On a CPU twin (sim) the kernels are the CPU's own, so only the
    order of a few reductions differs; a device twin (CUDA) runs other kernels (cuBLAS,
    cuDNN, fused attention; TF32 is turned off by the zoo's conftest), whose rounding
    grows through a network's depth and, for gradients, through its backward."""
    host_twin = torch.flagos.get_device_properties(0).native_device == "cpu"
    if host_twin:
        return Tolerance(rtol=1e-4, atol=1e-5)
    return Tolerance(rtol=2e-3, atol=2e-4) if check == "forward" else Tolerance(rtol=5e-3, atol=5e-4)


def _tensors(out: Any, prefix: str = "out") -> dict[str, torch.Tensor]:
    """The tensors of a model output, by name (ModelOutput, dataclass, tuple, tensor)."""
    if isinstance(out, torch.Tensor):
        return {prefix: out}
    if isinstance(out, dict):  # transformers' and diffusers' outputs are OrderedDicts
        items = list(out.items())
    elif isinstance(out, (tuple, list)):
        items = [(str(i), v) for i, v in enumerate(out)]
    else:
        return {}
    found: dict[str, torch.Tensor] = {}
    for k, v in items:
        found.update(_tensors(v, f"{prefix}.{k}"))
    return found


def _to(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_to(v, device) for v in value)
    return value


def max_diff(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], what: str,
             tol: Tolerance) -> float:
    """Largest |got - want| over matching tensors; asserts each is within `tol`."""
    assert got.keys() == want.keys(), f"{what}: outputs {sorted(got)} != {sorted(want)}"
    assert want, f"{what}: nothing to compare"
    worst = 0.0
    for k, w in want.items():
        g = got[k]
        assert g.device.type == "flagos", f"{what} {k} is on {g.device}, not flagos"
        g = g.detach().cpu()
        w = w.detach()
        if w.is_floating_point():
            worst = max(worst, (g.double() - w.double()).abs().max().item() if w.numel() else 0.0)
        torch.testing.assert_close(g, w, rtol=tol.rtol, atol=tol.atol,
                                   msg=lambda m, k=k: f"{what} {k}: {m}")
    return worst


def _forward(case: Case, model: Any, inputs: dict[str, Any]) -> Any:
    return case.forward(model, inputs) if case.forward else model(**inputs)


def _loss(case: Case, out: Any) -> torch.Tensor:
    return case.loss(out) if case.loss else out.loss


def _parameters(model: Any) -> dict[str, torch.Tensor]:
    # a torch.compile wrapper names its module's parameters "_orig_mod.<name>"
    return {n.removeprefix("_orig_mod."): p for n, p in model.named_parameters()}


def check_forward(case: Case, ref: Any, model: Any, inputs: dict[str, Any]) -> float:
    with torch.no_grad():
        want = _tensors(_forward(case, ref, inputs))
        got = _tensors(_forward(case, model, _to(inputs, "flagos")))
    return max_diff(got, want, f"{case.name} forward", tolerance("forward"))


def check_train(case: Case, ref: Any, model: Any, inputs: dict[str, Any]) -> float:
    """Gradients of the loss, then one SGD step: both compared with the CPU's."""
    tol = tolerance("train")
    grads, params = {}, {}
    for m, dev, store in ((ref, "cpu", grads), (model, "flagos", params)):
        m.zero_grad(set_to_none=True)
        loss = _loss(case, _forward(case, m, _to(inputs, dev)))
        loss.backward()
        store["loss"] = loss.detach()
    diff = max_diff({"loss": params.pop("loss")}, {"loss": grads.pop("loss")},
                    f"{case.name} loss", tol)
    want = {n: p.grad for n, p in _parameters(ref).items() if p.grad is not None}
    got = {n: p.grad for n, p in _parameters(model).items() if p.grad is not None}
    diff = max(diff, max_diff(got, want, f"{case.name} gradient", tol))
    for m in (ref, model):
        torch.optim.SGD(m.parameters(), lr=0.1).step()
    want, got = _parameters(ref), _parameters(model)
    return max(diff, max_diff(got, want, f"{case.name} parameters after a step", tol))


def check_generate(case: Case, ref: Any, model: Any, inputs: dict[str, Any]) -> str:
    """Greedy decoding with the KV cache: the same tokens as on the CPU."""
    kw = dict(do_sample=False, use_cache=True, max_new_tokens=8, **case.generate_kwargs)
    inputs = {k: v for k, v in inputs.items() if k != "labels"}
    with torch.no_grad():
        want = ref.generate(**inputs, **kw)
        got = model.generate(**_to(inputs, "flagos"), **kw)
    assert got.device.type == "flagos"
    got = got.cpu()
    assert got.shape == want.shape and torch.equal(got, want), (
        f"{case.name} generate: flagos {got.tolist()} != cpu {want.tolist()}")
    new = want.shape[-1] - (0 if ref.config.is_encoder_decoder else inputs["input_ids"].shape[-1])
    return f"equal ({new} tokens)"


def check_pipeline(case: Case, ref: Any, model: Any, inputs: dict[str, Any]) -> float:
    """A pipeline's image from the same CPU-seeded noise."""
    seed = inputs.pop("seed")
    want = ref(generator=torch.Generator("cpu").manual_seed(seed), output_type="pt", **inputs)
    got = model(generator=torch.Generator("cpu").manual_seed(seed), output_type="pt", **inputs)
    return max_diff({"image": got.images}, {"image": want.images}, f"{case.name} image",
                    tolerance("forward"))


CHECKS = {"forward": check_forward, "train": check_train, "generate": check_generate,
          "pipeline": check_pipeline}


def run_case(case: Case, mode: str = "eager",
             wrap: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """Builds `case` on the CPU, copies it to flagos (through `wrap`, e.g. torch.compile,
    if given) and runs its checks; records and returns the differences. Raises on the
    first failed check (the record says which)."""
    record: dict[str, Any] = {"model": case.name, "library": case.library, "hal": hal_name(),
                              "mode": mode, "status": "fail"}
    RESULTS.append(record)
    start = time.perf_counter()
    torch.manual_seed(0)
    ref = case.build()
    model = copy.deepcopy(ref).to("flagos")
    for m in (ref, model):
        if hasattr(m, "eval"):
            m.eval()  # dropout off: the CPU and flagos runs must draw the same numbers
    run_model = wrap(model) if wrap else model
    torch.manual_seed(1)
    inputs = case.inputs()
    try:
        for check in case.checks:
            record[check] = "failed"
            began = time.perf_counter()
            record[check] = CHECKS[check](case, ref, run_model, dict(inputs))
            log.info("%s %s: %s in %.1f s", case.name, check, record[check],
                     time.perf_counter() - began)
        record["status"] = "pass"
    except BaseException as e:
        record["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        raise
    finally:
        record["seconds"] = round(time.perf_counter() - start, 2)
    return record


def run_in_process(name: str, mode: str, env: dict[str, str], *options: str,
                   timeout: float = 300) -> tuple[subprocess.CompletedProcess, dict | None]:
    """Runs case ``name`` through ``zoo_run.py`` in a process of its own (for settings read
    when flagos or Triton load), adds its record to RESULTS and returns the process and
    the record (None: it printed none)."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("zoo_run.py")), "--mode", mode,
         *options, name], env=env, capture_output=True, text=True, timeout=timeout,
        check=False)
    records = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines()
               if line.startswith("ZOO-RESULT ")]
    RESULTS.extend(records)
    return proc, records[0] if records else None
