"""A subset of the zoo under torch.compile (Inductor through flagos-compile): the compiled
model on flagos against the eager model on the CPU."""

from __future__ import annotations

import dataclasses
import os
import tempfile

import pytest
import torch
from zoo_cases import CASES
from zoo_check import run_case

# Forward only: compiling a backward too doubles the C++ compile time on CI's CPU.
COMPILED = {"GPT-2": ("forward",), "UNet2DModel": ("forward",)}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                          os.path.join(tempfile.gettempdir(), "flagos_zoo_inductor_cache"))
    pytest.importorskip("flagos_compile")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", list(COMPILED))
def test_compiled_model_matches_cpu(name: str) -> None:
    case = dataclasses.replace(CASES[name], checks=COMPILED[name])
    pytest.importorskip(case.library)
    run_case(case, mode="compile", wrap=torch.compile)
