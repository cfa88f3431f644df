"""OpInfo sweep: every OpInfo of PyTorch's op database, run on flagos and on the CPU.

For each OpInfo in ``torch.testing._internal.common_methods_invocations.op_db`` that supports
the dtype on the CPU, the sample inputs are made on the CPU, copied to flagos, and the op is
run on both with the route forced to one provider (``flagos.routing.override({"default":
[provider]})``). Checked per sample:

- forward: outputs equal (dtype, shape, values within tolerance; flagos results on flagos);
- backward (``op.supports_autograd``, floating dtype): gradients w.r.t. every input that
  requires grad, for the same random output gradients;
- ``out=`` (``op.supports_out``): into empty flagos tensors, which the op must resize;
- in-place (``op.inplace_variant``): the mutated input;
- every call: PyTorch's deprecation warning for an out tensor of the wrong shape that a
  kernel resized is an error (no route may hand a kernel such an out tensor).

``--layouts noncontiguous,channels_last`` runs each sample again with its tensors laid out
otherwise, the flagos copies with exactly the CPU tensors' strides: ``noncontiguous``
(OpInfo's ``SampleInput.noncontiguous()``: every tensor a strided view with gaps) and
``channels_last`` (every 4-D tensor channels-last). Kernels that assume a contiguous
input are wrong only there.

A sample whose CPU run raises is "not runnable on CPU" and is left out; an OpInfo with no
runnable sample is skipped (not counted). Random ops: both runs are seeded identically with
``torch.manual_seed``; when the values still differ and the CPU run itself gives different
values under another seed (the op consumes random numbers), only dtypes and shapes are
compared and the OpInfo is counted as "random (shape-only)" in the table.

On a HAL whose twin is a native device other than the CPU (CUDA), the twin's kernels draw
from the twin's generator (another algorithm than the CPU's), so a twin route's random ops
cannot match the CPU. Where the forward or in-place values of an op that consumes the
default generator differ from the CPU's, they are compared with the same op run natively
on the twin device under the same seed (the route must reproduce the twin's own numbers);
such samples count as "twin reference". Other ops must match the CPU; TF32 is off on CUDA
twins so that cudnn and cuBLAS compute in float32.

Ops run in worker subprocesses (a crash or a hang costs one OpInfo, reported as failed).

    python integration_tests/opinfo_sweep.py [--route cpu|boxing|twin|gems,boxing|...]
        [--ops name,...] [--max-samples N] [--dtype float32] [--jobs J] [--json out.json]
        [--layouts noncontiguous,channels_last]

``--route twin`` registers the core's twin engine as a provider named ``twin`` (what the
boxing package does under the name ``boxing``), for use without that package. A route of
several providers (``gems,boxing``) forces that chain. ``--route flaggems-cuda`` is the
reference for the gems provider: no flagos at all, the samples on plain CUDA tensors with
``flag_gems.enable()`` (FlagGems' kernels registered on the CUDA key), against the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import selectors
import subprocess
import sys
import time
import traceback
import warnings
from collections import Counter

_HERE = os.path.dirname(os.path.abspath(__file__))

TOL = {  # (rtol, atol): forward; gradients get 10x
    "float16": (1e-2, 1e-2), "bfloat16": (1.6e-2, 1e-2),
    "float32": (1e-4, 1e-5), "float64": (1e-7, 1e-7),
    "complex64": (1e-4, 1e-5), "complex128": (1e-7, 1e-7),
}


# --------------------------------------------------------------------------------------
# worker side: runs OpInfos in this process


def _full_fp32_on_cuda() -> None:
    import torch

    # (torch.testing._internal freezes the torch.backends.cudnn setters)
    torch._C._set_cudnn_allow_tf32(False)
    torch.backends.cuda.matmul.allow_tf32 = False


FLAGGEMS_CUDA = "flaggems-cuda"
_DEV = ["flagos"]  # the device type the samples run on: flagos, or cuda for FLAGGEMS_CUDA


def _setup_route(route: str) -> None:
    _full_fp32_on_cuda()
    if route == FLAGGEMS_CUDA:
        import flag_gems

        _DEV[0] = "cuda"
        flag_gems.enable()
        return
    import flagos

    if route == "twin" and "twin" not in flagos.routing.providers():
        from flagos.provider_api import register_engine_provider

        class TwinProvider(flagos.routing.Provider):
            name = "twin"
            is_cpp = True

        register_engine_provider("twin", "twin")
        flagos.routing.register_provider(TwinProvider())
    for name in route.split(","):
        if name not in flagos.routing.providers():
            raise SystemExit(f"provider {name!r} is not installed; installed: "
                             f"{sorted(flagos.routing.providers())}")


def op_key(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def _to_flagos(x, keep_strides: bool = False):
    """``x`` (a tensor or a structure of them) copied to flagos; with ``keep_strides``
    every tensor keeps its strides exactly (a plain copy to a device makes a tensor with
    gaps contiguous), but for an expanded one, which is copied as it is."""
    import torch

    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided:
            raise _Unsupported(f"layout {x.layout}")
        if keep_strides and torch._debug_has_internal_overlap(x) != 1:
            t = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=_DEV[0])
            t.copy_(x.detach())
        else:
            t = x.detach().to(_DEV[0])
        if x.requires_grad:
            t.requires_grad_(True)
        return t
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device(_DEV[0])
    if isinstance(x, list):
        return [_to_flagos(e, keep_strides) for e in x]
    if isinstance(x, tuple):
        return tuple(_to_flagos(e, keep_strides) for e in x)
    if isinstance(x, dict):
        return {k: (_DEV[0] if k == "device" and v == "cpu" else _to_flagos(v, keep_strides))
                for k, v in x.items()}
    return x


LAYOUTS = ("noncontiguous", "channels_last")


def _relaid(sample, layout: str):
    """``sample`` with its tensors laid out as ``layout`` says (same values), or None when
    that changes no tensor of it."""
    import torch

    if layout == "noncontiguous":
        new = sample.noncontiguous()
    else:
        def last(t):
            if isinstance(t, torch.Tensor) and t.dim() == 4 and t.layout == torch.strided:
                c = t.detach().contiguous(memory_format=torch.channels_last)
                return c.requires_grad_(t.requires_grad)
            return t
        new = sample.transform(last)
    old_strides = [t.stride() for t in _tensors((sample.input, sample.args, sample.kwargs), [])]
    new_strides = [t.stride() for t in _tensors((new.input, new.args, new.kwargs), [])]
    return None if old_strides == new_strides else new


def _clone(x):
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, list):
        return [_clone(e) for e in x]
    if isinstance(x, tuple):
        return tuple(_clone(e) for e in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _tensors(x, out):
    import torch

    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for e in x:
            _tensors(e, out)
    elif isinstance(x, dict):
        for e in x.values():
            _tensors(e, out)
    return out


class _Unsupported(Exception):
    pass


class _Mismatch(AssertionError):
    pass


class _TwinReferenced(Exception):
    """The forward values matched the native twin device's run (not the CPU's)."""


def _names_cpu(x) -> bool:
    """Whether arguments ask for the CPU device (e.g. zeros_like(x, device="cpu"))."""
    import torch

    if isinstance(x, str):
        return x == "cpu"
    if isinstance(x, torch.device):
        return x.type == "cpu"
    if isinstance(x, (list, tuple)):
        return any(_names_cpu(e) for e in x)
    if isinstance(x, dict):
        return any(_names_cpu(e) for e in x.values())
    return False


def _mentions_flagos(x) -> bool:
    """Whether arguments hold a flagos tensor or name the flagos device."""
    import torch

    if isinstance(x, torch.Tensor):
        return x.device.type == _DEV[0]
    if isinstance(x, str):
        return x.startswith(_DEV[0])
    if isinstance(x, torch.device):
        return x.type == _DEV[0]
    if isinstance(x, (list, tuple)):
        return any(_mentions_flagos(e) for e in x)
    if isinstance(x, dict):
        return any(_mentions_flagos(e) for e in x.values())
    return False


def _to_cpu_checked(x, ref, check_device=True):
    """flagos results to CPU; a tensor that should be on flagos but is not is an error."""
    import torch

    if isinstance(x, torch.Tensor):
        if (check_device and isinstance(ref, torch.Tensor) and ref.device.type == "cpu"
                and x.device.type != _DEV[0]):
            raise _Mismatch(f"result on {x.device}, expected {_DEV[0]}")
        return x.detach().cpu().resolve_conj().resolve_neg()
    if isinstance(x, (list, tuple)) and isinstance(ref, (list, tuple)) and len(x) == len(ref):
        return [_to_cpu_checked(a, b, check_device) for a, b in zip(x, ref)]
    return x


def _plain(x):
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().resolve_conj().resolve_neg()
    if isinstance(x, (list, tuple)):
        return [_plain(e) for e in x]
    return x


def _compare(actual, expected, dtype_name: str, scale: float = 1.0, shape_only=False,
             check_device=True) -> None:
    import torch

    actual = _plain(_to_cpu_checked(actual, expected, check_device))
    expected = _plain(expected)
    if shape_only:
        a, e = _tensors(actual, []), _tensors(expected, [])
        if len(a) != len(e):
            raise _Mismatch(f"{len(a)} tensors, expected {len(e)}")
        for x, y in zip(a, e):
            if x.shape != y.shape or x.dtype != y.dtype:
                raise _Mismatch(f"{x.dtype}{list(x.shape)} != {y.dtype}{list(y.shape)}")
        return
    rtol, atol = TOL.get(dtype_name, (1e-4, 1e-5))
    torch.testing.assert_close(actual, expected, rtol=rtol * scale, atol=atol * scale,
                               equal_nan=True, check_device=False, check_stride=False)


# PyTorch's warning for a kernel that resizes an out tensor which has elements: an error
# here, so that no route hands a kernel an out tensor of the wrong shape. The CPU run
# raises it too when the sample itself passes such a tensor (the sample is then not run).
RESIZED_OUT = "An output with one or more elements was resized"


def _call(fn, sample, seed):
    import torch

    torch.manual_seed(seed)
    # torch.manual_seed reaches flagos only when torch.flagos has _is_in_bad_fork; seed it
    # directly so that both runs draw the same numbers either way.
    if _DEV[0] == "flagos":
        torch.flagos.manual_seed_all(seed)
    with _resized_out_is_error():
        return fn(sample[0], *sample[1], **sample[2])


@contextlib.contextmanager
def _resized_out_is_error():
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=RESIZED_OUT)
        yield


# Ops whose results are uninitialized memory: only dtypes and shapes are comparable.
UNINITIALIZED = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                 "new_empty_strided"}


def _uses_rng(fn, cpu_sample, seed, first) -> bool:
    """True when the CPU run gives other values under another seed (a random op), or
    under the same seed (uninitialized memory: empty, new_empty, ...)."""
    for s in (seed + 1, seed):
        try:
            other = _call(fn, _clone(cpu_sample), s)
            _compare(other, first, "float64", check_device=False)
        except AssertionError:
            return True
        except Exception:  # noqa: BLE001
            return False
    return False


def _native_twin():
    """The native device the forced twin route runs kernels on, when it is not the CPU."""
    if _ROUTE[0] == FLAGGEMS_CUDA:
        import torch

        return torch.device("cuda")
    import flagos

    if _ROUTE[0].split(",")[0] not in ("boxing", "twin", "gems"):
        return None
    twin = flagos.twin_device()
    return twin if twin is not None and twin.type != "cpu" else None


def _to_device(x, dev):
    import torch

    if isinstance(x, torch.Tensor):
        t = x.detach().to(dev)
        return t.requires_grad_(True) if x.requires_grad else t
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device(dev)
    if isinstance(x, (list, tuple)):
        return type(x)(_to_device(e, dev) for e in x)
    if isinstance(x, dict):
        return {k: (str(dev) if k == "device" and v == "cpu" else _to_device(v, dev))
                for k, v in x.items()}
    return x


def _consumes_rng(fn, cpu_sample, seed) -> bool:
    """Whether the CPU run calls an ATen op tagged nondeterministic_seeded (it draws random
    numbers), also for OpInfos that seed and restore the generator themselves."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seeded(TorchDispatchMode):
        seen = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
                Seeded.seen = True
            return func(*args, **(kwargs or {}))

    try:
        with Seeded():
            _call(fn, _clone(cpu_sample), seed)
    except Exception:  # noqa: BLE001
        return False
    return Seeded.seen


