"""The calling conventions a manifest line may name: for each, the C type of its plan
function (``flagos_native/kernel_abi.h``) and the ATen schema it takes.

Pure data, no import of torch or flagos: the build-time generator uses it too.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CONVENTIONS", "DTYPES", "Convention"]


@dataclass(frozen=True)
class Convention:
    """``args``: the schema's argument types (``str(arg.type)`` in torch), out= arguments
    left out; an entry with ``|`` accepts either. ``plan_type``: the plan function's C type
    in ``flagos_native/kernel_abi.h`` ("" for a vendor API's own, unchecked at build)."""

    name: str
    plan_type: str
    args: tuple[tuple[str, ...], ...]
    what: str
    phases: int = 2                 # 1: the symbol is the whole call (no execute symbol)
    helpers: tuple[str, ...] = ()   # library-level symbols the convention also calls

    def accepts(self, types: list[str]) -> bool:
        """Whether a schema with these argument types fits, in one of the shapes."""
        return any(len(types) == len(shape) and all(
            t in want.split("|") for t, want in zip(types, shape)) for shape in self.args)

    def shapes(self) -> str:
        """The accepted argument lists, for error messages."""
        return " or ".join(f"({', '.join(s)})" for s in self.args)


_T, _N = "Tensor", "number"
CONVENTIONS: dict[str, Convention] = {c.name: c for c in (
    Convention("unary", "flagos_native_unary_fn", ((_T,),), "out = f(self)"),
    Convention("binary", "flagos_native_binary_fn", ((_T, _T), (_T, _T, _N)),
               "out = f(self, other, scalar), broadcasting"),
    Convention("reduction", "flagos_native_reduction_fn",
               ((_T, "Optional[List[int]]", "bool", "Optional[int]"),),
               "a reduction over dims (sum.dim_IntList, mean.dim)"),
    Convention("matmul", "flagos_native_matmul_fn", ((_T, _T), (_T, _T, _T, _N, _N)),
               "mm, bmm, addmm"),
    Convention("softmax", "flagos_native_softmax_fn", ((_T, "int", "bool"),),
               "_softmax, _log_softmax"),
    Convention("softmax_backward", "flagos_native_softmax_backward_fn",
               ((_T, _T, "int", "int"),), "_softmax_backward_data, _log_softmax_backward_data"),
    Convention("layer_norm", "flagos_native_norm_fn",
               ((_T, "List[int]", "Optional[Tensor]", "Optional[Tensor]", "float"),),
               "native_layer_norm"),
    Convention("layer_norm_backward", "flagos_native_norm_backward_fn",
               ((_T, _T, "List[int]", _T, _T, "Optional[Tensor]", "Optional[Tensor]",
                 "List[bool]"),), "native_layer_norm_backward"),
    Convention("index_select", "flagos_native_index_select_fn", ((_T, "int", _T),),
               "index_select (the forward of embedding)"),
    Convention("embedding_backward", "flagos_native_embedding_backward_fn",
               ((_T, _T, "int", "int", "bool"),), "embedding_dense_backward"),
    Convention("rms_norm", "flagos_native_rms_norm_fn",
               ((_T, "List[int]", "Optional[Tensor]", "Optional[float]"),), "_fused_rms_norm"),
    Convention("rms_norm_backward", "flagos_native_rms_norm_backward_fn",
               ((_T, _T, "List[int]", _T, "Optional[Tensor]", "List[bool]"),),
               "_fused_rms_norm_backward"),
    Convention("attention", "flagos_native_attention_fn",
               ((_T, _T, _T, "Optional[Tensor]", "float", "bool", "bool", "Optional[float]"),),
               "_scaled_dot_product_fused_attention_overrideable"),
    Convention("attention_backward", "flagos_native_attention_backward_fn",
               ((_T, _T, _T, _T, _T, "List[bool]", _T, _T, _T, _T, "int", "int", "float",
                 "bool", _T, _T, "Optional[float]"),),
               "_scaled_dot_product_fused_attention_overrideable_backward"),
    # cuBLAS's own API: the symbol is cublasGemmStridedBatchedEx (one call on a handle).
    Convention("cublas_gemm", "", ((_T, _T), (_T, _T, _T, _N, _N)),
               "mm, bmm, addmm through cublasGemmStridedBatchedEx", phases=1,
               helpers=("cublasCreate_v2", "cublasSetStream_v2")),
)}

# Manifest dtype names -> (the engine's dtype code, the {dtype} spelling in symbol patterns).
DTYPES: dict[str, tuple[int, str]] = {
    "float32": (0, "f32"),
    "float16": (1, "f16"),
    "bfloat16": (2, "bf16"),
    "int64": (3, "i64"),
    "int32": (4, "i32"),
    "float64": (6, "f64"),
}
