"""flagos.provider_api, the one module provider packages use of flagos-core: every name it
exports exists, and a provider registered through it serves ops."""

from __future__ import annotations

import flagos
import pytest
import torch
from flagos import provider_api


def test_every_exported_name_exists():
    assert isinstance(provider_api.API_VERSION, tuple) and len(provider_api.API_VERSION) == 2
    missing = [n for n in provider_api.__all__ if not hasattr(provider_api, n)]
    assert not missing, missing


def test_an_engine_provider_registered_through_it_serves_ops():
    if provider_api.twin_device(0) == "none":
        pytest.skip("the twin engine needs host-addressable or CUDA memory")
    provider_api.register_engine_provider("twin_via_api", "twin")

    class TwinViaApi(flagos.routing.Provider):
        name = "twin_via_api"
        is_cpp = True

    flagos.routing.register_provider(TwinViaApi())
    x = torch.randn(8)
    with flagos.routing.override({"aten::exp": ["twin_via_api"]}):
        flagos.routing.reset_stats()
        got = torch.exp(x.to("flagos")).cpu()
        served = flagos.routing.stats()
    torch.testing.assert_close(got, torch.exp(x))
    assert any("twin_via_api" in row for op, row in served.items() if op.startswith("aten::exp")), served
    # explain names the engine a provider runs on, whatever the provider is called
    with flagos.routing.override({"aten::exp": ["twin_via_api"]}):
        route = flagos.routing.explain("aten::exp").devices[0]
    assert route.engine == "twin" and "served by: twin_via_api (twin engine)" in str(route)


def test_explain_names_the_cpu_fallback_engine():
    with flagos.routing.override({"aten::exp": ["cpu"]}):
        route = flagos.routing.explain("aten::exp").devices[0]
    assert route.engine == "cpu fallback" and "served by: cpu (cpu fallback engine)" in str(route)


def test_device_queries():
    assert provider_api.twin_device(0) in ("cpu", "cuda", "none")
    props = provider_api.device_properties(0)
    assert props["hal"] == torch.flagos.get_device_properties(0).hal
    assert any(h["path"] == props["hal_path"] for h in provider_api.hal_info())
    assert isinstance(provider_api.graph_formats(0), list)
    twin = provider_api.twin_of_hal(props["hal"])
    assert twin == (None if provider_api.twin_device(0) == "none" else provider_api.twin_device(0))
    assert provider_api.extension_path().endswith(".so")