def _matches_twin(fn, cpu_sample, seed, fl_result, dtype_name, check_device) -> bool:
    """For a random op only: whether `fl_result` equals `fn` run natively on the twin device
    (not the CPU) under the same seed, as a twin route must (the twin's generator draws
    other numbers than the CPU's). A gems route's reference is FlagGems itself on the twin
    (its random kernels draw other numbers than ATen's)."""
    import contextlib

    twin = _native_twin()
    if twin is None or not _consumes_rng(fn, cpu_sample, seed):
        return False
    library = contextlib.nullcontext()
    if _ROUTE[0].split(",")[0] == "gems":
        import flag_gems

        library = flag_gems.use_gems()
    try:
        with library:
            ref = _call(fn, _to_device(_clone(cpu_sample), twin), seed)
        ref = _to_device(ref, "cpu")
        _compare(fl_result, ref, dtype_name, check_device=check_device)
    except Exception:  # noqa: BLE001
        return False
    return True


_ROUTE = [""]  # the route forced by run_op


class Result:
    def __init__(self) -> None:
        self.ran = 0            # samples runnable on CPU
        self.failed = 0
        self.shape_only = 0     # samples compared by shape/dtype only (random ops)
        self.twin_reference = 0  # samples matched against the native twin device's run
        self.unsupported = 0    # sparse/quantized samples (refused with a clear error)
        self.checks = Counter()  # which checks ran: forward, backward, out, inplace
        self.errors: list[str] = []

    def fail(self, what: str, e: BaseException) -> None:
        self.failed += 1
        msg = f"{type(e).__name__}: {str(e).strip()}"
        first = msg.splitlines()[0] if msg else type(e).__name__
        self.errors.append(f"{what}: {first[:300]}")


