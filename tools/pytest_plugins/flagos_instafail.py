"""A pytest plugin that writes each failure's report to the log as it happens.

pytest prints failure details at the end of the session; a test folder killed at its time
limit (tools/gpu_check.sh runs each within one) then leaves only "FAILED name". With
``-p flagos_instafail`` (this folder on PYTHONPATH) each failing test's traceback is
written at once, also under pytest-xdist, where the controller receives the reports.
"""

from __future__ import annotations

import pytest

_config: pytest.Config | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _config
    _config = config


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.failed or _config is None:
        return
    terminal = _config.pluginmanager.get_plugin("terminalreporter")
    if terminal is None:
        return
    terminal.write_line("")
    terminal.write_sep("-", f"FAILED {report.nodeid} ({report.when})")
    terminal.write_line(str(report.longrepr))
