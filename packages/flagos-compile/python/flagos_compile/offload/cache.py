"""The disk cache of compiled artifacts.

An artifact is stored under a key hashed from everything that decides its bytes: the
region's ATen code, its input shapes and dtypes, the frozen weights' bytes, the compiler
(name, version, settings), the artifact format and the torch release (its ONNX exporter).
Where: ``FLAGOS_OFFLOAD_CACHE``, else ``$XDG_CACHE_HOME/flagos/offload`` (``~/.cache``).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import tempfile
from collections.abc import Iterable

import torch

KEY_VERSION = "flagos-offload-1"


def default_dir() -> pathlib.Path:
    env = os.environ.get("FLAGOS_OFFLOAD_CACHE")
    if env:
        return pathlib.Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "flagos" / "offload"


def key(code: str, inputs: Iterable[tuple[tuple[int, ...], torch.dtype]], weights: Iterable[torch.Tensor],
        compiler, fmt: str) -> str:
    """The cache key of one region (hex sha256)."""
    h = hashlib.sha256()
    for part in (KEY_VERSION, torch.__version__, compiler.name, compiler.version, compiler.settings(), fmt, code):
        h.update(part.encode())
        h.update(b"\0")
    for shape, dtype in inputs:
        h.update(f"{list(shape)}:{dtype};".encode())
    for w in weights:
        cpu = w.detach().to("cpu").contiguous()
        h.update(f"{list(cpu.shape)}:{cpu.dtype};".encode())
        h.update(cpu.view(torch.uint8).numpy().tobytes() if cpu.numel() else b"")
    return h.hexdigest()


class ArtifactCache:
    """Artifacts by key in one directory (``None``: no caching)."""

    def __init__(self, directory: str | os.PathLike | None) -> None:
        self.dir = pathlib.Path(directory) if directory is not None else None

    def get(self, k: str) -> tuple[bytes, dict] | None:
        if self.dir is None:
            return None
        blob, meta = self.dir / f"{k}.bin", self.dir / f"{k}.json"
        try:
            return blob.read_bytes(), json.loads(meta.read_text())
        except (OSError, ValueError):
            return None

    def put(self, k: str, artifact: bytes, meta: dict) -> None:
        if self.dir is None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        # Written whole, then renamed: a reader never sees half an artifact.
        for name, data in ((f"{k}.bin", artifact), (f"{k}.json", json.dumps(meta).encode())):
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.dir / name)
