"""flagos' build is part of Inductor's FX graph cache key (flagos_compile/_cache_key.py)."""

from __future__ import annotations

import inspect

import pytest
from flagos_compile._cache_key import FlagosCacheKeyPass, build_id
from torch._inductor.codegen import common


def test_every_graph_key_names_the_flagos_build() -> None:
    if "device_custom_pass" not in inspect.signature(common.register_backend_for_device).parameters:
        pytest.skip("this torch has no per-device custom passes")
    p = common.get_custom_backend_pass_for_device("flagos")
    assert isinstance(p, FlagosCacheKeyPass)
    assert p.uuid() == build_id() and len(build_id()) == 64
    # FxGraphHashDetails hashes the uuid of every registered device pass, for every graph
    assert p in common.custom_backend_passes.values()


def test_the_pass_leaves_graphs_alone() -> None:
    import torch

    gm = torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
    before = str(gm.graph)
    FlagosCacheKeyPass()(gm)
    assert str(gm.graph) == before
