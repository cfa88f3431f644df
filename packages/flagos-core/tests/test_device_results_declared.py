"""Extension ops declared factory-only (``results_in_flagos_memory``): which ops' twin
kernels run with their allocations in flagos memory. The effect on a CUDA twin is checked
by flagos-ops-boxing's test_device_results.py."""

from __future__ import annotations

import pytest
import torch
from flagos import _C
from flagos._routing_backend import results_in_flagos_memory

_lib = torch.library.Library("flagos_declared_test", "DEF")
_lib.define("op(Tensor x) -> Tensor")
_lib.define("op.twice(Tensor x, Tensor y) -> Tensor")


def test_aten_ops_need_no_declaration() -> None:
    assert _C._device_results_allowed("aten::add", "Tensor")


def test_an_extension_op_is_allowed_once_declared_with_every_overload() -> None:
    assert not _C._device_results_allowed("flagos_declared_test::op")
    results_in_flagos_memory(["flagos_declared_test::op"])
    assert _C._device_results_allowed("flagos_declared_test::op")
    assert _C._device_results_allowed("flagos_declared_test::op", "twice")


def test_a_name_with_an_overload_is_refused() -> None:
    with pytest.raises(RuntimeError, match='named "namespace::name"'):
        results_in_flagos_memory(["flagos_declared_test::op.twice"])
