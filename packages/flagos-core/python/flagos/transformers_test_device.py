"""transformers' test suite on flagos: a device spec for ``transformers.testing_utils``.

transformers runs its own tests (``tests/models/...`` of its repository) on a device that
is not built in when it is told the device's name and a device spec file. Its loader
imports the file by the name given, so the file must sit in the directory the tests run
from: ``python -m flagos.transformers_test_device`` writes one there
(``flagos_device_spec.py``, which imports this module) and prints its name::

    cd transformers    # a checkout of the release installed
    TRANSFORMERS_TEST_DEVICE=flagos \\
    TRANSFORMERS_TEST_DEVICE_SPEC="$(python -m flagos.transformers_test_device)" \\
        python -m pytest tests/models/llama

transformers' device-agnostic helpers then seed, empty the cache of and count flagos
devices (``backend_manual_seed``, ``backend_empty_cache``, ``backend_device_count``): the
three functions it takes from a device spec. Its other helpers (memory statistics,
synchronize) have no spec entry and answer with their defaults for any device not built
in (no memory used, nothing to wait for).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import flagos  # noqa: F401 - registers the device and torch.flagos

__all__ = ["DEVICE_COUNT_FN", "DEVICE_NAME", "EMPTY_CACHE_FN", "MANUAL_SEED_FN", "write_spec"]

DEVICE_NAME = "flagos"
MANUAL_SEED_FN = torch.flagos.manual_seed
EMPTY_CACHE_FN = torch.flagos.empty_cache
DEVICE_COUNT_FN = torch.flagos.device_count

SPEC_FILE = "flagos_device_spec.py"


def write_spec(directory: str | Path = ".") -> Path:
    """Write the device spec file transformers loads (``TRANSFORMERS_TEST_DEVICE_SPEC``)
    into ``directory``, the one its tests run from; returns its path."""
    path = Path(directory) / SPEC_FILE
    path.write_text("# transformers' device spec for flagos (python -m flagos.transformers_test_device)\n"
                    "from flagos.transformers_test_device import *  # noqa: F403\n")
    return path


if __name__ == "__main__":
    print(write_spec().name)
    sys.exit(0)
