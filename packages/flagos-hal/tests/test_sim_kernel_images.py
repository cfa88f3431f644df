"""Images of the simulated device's kernel format loaded side by side: each module finds
its own kernels, also when one image is loaded while another stays loaded (dlopen knows a
library by its path, and the sim loads each image from an anonymous file)."""

from __future__ import annotations

import pytest
from flagos_hal import sim_kernels
from flagos_hal.kernel_checks import SIM_FORMAT
from flagos_hal.kernel_checks import _image as conformance_kernels

OTHER = r"""
#include "flagos_hal/sim_runtime.h"
static void other(const flagos_hal_sim_program_t* p, void* const* args) { (void)p; (void)args; }
__attribute__((visibility("default"))) const flagos_hal_sim_kernel_t flagos_sim_kernels[] = {
    {"other", other, 0, 0}, {0, 0, 0, 0}};
"""


@pytest.fixture(scope="module")
def other_image(tmp_path_factory) -> bytes:
    if sim_kernels.compiler() is None:
        pytest.skip("no C compiler")
    return sim_kernels.build(OTHER, tmp_path_factory.mktemp("other") / "libother.so")


def test_an_image_loaded_while_another_is_finds_its_own_kernels(hal, other_image):
    fmt, image = conformance_kernels(hal)
    assert fmt == SIM_FORMAT
    modules = []
    for _ in range(3):  # the first stays loaded while the others come and go
        first = hal.module_load(0, fmt, image)
        second = hal.module_load(0, fmt, other_image)
        assert hal.module_function(second, "other")
        assert hal.module_function(first, "vector_add")
        hal.module_unload(second)
        modules.append(first)
    for m in modules:
        hal.module_unload(m)