def _unsupported_layout(x) -> bool:
    return any(t.layout != torch_strided() or t.is_quantized for t in _tensors(x, []))


def torch_strided():
    import torch

    return torch.strided


def _run_sample(op, sample, fl_sample, dtype, res: Result, seed: int) -> None:
    import torch

    dname = str(dtype).replace("torch.", "")
    cpu = (sample.input, list(sample.args), dict(sample.kwargs))
    if _unsupported_layout(cpu):
        res.unsupported += 1  # sparse/quantized inputs: flagos tensors are strided only
        return
    fl = fl_sample if fl_sample is not None else _to_flagos(cpu)
    # forward
    try:
        cpu_out = _call(op, cpu, seed)
    except Exception:  # noqa: BLE001 - not runnable on CPU
        return
    if _unsupported_layout(cpu_out):
        # A sparse/quantized result: flagos must refuse it with a clear error.
        try:
            _call(op, fl, seed)
        except Exception as e:  # noqa: BLE001
            if "layout not supported" in str(e) or "not supported" in str(e).lower():
                res.unsupported += 1
                return
            res.ran += 1
            res.fail("forward (unsupported layout, unclear error)", e)
            return
        res.ran += 1
        res.fail("forward", _Mismatch("a sparse/quantized result was not refused"))
        return
    res.ran += 1
    shape_only = False
    try:
        res.checks["forward"] += 1
        fl_out = _call(op, fl, seed)
        try:
            if op.name in UNINITIALIZED:
                raise _Mismatch("uninitialized memory")
            _compare(fl_out, cpu_out, dname, check_device=_mentions_flagos(fl) and not _names_cpu(fl))
        except AssertionError:
            if op.name not in UNINITIALIZED and _matches_twin(
                    op, cpu, seed, fl_out, dname, _mentions_flagos(fl) and not _names_cpu(fl)):
                res.twin_reference += 1
                raise _TwinReferenced from None
            if op.name not in UNINITIALIZED and not _uses_rng(op, cpu, seed, cpu_out):
                raise
            shape_only = True
            res.shape_only += 1
            _compare(fl_out, cpu_out, dname, shape_only=True, check_device=_mentions_flagos(fl) and not _names_cpu(fl))
    except _TwinReferenced:
        shape_only = True  # values vs the CPU's are not comparable below
    except Exception as e:  # noqa: BLE001
        res.fail("forward", e)
        return
    # backward
    if op.supports_autograd and (dtype.is_floating_point or dtype.is_complex):
        cpu_in = [t for t in _tensors(cpu, []) if t.requires_grad]
        fl_in = [t for t in _tensors(fl, []) if t.requires_grad]
        try:
            cpu_outs = [t for t in _tensors(sample.output_process_fn_grad(cpu_out), [])
                        if t.requires_grad]
        except Exception:  # noqa: BLE001
            cpu_outs = []
        if cpu_in and cpu_outs:
            g = torch.Generator().manual_seed(seed)
            grads = [torch.randn(t.shape, dtype=t.dtype, generator=g) for t in cpu_outs]
            try:
                cpu_g = torch.autograd.grad(cpu_outs, cpu_in, grads, allow_unused=True)
            except Exception:  # noqa: BLE001 - backward not runnable on CPU
                cpu_g = None
            if cpu_g is not None:
                res.checks["backward"] += 1
                try:
                    fl_outs = [t for t in _tensors(sample.output_process_fn_grad(fl_out), [])
                               if t.requires_grad]
                    if len(fl_outs) != len(cpu_outs):
                        raise _Mismatch(f"{len(fl_outs)} differentiable outputs, expected "
                                        f"{len(cpu_outs)}")
                    with _resized_out_is_error():
                        fl_g = torch.autograd.grad(fl_outs, fl_in, [x.to(_DEV[0]) for x in grads],
                                                   allow_unused=True)
                    if not shape_only:
                        _compare(list(fl_g), list(cpu_g), dname, scale=10.0)
                    else:
                        _compare(list(fl_g), list(cpu_g), dname, shape_only=True)
                except Exception as e:  # noqa: BLE001
                    res.fail("backward", e)
                    return
    # out=
    if op.supports_out and not shape_only:
        outs = cpu_out if isinstance(cpu_out, (tuple, list)) else (cpu_out,)
        if outs and all(isinstance(t, torch.Tensor) for t in outs):
            def with_out(dev, s):
                o = tuple(torch.empty(0, dtype=t.dtype, device=dev) for t in outs)
                o = o if isinstance(cpu_out, (tuple, list)) else o[0]
                return (s[0], s[1], {**s[2], "out": o}), o
            try:
                cs, co = with_out("cpu", _clone(cpu))
                cr = _call(op, cs, seed)
            except Exception:  # noqa: BLE001
                cr = None
            if cr is not None:
                res.checks["out"] += 1
                try:
                    fs, fo = with_out(_DEV[0], _clone(fl))
                    fr = _call(op, fs, seed)
                    _compare(fo, co, dname)
                    _compare(fr, cr, dname)
                except Exception as e:  # noqa: BLE001
                    res.fail("out=", e)
                    return
    # in-place
    ip = op.inplace_variant
    if ip is not None and not shape_only:
        try:
            cs = _clone(cpu)
            shape = getattr(cs[0], "shape", None)
            cr = _call(ip, cs, seed)
            if getattr(cs[0], "shape", None) != shape:
                # The CPU kernel resized its input: the values then depend on uninitialized
                # memory (addbmm_ on a broadcast input); not a comparable sample.
                cr = None
        except Exception:  # noqa: BLE001
            cr = None
        if cr is not None:
            res.checks["inplace"] += 1
            try:
                fs = _clone(fl)
                fr = _call(ip, fs, seed)
                if cr is cs[0] and fr is not fs[0]:
                    raise _Mismatch("in-place variant did not return its input")
                try:
                    _compare(fs[0], cs[0], dname)
                except AssertionError:
                    def mutated(*a, **k):
                        ip(*a, **k)
                        return a[0]
                    if _matches_twin(mutated, cpu, seed, fs[0], dname, True):
                        res.twin_reference += 1
                        return
                    if not _uses_rng(mutated, cpu, seed, cs[0]):
                        raise
                    res.shape_only += 1
                    _compare(fs[0], cs[0], dname, shape_only=True)
            except Exception as e:  # noqa: BLE001
                res.fail("inplace", e)


