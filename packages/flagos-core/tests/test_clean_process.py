"""The clean-process timer the benchmarks use for the native side of a training step."""

from __future__ import annotations

import dataclasses
import sys

import pytest
import torch
from flagos.models import LlamaConfig
from flagos.models.clean_process import CleanProcessTimer


def test_times_steps_in_a_process_without_flagos() -> None:
    cfg = LlamaConfig(vocab_size=64, dim=32, n_layers=1, n_heads=2, hidden_dim=64,
                      max_seq_len=17)
    timer = CleanProcessTimer(dataclasses.asdict(cfg), "cpu", torch.float32, batch=2, seq=16)
    try:
        first, second = timer(1, 2), timer(0, 2)
        assert first > 0 and second > 0
    finally:
        timer.close()
    assert timer._proc.returncode == 0


def test_a_failing_child_is_an_error_not_a_hang() -> None:
    # An unknown device makes the child exit before answering.
    timer = CleanProcessTimer(dataclasses.asdict(LlamaConfig()), "no_such_device",
                              torch.float32, batch=1, seq=4)
    with pytest.raises(RuntimeError, match="clean native process exited"):
        timer(0, 1)
    timer.close()


def test_autoload_off_keeps_flagos_out(tmp_path) -> None:
    # What the timer's child relies on: with autoload off, import torch loads no flagos.
    import subprocess

    code = "import sys, torch; print('flagos' in sys.modules, hasattr(torch, 'flagos'))"
    env = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, cwd=tmp_path).stdout
    assert out.split() == ["False", "False"], out
