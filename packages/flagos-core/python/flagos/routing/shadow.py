"""Shadow verification: a sampled fraction of the calls of chosen ops also run on a
reference, and the results are compared.

Off by default, and then free: the routing table resolves chains as usual and the C++
dispatcher's hot path does nothing extra. When shadowing is on for an op, that op's chain
(and only that op's) resolves with the ``shadow`` wrapper in front of it. The wrapper
declines the calls it does not sample, so they run down the chain as before; for a sampled
call it runs the chain's providers itself (the first that accepts serves, as always), runs
the same inputs on the reference (a provider, or the CPU kernels of torch), compares the
results with dtype-aware tolerances (flagos.routing.compare) and counts calls checked and
mismatches per (op, provider), which :func:`flagos.routing.stats` reports as ``shadowed``
and ``mismatches``.

With ``quarantine`` on, a provider that mismatches is taken out of every chain of that op
(the chain falls through to the next provider), a :class:`ShadowMismatchWarning` names the
op, the provider, the inputs' shapes and the error, and the mismatching call returns the
reference's results (written into the op's out= and in-place arguments), so the model's
results stay correct.

Environment (read at first use of the routing table and by :func:`flagos.routing.reset`):

| variable | meaning |
|---|---|
| ``FLAGOS_SHADOW`` | ops to shadow, ``,``-separated op keys (``aten::mm``, ``aten::add.Tensor``), or ``*`` for every op |
| ``FLAGOS_SHADOW_RATE`` | fraction of calls checked, 0 < rate <= 1 (default 0.01) |
| ``FLAGOS_SHADOW_REFERENCE`` | the reference provider (default ``cpu``: torch's CPU kernels) |
| ``FLAGOS_SHADOW_QUARANTINE`` | ``1``: take a mismatching provider out of the op's chains |
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten, tree_map

from . import ops
from .compare import mismatch

__all__ = ["SHADOW_PROVIDER", "ShadowConfig", "ShadowMismatchWarning", "config", "disable",
           "enable", "quarantined", "release_quarantine"]

SHADOW_PROVIDER = "shadow"
"""The name the wrapper is registered under with the dispatcher (never a routing-file name)."""


class ShadowMismatchWarning(RuntimeWarning):
    """A provider's results did not match the shadow reference."""


@dataclass(frozen=True)
class ShadowConfig:
    """What is shadowed: ``ops`` (op keys, or ``{"*"}``), the sampled ``rate``, the
    ``reference`` provider, whether a mismatching provider is ``quarantine``\\ d, and
    ``tolerance`` (a multiplier of the dtype tolerances)."""

    ops: frozenset[str]
    rate: float = 0.01
    reference: str = "cpu"
    quarantine: bool = False
    tolerance: float = 1.0

    def covers(self, op: str) -> bool:
        """Whether calls of ``op`` (a full overload name) are shadowed."""
        if "*" in self.ops:
            return True
        return ops.overload_key(op) in self.ops or ops.split(op)[0] in self.ops


@dataclass
class _Counts:
    shadowed: int = 0
    mismatches: int = 0
    last_error: str = ""
    last_inputs: str = ""  # the tensor arguments of the last mismatching call
    unchecked: int = 0  # calls the reference could not run: the provider's results stand
    last_unchecked: str = ""


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    config: ShadowConfig | None = None
    calls: dict[str, int] = field(default_factory=dict)
    counts: dict[tuple[str, str], _Counts] = field(default_factory=dict)
    # (whole op, provider) -> the error that quarantined it
    quarantine: dict[tuple[str, str], str] = field(default_factory=dict)
    # (op, device) -> chain, for the routing table version `chains_version`
    chains: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)
    chains_version: int = -1


_state = _State()
# Set while the wrapper checks a call: the ops it makes itself (copies of the inputs, the
# reference) are not checked again.
_inside = threading.local()


def config() -> ShadowConfig | None:
    """The shadow configuration in force, or ``None`` when shadowing is off."""
    return _state.config


def _parse_env() -> ShadowConfig | None:
    spec = os.environ.get("FLAGOS_SHADOW", "").strip()
    if not spec:
        return None
    rate_s = os.environ.get("FLAGOS_SHADOW_RATE", "0.01")
    try:
        rate = float(rate_s)
    except ValueError:
        raise ValueError(f"FLAGOS_SHADOW_RATE={rate_s!r} is not a number; give a fraction "
                         f"of calls, 0 < rate <= 1") from None
    return _make_config(spec.split(","), rate,
                        os.environ.get("FLAGOS_SHADOW_REFERENCE", "cpu").strip() or "cpu",
                        os.environ.get("FLAGOS_SHADOW_QUARANTINE", "") not in ("", "0"), 1.0)