def _same_values(a, b) -> bool:
    """The flagos sample `a` holds the CPU sample `b`'s structure, values and views."""
    import torch

    if isinstance(b, torch.Tensor):
        if not isinstance(a, torch.Tensor) or a.device.type == "cpu" and b.device.type == "cpu":
            return isinstance(a, torch.Tensor) and torch.equal(a, b)
        if a.device.type != _DEV[0] or a.requires_grad != b.requires_grad:
            return False
        if a.shape != b.shape or a.dtype != b.dtype or a.stride() != b.stride():
            return False
        return torch.equal(a.detach().cpu(), b.detach()) or bool(
            torch.isnan(b).any() and torch.equal(a.detach().cpu().nan_to_num(), b.nan_to_num()))
    if isinstance(b, (list, tuple)):
        return isinstance(a, (list, tuple)) and len(a) == len(b) and all(
            _same_values(x, y) for x, y in zip(a, b))
    if isinstance(b, dict):
        return isinstance(a, dict) and a.keys() == b.keys() and all(
            _same_values(a[k], b[k]) for k in b)
    if isinstance(b, (bool, int, float, complex)):
        return type(a) is type(b) and (a == b or a != a and b != b)  # noqa: PLR0124 - NaN
    return True  # other arguments (strings, devices) may name the device


