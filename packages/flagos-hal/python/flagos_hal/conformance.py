"""HAL conformance suite.

    python -m flagos_hal.conformance [--hal NAME|PATH] [--asan] [--json] [-k SUBSTRING]

Runs every check of flagos_hal.checks against one HAL library and prints a table (check,
result, time, detail); exits 1 when a check fails. Each check runs in its own forked
process that opens the library afresh, so a crash or hang fails that check only.

--asan re-runs the suite with the AddressSanitizer runtime preloaded against the ASan
build of the library (for ``sim``: libflagos_hal_sim_asan.so; for a path: that library,
which must be an ASan build) and fails if ASan reports an error.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

from flagos_hal._bundled import ASAN_SIM, lib_dir
from flagos_hal.checks import CHECKS, Check, Skip

ASAN_ERROR = "ERROR: AddressSanitizer"


@dataclass
class Result:
    check: str
    result: str  # PASS, FAIL, SKIP
    detail: str
    seconds: float


def _child(path: str, check: Check, fd: int) -> None:
    from flagos_hal.binding import Hal

    try:
        hal = Hal(path)
        if check.devices and hal.device_count() < check.devices:
            raise Skip(f"needs {check.devices} device(s), HAL has {hal.device_count()}")
        outcome = ("PASS", check.fn(hal) or "")
    except Skip as e:
        outcome = ("SKIP", str(e))
    except BaseException as e:  # noqa: BLE001 - everything a check raises is its failure
        outcome = ("FAIL", f"{type(e).__name__}: {e}")
    os.write(fd, json.dumps(outcome).encode())


def run_check(path: str, check: Check, timeout: float) -> Result:
    """Run one check in a forked child; a crash, exit or hang is that check's FAIL."""
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            _child(path, check, w)
        except BaseException:  # noqa: BLE001
            code = 3
        finally:
            os._exit(code)
    os.close(w)
    chunks, deadline, timed_out = [], time.monotonic() + timeout, False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            os.kill(pid, signal.SIGKILL)
            break
        ready, _, _ = select.select([r], [], [], left)
        if ready:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    seconds = time.perf_counter() - t0
    if timed_out:
        return Result(check.name, "FAIL", f"timed out after {timeout:.0f} s (hang?)", seconds)
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        return Result(check.name, "FAIL", f"crashed with {sig}", seconds)
    if not chunks:
        return Result(check.name, "FAIL",
                      f"process exited with status {os.WEXITSTATUS(status)} without a result "
                      "(see stderr; an ASan report exits like this)", seconds)
    result, detail = json.loads(b"".join(chunks))
    return Result(check.name, result, detail, seconds)


def _table(path: str, results: list[Result]) -> str:
    width = max(len(r.check) for r in results)
    lines = [f"flagos HAL conformance: {path}", ""]
    lines.append(f"{'check':<{width}}  result  {'time':>8}  detail")
    lines.append("-" * (width + 60))
    for r in results:
        lines.append(f"{r.check:<{width}}  {r.result:<6}  {r.seconds * 1e3:6.0f}ms  {r.detail}")
    counts = {k: sum(r.result == k for r in results) for k in ("PASS", "FAIL", "SKIP")}
    lines.append("-" * (width + 60))
    lines.append(f"{len(results)} checks: {counts['PASS']} passed, {counts['FAIL']} failed, "
                 f"{counts['SKIP']} skipped")
    return "\n".join(lines)


def run_suite(path: str, select_: str = "", timeout: float = 120.0) -> list[Result]:
    checks = [c for c in CHECKS if select_ in c.name]
    return [run_check(path, c, timeout) for c in checks]


def asan_runtime(library: str) -> str:
    """The ASan runtime `library` links to (ldd), else gcc's."""
    try:
        out = subprocess.run(["ldd", library], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if "libasan" in line and "=>" in line:
                candidate = line.split("=>")[1].split("(")[0].strip()
                if os.path.exists(candidate):
                    return candidate
    except OSError:
        pass
    out = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True,
                         check=False).stdout.strip()
    if out and os.path.isabs(out) and os.path.exists(out):
        return out
    raise RuntimeError(f"cannot find the AddressSanitizer runtime for {library} (ldd, gcc)")


def _asan_library(hal: str) -> str:
    if hal == "sim":
        path = lib_dir() / ASAN_SIM
        if not path.is_file():
            raise SystemExit(f"flagos_hal.conformance: no ASan build of sim installed ({path})")
        return str(path)
    if os.path.isfile(hal):
        return os.path.abspath(hal)
    raise SystemExit(f"flagos_hal.conformance: --asan needs 'sim' or the path of an ASan build "
                     f"of the HAL, got {hal!r}")


def run_asan(args: argparse.Namespace) -> int:
    library = _asan_library(args.hal)
    env = dict(os.environ)
    env["LD_PRELOAD"] = asan_runtime(library)
    env["ASAN_OPTIONS"] = "detect_leaks=0:" + env.get("ASAN_OPTIONS", "")
    cmd = [sys.executable, "-m", "flagos_hal.conformance", "--hal", library,
           "--timeout", str(args.timeout), "-k", args.k] + (["--json"] if args.json else [])
    print(f"[asan] LD_PRELOAD={env['LD_PRELOAD']} {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=env, stderr=subprocess.PIPE, text=True, check=False)
    sys.stderr.write(proc.stderr)
    if ASAN_ERROR in proc.stderr:
        print("[asan] FAIL: AddressSanitizer reported an error (see above)", file=sys.stderr)
        return 1
    if proc.returncode == 0:
        print("[asan] no AddressSanitizer errors", file=sys.stderr)
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flagos_hal.conformance", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hal", default="sim", help="HAL entry-point name or library path")
    ap.add_argument("--asan", action="store_true", help="run under AddressSanitizer")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("-k", default="", help="only checks whose name contains this")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per check")
    ap.add_argument("--list", action="store_true", help="list the checks and exit")
    args = ap.parse_args(argv)
    if args.list:
        for c in CHECKS:
            print(f"{c.name:<32} {c.doc}")
        return 0
    if args.asan:
        return run_asan(args)
    from flagos_hal.discovery import resolve

    try:
        path = resolve(args.hal, "--hal").path
    except Exception as e:  # noqa: BLE001
        print(f"flagos_hal.conformance: {e}", file=sys.stderr)
        return 2
    results = run_suite(path, args.k, args.timeout)
    if args.json:
        print(json.dumps({"hal": path, "results": [asdict(r) for r in results]}, indent=1))
    else:
        print(_table(path, results))
    return 1 if any(r.result == "FAIL" for r in results) or not results else 0


if __name__ == "__main__":
    sys.exit(main())
