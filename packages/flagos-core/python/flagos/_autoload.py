"""Kept for installations whose entry point still names ``flagos._autoload:autoload``.

The entry point now lives in the top-level ``_flagos_autoload`` module (see its
docstring for why); this forwards to it.
"""

from __future__ import annotations

from _flagos_autoload import autoload

__all__ = ["autoload"]
