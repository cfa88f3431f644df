"""Every zoo case by name."""

from __future__ import annotations

import diffusers_zoo
import transformers_zoo
from zoo_check import Case

CASES: dict[str, Case] = {c.name: c for c in transformers_zoo.CASES + diffusers_zoo.CASES}
