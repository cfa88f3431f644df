"""Extension ops declared factory-only (``results_in_flagos_memory``): which ops' twin
kernels run with their allocations in flagos memory. The effect on a CUDA twin is checked
by flagos-ops-boxing's test_device_results.py."""

from __future__ import annotations

import uuid

import pytest
import torch
from flagos import _C
from flagos.provider_api import results_in_flagos_memory


@pytest.fixture
def op_name() -> str:
    """A fresh extension op with two overloads (declarations last for the process)."""
    name = f"op_{uuid.uuid4().hex[:12]}"
    lib = torch.library.Library("flagos_declared_test", "FRAGMENT")
    lib.define(f"{name}(Tensor x) -> Tensor")
    lib.define(f"{name}.twice(Tensor x, Tensor y) -> Tensor")
    yield f"flagos_declared_test::{name}"
    lib._destroy()


def test_aten_ops_need_no_declaration() -> None:
    assert _C._device_results_allowed("aten::add", "Tensor")


def test_an_extension_op_is_allowed_once_declared_with_every_overload(op_name) -> None:
    assert not _C._device_results_allowed(op_name)
    results_in_flagos_memory([op_name])
    assert _C._device_results_allowed(op_name)
    assert _C._device_results_allowed(op_name, "twice")


@pytest.mark.parametrize("bad", ["ns::name.twice", "::name", "ns::", "name"])
def test_a_malformed_name_is_refused_and_nothing_is_declared(op_name, bad) -> None:
    with pytest.raises(RuntimeError, match='named "namespace::name"'):
        results_in_flagos_memory([op_name, bad])
    assert not _C._device_results_allowed(op_name)