def _make_config(op_keys: Iterable[str], rate: float, reference: str, quarantine: bool,
                 tolerance: float) -> ShadowConfig:
    vocabulary = _hooks().vocabulary
    keys = frozenset(k.strip() for k in op_keys if k.strip())
    if not keys:
        raise ValueError("shadow verification needs at least one op key (or '*')")
    for key in keys - {"*"}:
        if ops.key_kind(key) == "default":
            raise ValueError(f"shadow op {key!r}: give op keys such as 'aten::mm', not 'default'")
        if not ops.is_key(key):
            close = ops.suggest(key)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise ValueError(f"shadow: unknown op {key!r}{hint}")
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"shadow rate {rate} is not a fraction of calls (0 < rate <= 1)")
    if tolerance <= 0:
        raise ValueError(f"shadow tolerance {tolerance} must be positive")
    if reference not in vocabulary().providers:
        raise ValueError(f"shadow reference {reference!r} is not an installed provider")
    return ShadowConfig(keys, rate, reference, quarantine, tolerance)


def load_env() -> None:
    """Apply ``FLAGOS_SHADOW*`` (the routing table does this when it reads the environment;
    it registers the wrapper with its backend)."""
    _set(_parse_env())


def enable(ops: str | Iterable[str], rate: float = 0.01, reference: str = "cpu",
           quarantine: bool = False, tolerance: float = 1.0) -> None:
    """Shadow-verify calls of ``ops`` (op keys such as ``"aten::mm"``, or ``"*"``): a fraction
    ``rate`` of their calls (the first call and then one in ``1/rate``) also runs on
    ``reference`` (a provider name; ``"cpu"`` is torch's CPU kernels) and mismatches are
    counted in :func:`flagos.routing.stats`. ``quarantine=True`` takes a mismatching
    provider out of the op's chains (with a :class:`ShadowMismatchWarning`) and returns the
    reference's results for that call. ``tolerance`` scales the dtype tolerances. Replaces
    any earlier configuration; counters and quarantines stay (see :func:`disable`)."""
    if isinstance(ops, str):
        ops = ops.split(",")
    _apply(_make_config(ops, float(rate), reference, bool(quarantine), float(tolerance)))


def disable(clear: bool = False) -> None:
    """Stop shadowing (chains resolve without the wrapper again). Quarantined providers
    stay out of their ops' chains until :func:`release_quarantine`; ``clear=True`` also
    drops the counters and the quarantines."""
    if clear:
        with _state.lock:
            _state.counts.clear()
            _state.calls.clear()
            _state.quarantine.clear()
    _apply(None)


def quarantined() -> dict[tuple[str, str], str]:
    """``{(op, provider): error}`` for every provider quarantined for an op (whole op names)."""
    with _state.lock:
        return dict(_state.quarantine)


def release_quarantine(op: str | None = None, provider: str | None = None) -> None:
    """Put quarantined providers back (all, or those of ``op`` and/or ``provider``)."""
    with _state.lock:
        for key in [k for k in _state.quarantine
                    if (op is None or k[0] == ops.split(op)[0])
                    and (provider is None or k[1] == provider)]:
            del _state.quarantine[key]
    _republish()


@dataclass(frozen=True)
class TableHooks:
    """What shadow verification needs of the routing table that resolves chains through it,
    handed over by the table itself (:func:`attach`), so that neither imports the other's
    insides: the backend that runs one provider, the table's version, an op's chain on a
    device, the known names of keys, and re-resolving every chain after a change here."""

    backend: Callable[[], object]
    version: Callable[[], int]
    chain: Callable[[str, int], tuple[str, ...]]
    vocabulary: Callable[[], object]
    republish: Callable[[], None]


_table: TableHooks | None = None


def attach(hooks: TableHooks) -> None:
    """Connect shadow verification to the routing table (the table calls this when it
    loads)."""
    global _table
    _table = hooks


def _hooks() -> TableHooks:
    if _table is None:  # flagos.routing loads the table, which attaches, before any use
        raise RuntimeError("shadow verification is not attached to a routing table")
    return _table


def _apply(cfg: ShadowConfig | None) -> None:
    if cfg is not None and not register(_hooks().backend()):
        raise RuntimeError("shadow verification needs the flagos core's dispatcher "
                           "(the routing table is not connected to it)")
    _set(cfg)
    _republish()


def _set(cfg: ShadowConfig | None) -> None:
    with _state.lock:
        _state.config = cfg
        _state.chains.clear()


def register(backend: object) -> bool:
    """Register the wrapper with a backend that can run one provider (the flagos core's);
    returns whether it could."""
    if getattr(backend, "run_provider", None) is None:
        return False
    register_wrapper = getattr(backend, "register_wrapper_provider", None)
    (register_wrapper or backend.register_python_provider)(SHADOW_PROVIDER, _shadow_call)
    return True


def _republish() -> None:
    _hooks().republish()


