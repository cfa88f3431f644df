"""A routing configuration mistake in the environment: the import succeeds and says so,
and every routed op raises the mistake until it is fixed (docs/routing.md)."""

from __future__ import annotations

import pytest

CODE = """
import os, warnings
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter('always')
    import torch
    import flagos
print('WARN', [str(x.message) for x in w if 'flagos' in str(x.message)])
x = torch.ones(3, device='flagos')
for _ in range(2):
    try:
        y = x + x
        print('RAN', y.cpu().tolist())
    except Exception as e:
        print('RAISED', type(e).__name__, str(e).splitlines()[0])
print('INPUT', x.cpu().tolist())
os.environ.pop('FLAGOS_ROUTES', None)
os.environ.pop('FLAGOS_ROUTES_FILE', None)
flagos.routing.reset()
print('FIXED', (x + x).cpu().tolist())
"""


@pytest.mark.parametrize("where", ["FLAGOS_ROUTES", "FLAGOS_ROUTES_FILE"])
def test_bad_routes_raise_at_every_use_not_at_import(run_python, tmp_path, where):
    if where == "FLAGOS_ROUTES":
        env = {"FLAGOS_ROUTES": "aten::add=nosuchprovider"}
    else:
        f = tmp_path / "routes.toml"
        f.write_text('[ops]\n"aten::add" = "nosuchprovider"\n')
        env = {"FLAGOS_ROUTES_FILE": str(f)}
    out = run_python(CODE, env=env).stdout
    lines = out.splitlines()
    warn = next(line for line in lines if line.startswith("WARN"))
    assert "could not be loaded" not in warn, out
    assert "routing configuration is invalid" in warn and "nosuchprovider" in warn, out
    raised = [line for line in lines if line.startswith(("RAISED", "RAN"))]
    assert len(raised) == 2, out
    for line in raised:
        assert line.startswith("RAISED") and "nosuchprovider" in line, out
    assert "INPUT [1.0, 1.0, 1.0]" in out, out
    assert "FIXED [2.0, 2.0, 2.0]" in out, out