def _placed_like(cpu, fl):
    """The CPU sample `cpu` copied to where the OpInfo's own flagos sample `fl` puts each
    tensor (indices it keeps on the CPU on purpose stay there); None when the two samples
    differ in structure. For devices whose generator draws other numbers than the CPU's."""
    import torch

    if isinstance(cpu, torch.Tensor):
        if not isinstance(fl, torch.Tensor) or fl.shape != cpu.shape or fl.dtype != cpu.dtype:
            raise _Unsupported("structure")
        return _clone(cpu).requires_grad_(cpu.requires_grad) if fl.device.type == "cpu" \
            else _to_flagos(cpu)
    if isinstance(cpu, (list, tuple)):
        if type(fl) is not type(cpu) or len(fl) != len(cpu):
            raise _Unsupported("structure")
        return type(cpu)(_placed_like(c, f) for c, f in zip(cpu, fl))
    if isinstance(cpu, dict):
        if not isinstance(fl, dict) or fl.keys() != cpu.keys():
            raise _Unsupported("structure")
        return {k: _placed_like(cpu[k], fl[k]) for k in cpu}
    return fl if isinstance(fl, (str, torch.device)) else _to_flagos(cpu)


def _flagos_samples(op, dtype, req, cpu_samples):
    """The OpInfo's own samples for device "flagos" (same seed, so same values; tensors it
    keeps on the CPU on purpose stay there), else the CPU samples placed like them, or
    copied to flagos where the generation fails."""
    import torch

    out = [None] * len(cpu_samples)
    try:
        torch.manual_seed(0)
        if _DEV[0] == "flagos":
            torch.flagos.manual_seed_all(0)
        gen = op.sample_inputs(_DEV[0], dtype, requires_grad=req)
        for i, fs in enumerate(itertools.islice(gen, len(cpu_samples))):
            cs = cpu_samples[i]
            f = (fs.input, list(fs.args), dict(fs.kwargs))
            c = (cs.input, list(cs.args), dict(cs.kwargs))
            out[i] = f if _same_values(f, c) else _placed_like(c, f)
    except Exception:  # noqa: BLE001, S110 - copy the CPU samples instead
        pass
    for i, cs in enumerate(cpu_samples):
        if out[i] is None:
            try:
                out[i] = _to_flagos((cs.input, list(cs.args), dict(cs.kwargs)))
            except _Unsupported:
                out[i] = None
    return out


