"""Autoload through the torch.backends entry point, a broken install, fork safety."""

from __future__ import annotations

import flagos
import torch


def test_plain_import_torch_makes_flagos_work(run_python):
    code = (
        "import sys, torch\n"
        "x = torch.randn(4, 4, device='flagos')\n"
        "print('DEV', x.device.type, 'flagos' in sys.modules, hasattr(torch, 'flagos'))\n"
        "print('MM', (x @ x).shape == (4, 4))\n"
    )
    out = run_python(code).stdout
    assert "DEV flagos True True" in out and "MM True" in out


def test_broken_install_warns_and_import_torch_survives(run_python):
    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    import torch\n"
        "print('TORCH', torch.__version__)\n"
        "msgs = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]\n"
        "print('WARN', [m for m in msgs if 'flagos' in m])\n"
        "print('CPU', torch.ones(2).sum().item())\n"
    )
    proc = run_python(code, env={"FLAGOS_HAL": "nonexistent_hal_xyz"})
    assert "TORCH " in proc.stdout and "CPU 2.0" in proc.stdout
    warn = next(line for line in proc.stdout.splitlines() if line.startswith("WARN"))
    assert "could not be loaded" in warn and "nonexistent_hal_xyz" in warn


def test_core_entry_point_warns_instead_of_raising(run_python):
    """flagos-core's own torch.backends entry point, called as torch calls it."""
    code = (
        "import warnings\n"
        "from importlib.metadata import entry_points\n"
        "import torch\n"
        "ep = [e for e in entry_points(group='torch.backends') if e.name == 'flagos'][0]\n"
        "print('EP', ep.value)\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    ep.load()()\n"
        "print('WARN', [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)])\n"
    )
    proc = run_python(code, env={"FLAGOS_HAL": "nonexistent_hal_xyz",
                                 "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert "EP _flagos_autoload:autoload" in proc.stdout
    warn = next(line for line in proc.stdout.splitlines() if line.startswith("WARN"))
    assert "could not be loaded" in warn and "nonexistent_hal_xyz" in warn


def test_import_flagos_directly_reports_the_problem(run_python):
    proc = run_python("import flagos", env={"FLAGOS_HAL": "nonexistent_hal_xyz",
                                             "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
                      check=False)
    assert proc.returncode != 0 and "nonexistent_hal_xyz" in proc.stderr


FORK_CODE = r"""
import multiprocessing as mp
import torch, flagos

def child(q):
    try:
        torch.ones(2, device="flagos")
        q.put("no error")
    except Exception as e:
        q.put(f"{type(e).__name__}: {e}")

def cpu_child(q):
    q.put(str(torch.ones(3).sum().item()) + " " + str(torch.flagos._is_in_bad_fork()))

if __name__ == "__main__":
    keep = torch.ones(4, device="flagos")   # the parent uses the device before forking
    ctx = mp.get_context("fork")
    for target in (child, cpu_child):
        q = ctx.Queue()
        p = ctx.Process(target=target, args=(q,))
        p.start()
        print("CHILD", q.get(timeout=60))
        p.join(60)
        print("EXIT", p.exitcode)
    print("PARENT", keep.sum().item(), torch.flagos._is_in_bad_fork())
"""


def test_forked_child_gets_clear_error(run_python, tmp_path):
    script = tmp_path / "fork_script.py"
    script.write_text(FORK_CODE)
    out = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')").stdout
    lines = out.splitlines()
    assert "forked subprocess" in lines[0] and "spawn" in lines[0], out
    assert lines[1] == "EXIT 0"
    assert lines[2] == "CHILD 3.0 True"  # CPU work still fine in the child
    assert lines[3] == "EXIT 0"
    assert lines[4] == "PARENT 4.0 False"


def test_not_in_bad_fork_here():
    assert not torch.flagos._is_in_bad_fork()
    assert flagos._C._in_bad_fork() is False
