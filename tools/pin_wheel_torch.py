"""Pins a built wheel's torch requirement to the torch release it was compiled against.

A C++ extension built on torch 2.13 links against 2.13's C++ symbols only, while its
source declares the whole tested range (``torch>=2.10,<2.15``). This rewrites the
wheel's ``Requires-Dist: torch ...`` to ``torch==2.13.*`` (the release of the torch
installed here) and updates the wheel's RECORD, as vendor plugins pin the torch they
were built for. ``nox -s build`` runs it on every wheel with a C++ extension.

    python tools/pin_wheel_torch.py dist/flagos_core-0.1.0-cp311-cp311-linux_x86_64.whl
"""

from __future__ import annotations

import base64
import hashlib
import pathlib
import re
import sys
import tempfile
import zipfile


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def pin(wheel: pathlib.Path, release: str) -> str:
    """Rewrites ``wheel`` in place; returns the new requirement line."""
    with zipfile.ZipFile(wheel) as zf:
        items = [(info, zf.read(info)) for info in zf.infolist()]
    meta_name = next(i.filename for i, _ in items if i.filename.endswith(".dist-info/METADATA"))
    record_name = meta_name.rsplit("/", 1)[0] + "/RECORD"
    files = {i.filename: d for i, d in items}
    line = f"Requires-Dist: torch=={release}.*"
    meta, n = re.subn(r"^Requires-Dist: torch\b[^;\n]*", line, files[meta_name].decode(),
                      flags=re.MULTILINE)
    if n != 1:
        raise SystemExit(f"{wheel.name}: expected one torch requirement, found {n}")
    files[meta_name] = meta.encode()
    record = []
    for row in files[record_name].decode().splitlines():
        path = row.split(",", 1)[0]
        if path == meta_name:
            row = f"{path},{_record_hash(files[meta_name])},{len(files[meta_name])}"
        record.append(row)
    files[record_name] = ("\n".join(record) + "\n").encode()
    with (tempfile.NamedTemporaryFile(dir=wheel.parent, suffix=".whl", delete=False) as tmp,
          zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf):
        for info, _ in items:
            zf.writestr(info, files[info.filename])
    pathlib.Path(tmp.name).replace(wheel)
    return line


def main() -> int:
    import torch

    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    for arg in sys.argv[1:]:
        print(f"{pathlib.Path(arg).name}: {pin(pathlib.Path(arg), release)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