def run_op(op, route: str, dtype, max_samples: int, layouts: tuple[str, ...] = ()) -> dict:
    import torch

    # FLAGGEMS_CUDA runs without flagos (a CUDA backward fails once a PrivateUse1 backend
    # is loaded, see flagos/models/clean_process.py): no routes, no stats.
    flagos = None if route == FLAGGEMS_CUDA else __import__("flagos")

    out = {"op": op_key(op), "route": route, "dtype": str(dtype).replace("torch.", "")}
    if not op.supports_dtype(dtype, "cpu"):
        return {**out, "status": "skip", "reason": "dtype not supported on CPU"}
    res = Result()
    _ROUTE[0] = route
    t0 = time.perf_counter()
    if flagos:
        flagos.routing.reset_stats()
    try:
        forced = (flagos.routing.override({"default": route.split(",")}) if flagos
                  else contextlib.nullcontext())
        with forced:
            torch.manual_seed(0)
            req = op.supports_autograd and (dtype.is_floating_point or dtype.is_complex)
            cpu_samples = list(itertools.islice(
                op.sample_inputs("cpu", dtype, requires_grad=req), max_samples))
            fl_samples = _flagos_samples(op, dtype, req, cpu_samples)
            for i, (sample, fl) in enumerate(zip(cpu_samples, fl_samples)):
                _run_sample(op, sample, fl, dtype, res, seed=1234 + i)
                if res.failed:
                    break
            relaid_runs = ((layout, sample) for layout in layouts for sample in cpu_samples)
            for i, (layout, sample) in enumerate(relaid_runs, start=len(cpu_samples)):
                if res.failed:
                    break
                try:  # a sample this layout cannot make is left out, the others still run
                    relaid = _relaid(sample, layout)
                    if relaid is None:
                        continue
                    fl = _to_flagos((relaid.input, list(relaid.args), dict(relaid.kwargs)),
                                    keep_strides=True)
                except Exception:  # noqa: BLE001, S112
                    continue
                _run_sample(op, relaid, fl, dtype, res, seed=1234 + i)
    except Exception as e:  # noqa: BLE001 - sample generation failed
        if res.ran == 0:
            return {**out, "status": "skip", "reason": f"samples: {type(e).__name__}: {e}"[:300]}
        res.fail("harness", e)
    served = Counter()
    by_op = {}  # aten op -> provider -> calls: which provider really ran each routed op
    for name, per_op in (flagos.routing.stats() if flagos else {}).items():
        for prov, c in per_op.items():
            served[prov] += c["calls"]
        by_op[name] = {prov: c["calls"] for prov, c in per_op.items() if c["calls"]}
    out.update(samples=res.ran, checks=dict(res.checks), seconds=time.perf_counter() - t0,
               providers=dict(served), by_op=by_op)
    if res.ran == 0 and res.unsupported:
        return {**out, "status": "skip",
                "reason": "sparse/quantized layout (refused with a clear error)"}
    if res.ran == 0:
        return {**out, "status": "skip", "reason": "no sample runs on CPU"}
    if res.failed:
        return {**out, "status": "fail", "error": res.errors[0]}
    return {**out, "status": "pass", "shape_only": res.shape_only > 0,
            "twin_reference": res.twin_reference > 0}


