"""The native provider's tests again, in a child, with the ops an installed FlagGems
serves routed as themselves (it registers them for every route when it loads;
tools/pytest_plugins/flagos_as_themselves.py does it on sim): the results still match the
CPU and native still serves what it serves, whichever overload arrives. On a GPU machine
with FlagGems the other tests run this way anyway."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).parent
PLUGINS = HERE.parents[2] / "tools" / "pytest_plugins"


def test_native_tests_hold_with_ops_routed_as_themselves():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(PLUGINS), *filter(None, [os.environ.get("PYTHONPATH")])]))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "flagos_as_themselves", str(HERE / "test_native_ops.py"),
                        str(HERE / "test_fused_ops.py"), str(HERE / "test_fallthrough.py")],
                       env=env, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