def quarantine_reason(op: str, provider: str) -> str:
    """Why ``provider`` is out of ``op``'s chains ("" when it is not quarantined)."""
    if not _state.quarantine:
        return ""
    why = _state.quarantine.get((ops.split(op)[0], provider))
    return f"quarantined by shadow verification: {why}" if why else ""


def wrap(op: str, chain: list[str]) -> list[str]:
    """The resolver's last step: ``chain`` with the shadow wrapper in front when ``op`` is
    shadowed, else ``chain`` itself."""
    cfg = _state.config
    if cfg is not None and cfg.covers(op) and not _nondeterministic(op):
        return [SHADOW_PROVIDER, *chain]
    return chain


def counts() -> dict[tuple[str, str], dict[str, object]]:
    """``{(op, provider): {"shadowed", "mismatches", "last_error", "last_inputs",
    "unchecked", "last_unchecked"}}`` for stats(); ``last_inputs`` describes the tensor
    arguments of the last mismatching call (shape, dtype, strides where not contiguous);
    ``unchecked`` counts sampled calls that the reference could not run
    (``last_unchecked`` says why), whose provider results stand."""
    with _state.lock:
        return {k: {"shadowed": c.shadowed, "mismatches": c.mismatches,
                    "last_error": c.last_error, "last_inputs": c.last_inputs,
                    "unchecked": c.unchecked,
                    "last_unchecked": c.last_unchecked} for k, c in _state.counts.items()}


def reset_counts() -> None:
    """Zero the shadow counters (quarantines stay)."""
    with _state.lock:
        _state.counts.clear()
        _state.calls.clear()


# --- the wrapper -----------------------------------------------------------------------------


def _op_name(op: torch._ops.OpOverload) -> str:
    s = op._schema
    return f"{s.name}.{s.overload_name}" if s.overload_name else s.name


def _nondeterministic(op: str) -> bool:
    """Ops whose results are random (dropout, randn_like): a reference cannot agree."""
    try:
        overload = ops.overload(op)
    except (AttributeError, RuntimeError):
        return True
    return torch.Tag.nondeterministic_seeded in overload.tags


def _device_of(args: tuple, kwargs: dict) -> int:
    for x in tree_flatten((args, kwargs))[0]:
        if isinstance(x, torch.Tensor) and x.device.type == "flagos":
            return x.device.index
    return torch.flagos.current_device()


def _sampled(op: str, rate: float) -> bool:
    with _state.lock:
        n = _state.calls.get(op, 0)
        _state.calls[op] = n + 1
    return math.ceil((n + 1) * rate - 1e-9) > math.ceil(n * rate - 1e-9)


def _chain(op: str, device: int) -> tuple[str, ...]:
    hooks = _hooks()
    version = hooks.version()
    if _state.chains_version != version:
        _state.chains, _state.chains_version = {}, version
    key = (op, device)
    chain = _state.chains.get(key)
    if chain is None:
        chain = tuple(hooks.chain(op, device))
        _state.chains[key] = chain
    return chain


def _to_cpu(x: object) -> object:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", copy=True)
    if isinstance(x, torch.device) and x.type == "flagos":
        return torch.device("cpu")
    return x


def _to_device(device: int):
    def move(x: object) -> object:
        if isinstance(x, torch.Tensor):
            return x.to(f"flagos:{device}", copy=True)
        return x

    return move