def worker(args) -> None:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.route != FLAGGEMS_CUDA:
        import flagos  # noqa: F401
    from torch.testing._internal.common_methods_invocations import op_db

    _setup_route(args.route)
    dtype = getattr(torch, args.dtype)
    wanted = args.worker_ops.split(",")
    by_key = {op_key(op): op for op in op_db}
    for key in wanted:
        print(json.dumps({"start": key}), flush=True)
        try:
            r = run_op(by_key[key], args.route, dtype, args.max_samples,
                       tuple(x for x in args.layouts.split(",") if x))
        except Exception as e:  # noqa: BLE001
            r = {"op": key, "status": "fail", "error": f"harness: {e!r}"[:300],
                 "trace": traceback.format_exc()[-2000:]}
        print(json.dumps(r), flush=True)


# --------------------------------------------------------------------------------------
# parent side: shards the OpInfos over worker processes, survives crashes and hangs


def all_op_keys(ops_filter: list[str] | None) -> list[str]:
    from torch.testing._internal.common_methods_invocations import op_db

    if not ops_filter:
        return [op_key(op) for op in op_db]
    want = set(ops_filter)  # an OpInfo name (every variant) or a name.variant key
    return [op_key(op) for op in op_db if op.name in want or op_key(op) in want]


def _spawn(args, keys):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--route", args.route,
           "--dtype", args.dtype, "--max-samples", str(args.max_samples),
           "--threads", str(args.threads), "--layouts", args.layouts,
           "--worker-ops", ",".join(keys)]
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0") \
        if args.route == FLAGGEMS_CUDA else None
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            bufsize=1, env=env)


def sweep(args, keys: list[str], log=None) -> list[dict]:
    """Runs `keys` over args.jobs workers; returns one result per key."""
    shards = [keys[i::args.jobs] for i in range(args.jobs)]
    pending = {i: list(s) for i, s in enumerate(shards) if s}
    results: list[dict] = []
    sel = selectors.DefaultSelector()
    state = {}  # shard -> (proc, current key, started at)

    def start(i):
        p = _spawn(args, pending[i])
        os.set_blocking(p.stdout.fileno(), False)
        state[i] = [p, None, time.monotonic(), ""]
        sel.register(p.stdout, selectors.EVENT_READ, i)

    def finish(i, key, r):
        results.append(r)
        pending[i].remove(key)
        if log:
            done = len(results)
            log(f"[{done}/{len(keys)}] {r['op']}: {r['status']}"
                + (f" -- {r.get('error', '')}" if r["status"] == "fail" else ""))

    def died(i, why):
        p, cur, _, _ = state.pop(i)
        sel.unregister(p.stdout)
        p.kill()
        p.wait()
        if cur is not None:
            finish(i, cur, {"op": cur, "route": args.route, "dtype": args.dtype,
                            "status": "fail", "error": why})
        elif pending[i]:  # died before its first op: do not loop forever
            for k in list(pending[i]):
                finish(i, k, {"op": k, "route": args.route, "status": "fail",
                              "error": f"worker: {why}"})
        if pending[i]:
            start(i)

    for i in pending:
        start(i)
    while state:
        for key, _ in sel.select(timeout=5):
            i = key.data
            p = state[i][0]
            chunk = p.stdout.read()
            if chunk:
                state[i][3] += chunk
                *lines, state[i][3] = state[i][3].split("\n")
                for line in lines:
                    if not line.startswith("{"):
                        continue
                    msg = json.loads(line)
                    if "start" in msg:
                        state[i][1], state[i][2] = msg["start"], time.monotonic()
                    else:
                        state[i][1] = None
                        finish(i, msg["op"], msg)
            elif p.poll() is not None or chunk == "":
                rc = p.wait()
                if state[i][1] is None and not pending[i]:
                    sel.unregister(p.stdout)
                    del state[i]
                else:
                    died(i, f"worker crashed (exit code {rc})")
        for i in list(state):
            if state[i][1] is not None and time.monotonic() - state[i][2] > args.timeout:
                died(i, f"timeout: over {args.timeout}s")
    order = {k: n for n, k in enumerate(keys)}
    return sorted(results, key=lambda r: order.get(r["op"], 0))


