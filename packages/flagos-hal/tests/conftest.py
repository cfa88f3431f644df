import flagos_hal
import pytest


@pytest.fixture(scope="session")
def sim_path() -> str:
    return flagos_hal.library_path("sim")


@pytest.fixture()
def hal(sim_path):
    return flagos_hal.load(sim_path)