def _written_args(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> list[tuple[int | str, object]]:
    """The arguments the op writes (out=, in-place self), by position or name."""
    out = []
    for i, a in enumerate(op._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        if a.kwarg_only:
            if a.name in kwargs:
                out.append((a.name, kwargs[a.name]))
        elif i < len(args):
            out.append((i, args[i]))
    return out


def _convolution_backward(grad, input, weight, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    channels = weight.shape[1] * groups if transposed else weight.shape[0]
    return torch.ops.aten.convolution_backward(grad, input, weight, [channels], stride,
                                               padding, dilation, transposed,
                                               output_padding, groups, output_mask)


# Ops in the form in which a backend device gets them, which torch's CPU kernels do not
# serve, and the CPU computation of the same meaning that stands in as the reference.
_CPU_EQUIVALENT = {"aten::convolution_overrideable": torch.ops.aten.convolution.default,
                   "aten::convolution_backward_overrideable": _convolution_backward}


def _describe(x: torch.Tensor) -> str:
    text = f"{list(x.shape)} {str(x.dtype).removeprefix('torch.')}"
    if not x.is_contiguous():  # a wrong result often depends on the layout
        text += f" strides {tuple(x.stride())}"
    return text


def _shapes(args: tuple, kwargs: dict) -> str:
    parts = [_describe(x) for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
    return ", ".join(parts) or "no tensors"


def _reference(cfg: ShadowConfig, op: torch._ops.OpOverload, name: str, cpu_args: tuple,
               cpu_kwargs: dict, device: int) -> tuple[object, tuple, dict]:
    """The reference's results and the reference's view of the written arguments."""
    if cfg.reference != "cpu":
        move = _to_device(device)
        d_args, d_kwargs = tree_map(move, cpu_args), tree_map(move, cpu_kwargs)
        out = _hooks().backend().run_provider(cfg.reference, name, d_args, d_kwargs, device)
        if out is not NotImplemented:
            return out, d_args, d_kwargs
    return _CPU_EQUIVALENT.get(name, op)(*cpu_args, **cpu_kwargs), cpu_args, cpu_kwargs


def _shadow_call(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
    cfg = _state.config
    name = _op_name(op)
    if cfg is None or getattr(_inside, "active", False) or not _sampled(name, cfg.rate):
        return NotImplemented  # the rest of the chain serves the call, as without shadowing
    _inside.active = True
    try:
        return _check(cfg, op, name, args, kwargs)
    finally:
        _inside.active = False


def _check(cfg: ShadowConfig, op: torch._ops.OpOverload, name: str, args: tuple,
           kwargs: dict) -> object:
    backend = _hooks().backend()
    device = _device_of(args, kwargs)
    cpu_args, cpu_kwargs = tree_map(_to_cpu, args), tree_map(_to_cpu, kwargs)
    for provider in _chain(name, device):
        out = backend.run_provider(provider, name, args, kwargs, device)
        if out is NotImplemented:
            continue
        if provider == cfg.reference:
            return out
        try:
            ref_out, ref_args, ref_kwargs = _reference(cfg, op, name, cpu_args, cpu_kwargs,
                                                       device)
        except Exception as e:  # noqa: BLE001 - a reference that cannot run checks nothing
            _count_unchecked(name, provider, f"{type(e).__name__}: {e}")
            return out
        why = mismatch(out, ref_out, cfg.tolerance)
        if why is None:
            for (where, got), (_, want) in zip(_written_args(op, args, kwargs),
                                               _written_args(op, ref_args, ref_kwargs)):
                if why := mismatch(got, want, cfg.tolerance, f"argument {where}"):
                    break
        _count(name, provider, why, None if why is None else _shapes(args, kwargs))
        if why is None or not cfg.quarantine:
            return out
        _quarantine(cfg, name, provider, why, args, kwargs)
        return _adopt_reference(op, args, kwargs, ref_out, ref_args, ref_kwargs, device)
    raise RuntimeError(f"flagos shadow: no provider accepted {name}")


def _count(name: str, provider: str, why: str | None, inputs: str | None) -> None:
    with _state.lock:
        c = _state.counts.setdefault((name, provider), _Counts())
        c.shadowed += 1
        if why is not None:
            c.mismatches += 1
            c.last_error = why
            c.last_inputs = inputs or ""


def _count_unchecked(name: str, provider: str, why: str) -> None:
    with _state.lock:
        c = _state.counts.setdefault((name, provider), _Counts())
        c.unchecked += 1
        c.last_unchecked = why[:500]


def _quarantine(cfg: ShadowConfig, name: str, provider: str, why: str, args: tuple,
                kwargs: dict) -> None:
    whole = ops.split(name)[0]
    with _state.lock:
        _state.quarantine[(whole, provider)] = why
    warnings.warn(f"flagos shadow: provider {provider!r} mismatched the reference "
                  f"{cfg.reference!r} on {name} (inputs: {_shapes(args, kwargs)}): {why}; "
                  f"quarantined: {whole} no longer goes to {provider!r}",
                  ShadowMismatchWarning, stacklevel=2)
    _republish()


def _adopt_reference(op: torch._ops.OpOverload, args: tuple, kwargs: dict, ref_out: object,
                     ref_args: tuple, ref_kwargs: dict, device: int) -> object:
    """The caller's results from the reference's: written arguments get the reference's
    values; results that alias them are those arguments, fresh results move to the device."""
    written = _written_args(op, args, kwargs)
    for (_, mine), (_, theirs) in zip(written, _written_args(op, ref_args, ref_kwargs)):
        if isinstance(mine, torch.Tensor):
            mine.copy_(theirs)
        elif isinstance(mine, (list, tuple)):
            for m, t in zip(mine, theirs):
                m.copy_(t)
    returns = op._schema.returns
    mutable = [w for _, w in written if isinstance(w, torch.Tensor)]

    def result(i: int, value: object) -> object:
        ret = returns[i]
        if ret.alias_info is not None and ret.alias_info.is_write and i < len(mutable):
            return mutable[i]
        return tree_map(_to_device(device), value)

    if len(returns) == 1:
        return result(0, ref_out)
    if not returns:
        return None
    return tuple(result(i, v) for i, v in enumerate(ref_out))