def summarize(results: list[dict], route: str) -> dict:
    c = Counter(r["status"] for r in results)
    ran = c["pass"] + c["fail"]
    shape_only = sum(1 for r in results if r.get("shape_only"))
    twin_ref = sum(1 for r in results if r.get("twin_reference"))
    served = Counter()
    for r in results:
        served.update(r.get("providers", {}))
    return {"route": route, "passed": c["pass"], "failed": c["fail"], "skipped": c["skip"],
            "pass_rate": 100.0 * c["pass"] / ran if ran else 0.0,
            "random_shape_only": shape_only, "twin_reference": twin_ref,
            "calls_by_provider": dict(served)}


def print_table(summary: dict, results: list[dict], seconds: float) -> None:
    s = summary
    print()
    print(f"{'provider':<10} {'passed':>7} {'failed':>7} {'skipped':>8} {'pass %':>8}"
          f" {'random(shape-only)':>19} {'twin reference':>15}")
    print(f"{s['route']:<10} {s['passed']:>7} {s['failed']:>7} {s['skipped']:>8}"
          f" {s['pass_rate']:>7.2f}% {s['random_shape_only']:>19} {s['twin_reference']:>15}")
    print(f"(skipped: no sample runs on CPU for the dtype; {seconds:.0f}s; op calls served: "
          + ", ".join(f"{k}={v}" for k, v in sorted(s["calls_by_provider"].items())) + ")")
    if s["route"] not in ("cpu", FLAGGEMS_CUDA):  # FLAGGEMS_CUDA: no flagos, no stats
        fell = [r["op"] for r in results
                if r.get("providers", {}).get("cpu") and r["status"] != "skip"]
        head = s["route"].split(",")[0]
        if not s["calls_by_provider"].get(head):
            print(f"WARNING: provider {head!r} served no call: every op fell to the rest "
                  "of the chain")
        elif fell:
            print(f"OpInfos with calls that {s['route']!r} left to cpu ({len(fell)}): "
                  + ", ".join(fell[:20]) + (" ..." if len(fell) > 20 else ""))
    fails = [r for r in results if r["status"] == "fail"]
    if fails:
        print(f"\nfailures ({len(fails)}):")
        for r in fails:
            print(f"  {r['op']}: {r.get('error', '')}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--route", default="cpu", help="provider to force (default: cpu)")
    ap.add_argument("--ops", default="", help="comma-separated OpInfo names (default: all)")
    ap.add_argument("--max-samples", type=int, default=8)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--jobs", type=int, default=max(1, min(4, (os.cpu_count() or 2))))
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per OpInfo")
    ap.add_argument("--json", default="", help="write the results here")
    ap.add_argument("--log", default="", help="append progress lines here")
    ap.add_argument("--layouts", default="", help="also run each sample laid out as these "
                    f"say, comma-separated, of {', '.join(LAYOUTS)} (default: none)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker-ops", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    unknown = {x for x in args.layouts.split(",") if x} - set(LAYOUTS)
    if unknown:
        ap.error(f"--layouts: unknown {', '.join(sorted(unknown))}; known: {', '.join(LAYOUTS)}")
    if args.worker:
        worker(args)
        return 0
    keys = all_op_keys([o for o in args.ops.split(",") if o] or None)
    if not keys:
        print("no OpInfo matches --ops", file=sys.stderr)
        return 2
    logf = open(args.log, "a") if args.log else None  # noqa: SIM115

    def log(line):
        if logf:
            logf.write(line + "\n")
            logf.flush()

    t0 = time.perf_counter()
    results = sweep(args, keys, log)
    seconds = time.perf_counter() - t0
    summary = summarize(results, args.route)
    summary.update(seconds=seconds, dtype=args.dtype, max_samples=args.max_samples,
                   layouts=args.layouts)
    print_table(summary, results, seconds)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "results": results}, f, indent=1)
    return 0 if summary["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
