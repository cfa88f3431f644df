"""Comparing an op's results from two providers with dtype-aware tolerances.

Used by shadow verification (flagos.routing.shadow) and the route tuner (flagos.tuning).
Two providers never agree bit for bit on floating-point ops (another summation order, fused
multiply-adds, another exp), so floats match within a tolerance of their dtype: an element
is close when ``|got - want| <= atol * scale + rtol * |want|``, where ``scale`` is the
largest magnitude of the reference (at least 1), so that a sum of large values is judged
relative to its size. NaNs must be at the same places; infinities must be equal.
Integers and booleans must be equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["TOLERANCES", "Tolerance", "mismatch", "tolerance_for"]


@dataclass(frozen=True)
class Tolerance:
    """Relative and absolute tolerance of one dtype (see the module docstring)."""

    rtol: float
    atol: float


# Looser than torch.testing's defaults (which compare one kernel with itself across
# devices): a provider may use another algorithm (a split-K matmul, a one-pass variance).
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(1e-7, 1e-7),
    torch.float32: Tolerance(1e-4, 1e-5),
    torch.complex64: Tolerance(1e-4, 1e-5),
    torch.complex128: Tolerance(1e-7, 1e-7),
    torch.float16: Tolerance(1e-2, 1e-3),
    torch.bfloat16: Tolerance(5e-2, 1e-2),
}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    if hasattr(torch, _name):
        TOLERANCES[getattr(torch, _name)] = Tolerance(0.25, 0.05)


def tolerance_for(dtype: torch.dtype, scale: float = 1.0) -> Tolerance | None:
    """The tolerance of ``dtype`` times ``scale``, or ``None`` for an exact dtype."""
    tol = TOLERANCES.get(dtype)
    if tol is None:
        return None
    return Tolerance(tol.rtol * scale, tol.atol * scale)


def _describe(t: torch.Tensor) -> str:
    return f"{list(t.shape)} {str(t.dtype).removeprefix('torch.')}"


def _tensor_mismatch(got: torch.Tensor, want: torch.Tensor, scale: float) -> str | None:
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"got {_describe(got)}, expected {_describe(want)}"
    if got.numel() == 0:
        return None
    got, want = got.detach().cpu(), want.detach().cpu()
    tol = tolerance_for(want.dtype, scale)
    if tol is None:
        bad = got != want
        if not bool(bad.any()):
            return None
        i = int(bad.flatten().nonzero()[0])
        return (f"{int(bad.sum())} of {want.numel()} elements differ (exact dtype "
                f"{str(want.dtype).removeprefix('torch.')}); first at flat index {i}: got "
                f"{got.flatten()[i].item()}, expected {want.flatten()[i].item()}")
    if want.is_complex():
        got, want = torch.view_as_real(got), torch.view_as_real(want)
    g, w = got.double(), want.double()
    nan_g, nan_w = g.isnan(), w.isnan()
    if not torch.equal(nan_g, nan_w):
        n = int((nan_g != nan_w).sum())
        return f"NaN at {n} places where the other has a number"
    finite = w.isfinite() & g.isfinite()
    inf_bad = (~finite & ~nan_w) & (g != w)
    if bool(inf_bad.any()):
        return f"{int(inf_bad.sum())} infinities differ"
    err = torch.where(finite, (g - w).abs(), torch.zeros_like(g))
    ref = torch.where(finite, w.abs(), torch.zeros_like(w))
    amax = float(ref.max()) if ref.numel() else 0.0
    allowed = tol.atol * max(1.0, amax) + tol.rtol * ref
    bad = err > allowed
    if not bool(bad.any()):
        return None
    i = int((err - allowed).flatten().argmax())
    return (f"{int(bad.sum())} of {w.numel()} elements outside rtol={tol.rtol:g} "
            f"atol={tol.atol:g}; worst at flat index {i}: got {g.flatten()[i].item():.6g}, "
            f"expected {w.flatten()[i].item():.6g} (abs error {err.flatten()[i].item():.3g})")


def mismatch(got: object, want: object, scale: float = 1.0, where: str = "result") -> str | None:
    """Why ``got`` (an op's results: a tensor, a number, ``None`` or a sequence of them) does
    not match the reference ``want``, or ``None`` when it matches. ``scale`` multiplies the
    tolerances (2.0: twice as loose). Tensors may be on any device."""
    if isinstance(want, torch.Tensor) or isinstance(got, torch.Tensor):
        if not (isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor)):
            return f"{where}: got {type(got).__name__}, expected {type(want).__name__}"
        why = _tensor_mismatch(got, want, scale)
        return f"{where}: {why}" if why else None
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return f"{where}: got {got!r:.80}, expected {len(want)} values"
        for i, (g, w) in enumerate(zip(got, want)):
            if why := mismatch(g, w, scale, f"{where}[{i}]"):
                return why
        return None
    if isinstance(want, float) and isinstance(got, (int, float)):
        tol = tolerance_for(torch.float64, scale)
        assert tol is not None
        if got == want or abs(got - want) <= tol.atol + tol.rtol * abs(want):
            return None
        return f"{where}: got {got}, expected {want}"
    if got != want:
        return f"{where}: got {got!r:.80}, expected {want!r:.80}"
    return None
