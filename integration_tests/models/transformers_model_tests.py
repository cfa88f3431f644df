"""transformers' own model tests on flagos, against the CPU.

    python integration_tests/models/transformers_model_tests.py --checkout PATH \
        [--models bert gpt2 llama qwen3] [--jobs 2] [--json OUT]
    python integration_tests/models/transformers_model_tests.py --fetch [...]

runs ``tests/models/<model>/`` of a transformers checkout (the repository at the installed
release's tag: its package ships the common test mixins but not ``tests/models``) twice,
on the CPU and on flagos (``TRANSFORMERS_TEST_DEVICE=flagos`` with the device spec of
:mod:`flagos.transformers_test_device`), and compares the two per test. ``--fetch``
downloads the tag's source archive from GitHub into ``--cache`` instead.

It fails when a test that passes on the CPU does not pass on flagos, or an
accelerator-only test (one the CPU skips) fails on flagos, other than for the reasons
outside flagos in ``OUTSIDE_FLAGOS`` (docs/models.md): those are listed apart, with the
reason.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

MODELS = ["bert", "gpt2", "llama", "qwen3"]

# Failures whose cause lies outside flagos: (test-name pattern, error pattern, reason).
OUTSIDE_FLAGOS = [
    (r"test_eager_matches_sdpa_inference_\w*fp16", r"atol = 1e-07",
     "transformers' harness holds a device it does not know to atol=1e-7 in fp16"),
    (r"test_flex_attention", r"FlexAttention is only supported on",
     "torch's FlexAttention accepts a fixed list of device types"),
]


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """Each test of a junit file: ("pass" | "fail" | "skip", its last error line or skip
    reason). A test reported several times (subtests) keeps its worst outcome."""
    found: dict[str, tuple[str, str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("classname", "") + "::" + case.get("name", "")
        outcome = ("pass", "")
        for child in case:
            if child.tag in ("failure", "error"):
                lines = [ln for ln in (child.text or "").splitlines() if ln.startswith("E ")]
                outcome = ("fail", lines[-1][2:].strip() if lines else child.get("message") or "")
                break
            if child.tag == "skipped":
                outcome = ("skip", child.get("message") or "")
        if _WORSE[outcome[0]] >= _WORSE[found.get(name, ("pass",))[0]]:
            found[name] = outcome
    return found


_WORSE = {"pass": 0, "skip": 1, "fail": 2}


def outside_flagos(name: str, error: str) -> str | None:
    """The reason a failure lies outside flagos, or None."""
    for test, message, reason in OUTSIDE_FLAGOS:
        if re.search(test, name) and re.search(message, error):
            return reason
    return None


def _counts(found: dict) -> dict[str, int]:
    return dict(collections.Counter(outcome for outcome, _ in found.values()))


def compare(cpu: dict, flagos: dict) -> dict:
    """Counts and the tests that regress on flagos, split by whose cause they are."""
    regressions, outside = [], []
    for name in sorted(cpu.keys() | flagos.keys()):
        was, (now, error) = cpu.get(name, ("missing", ""))[0], flagos.get(name, ("missing", ""))
        if now == "pass" or (was not in ("pass", "skip")) or (was == "skip" and now == "skip"):
            continue
        if now == "missing":
            error = "not run on flagos"
        reason = outside_flagos(name, error)
        (outside if reason else regressions).append(
            {"test": name, "cpu": was, "flagos": now, "error": error[:300],
             **({"reason": reason} if reason else {})})
    return {"cpu": _counts(cpu), "flagos": _counts(flagos),
            "regressions": regressions, "outside_flagos": outside}


def run_pytest(checkout: Path, model: str, device: str, junit: Path, jobs: int) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("TRANSFORMERS_TEST_DEVICE_SPEC", None)
    # transformers' tests take CUDA where torch has it: the reference is the CPU's
    env.update(TRANSFORMERS_TEST_DEVICE="cpu")
    if device == "cpu":
        env.update(CUDA_VISIBLE_DEVICES="")
    else:
        spec = subprocess.run([sys.executable, "-m", "flagos.transformers_test_device"],
                              cwd=checkout, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()
        env.update(TRANSFORMERS_TEST_DEVICE="flagos", TRANSFORMERS_TEST_DEVICE_SPEC=spec)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            f"--junitxml={junit}", f"tests/models/{model}"]
    if jobs > 1:
        args[4:4] = ["-n", str(jobs)]
    subprocess.run(args, cwd=checkout, env=env, check=False, stdout=subprocess.DEVNULL)


def fetch(version: str, cache: Path) -> Path:
    """The transformers repository at tag v<version>, downloaded once into ``cache``."""
    checkout = cache / f"transformers-{version}"
    if not checkout.is_dir():
        url = f"https://github.com/huggingface/transformers/archive/refs/tags/v{version}.tar.gz"
        with urllib.request.urlopen(url, timeout=600) as response:
            data = response.read()
        cache.mkdir(parents=True, exist_ok=True)
        # unpacked beside, then renamed: an interrupted run leaves no partial checkout
        with tempfile.TemporaryDirectory(dir=cache) as unpacked, \
                tarfile.open(fileobj=io.BytesIO(data)) as archive:
            # the "data" filter (no links out, no devices) where this Python has it
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            archive.extractall(unpacked, **safe)
            (Path(unpacked) / checkout.name).rename(checkout)
    return checkout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--checkout", type=Path, help="a transformers repository at the "
                       "installed release's tag")
    where.add_argument("--fetch", action="store_true", help="download that tag from GitHub")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "flagos-hf")
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--jobs", type=int, default=2, help="pytest-xdist workers (1: none)")
    ap.add_argument("--json", type=Path, help="write the comparison here")
    args = ap.parse_args(argv)
    import transformers

    checkout = args.checkout or fetch(transformers.__version__, args.cache)
    results, failed = {}, False
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            junit = {d: Path(tmp) / f"{model}-{d}.xml" for d in ("cpu", "flagos")}
            for device, path in junit.items():
                run_pytest(checkout.resolve(), model, device, path, args.jobs)
            found = {d: outcomes(p) if p.exists() else {} for d, p in junit.items()}
            if "pass" not in {outcome for outcome, _ in found["cpu"].values()}:
                # nothing collected, or every module failed to import (a missing test
                # dependency, a checkout of another release than the installed one)
                print(f"{model}: no test passed on the CPU (tests/models/{model} in "
                      f"{checkout}, for transformers {transformers.__version__}?)")
                failed = True
                continue
            results[model] = compare(found["cpu"], found["flagos"])
    for model, r in results.items():
        print(f"{model}: cpu {r['cpu']}, flagos {r['flagos']}; "
              f"{len(r['regressions'])} regressions, {len(r['outside_flagos'])} outside flagos")
        for item in r["regressions"]:
            print(f"  REGRESSION {item['test']} ({item['cpu']} on the CPU): {item['error']}")
        for reason, n in collections.Counter(i["reason"] for i in r["outside_flagos"]).items():
            print(f"  {n} outside flagos: {reason}")
        failed |= bool(r["regressions"])
    if args.json:
        args.json.write_text(json.dumps({"transformers": transformers.__version__,
                                         "models": results}, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
