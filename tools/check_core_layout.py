"""Checks the layout of flagos-core's C++ (packages/flagos-core/csrc) that
docs/architecture.md describes:

- runtime/ includes nothing of aten/, router/ or engines/: the device runtime stands
  alone, below the ops;
- an engine's folder (engines/<name>/) is entered through one header: code outside the
  folder includes only that entry header (csrc_cuda/, the CUDA half of the twin engine,
  counts as inside engines/twin/);
- every engine folder has its entry header.

Exit status 1 with one line per violation, naming the file and line.
"""

from __future__ import annotations

import pathlib
import re
import sys

CORE = pathlib.Path(__file__).resolve().parent.parent / "packages" / "flagos-core"
CSRC = CORE / "csrc"
ENTRY_HEADERS = {
    "cpu": "cpu_engine.h",
    "twin": "twin_engine.h",
    "python": "python_engine.h",
    "external": "external_engine.h",
    "launch": "launch_cache.h",
}
# Folders outside csrc/ that belong to an engine.
ENGINE_OF_FOLDER = {CORE / "csrc_cuda": "twin"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def engine_of(path: pathlib.Path) -> str | None:
    for folder, engine in ENGINE_OF_FOLDER.items():
        if folder in path.parents:
            return engine
    rel = path.relative_to(CSRC).parts if CSRC in path.parents else ()
    return rel[1] if len(rel) > 2 and rel[0] == "engines" else None


def violations() -> list[str]:
    found = []
    engines = sorted(p.name for p in (CSRC / "engines").iterdir() if p.is_dir())
    for engine in engines:
        entry = ENTRY_HEADERS.get(engine)
        if entry is None:
            found.append(f"csrc/engines/{engine}/: an engine folder without an entry header "
                         f"(add it to ENTRY_HEADERS in {pathlib.Path(__file__).name})")
        elif not (CSRC / "engines" / engine / entry).is_file():
            found.append(f"csrc/engines/{engine}/{entry}: entry header missing")
    sources = [p for p in CORE.rglob("*") if p.suffix in (".h", ".cpp")
               and "build" not in p.relative_to(CORE).parts]
    for path in sorted(sources):
        rel = path.relative_to(CORE)
        in_runtime = CSRC / "runtime" in path.parents
        own = engine_of(path)
        for number, line in enumerate(path.read_text().splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)
            parts = target.split("/")
            if in_runtime and parts[0] in ("aten", "router", "engines"):
                found.append(f"{rel}:{number}: runtime/ includes {target}; the runtime "
                             "stands below the ops")
            if parts[0] == "engines" and len(parts) == 3 and parts[1] != own:
                entry = ENTRY_HEADERS.get(parts[1])
                if parts[2] != entry:
                    found.append(f"{rel}:{number}: includes {target} from outside its engine; "
                                 f"include engines/{parts[1]}/{entry}")
    return found


def main() -> int:
    found = violations()
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
