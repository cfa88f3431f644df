"""flagos: one PyTorch device for any AI accelerator.

``import flagos`` (or plain ``import torch`` once flagos-core is installed) loads the
HALs chosen by ``FLAGOS_HAL`` (see flagos_hal.discover), renames PrivateUse1 to
``flagos``, installs ``torch.flagos`` and connects the routing table to the C++
dispatcher. Then ``torch.randn(4, 4, device="flagos")`` works.
"""

from __future__ import annotations

import torch

from flagos._runtime import init as _init

_init()

from flagos._autograd_teardown import install as _install_autograd_teardown

_install_autograd_teardown()

from flagos import routing as routing
from flagos._routing_backend import install as _install_routing
from flagos.api import *

_install_routing()

from flagos._plugins import load_plugins as _load_plugins

_load_plugins()

from flagos._transformers_kernels import install as _install_transformers_kernels

_install_transformers_kernels()

from flagos._accelerate_safetensors import install as _install_accelerate_safetensors

_install_accelerate_safetensors()

from flagos._triton_default import install as _install_triton_default

_install_triton_default()

__version__ = "0.1.0"
del torch
