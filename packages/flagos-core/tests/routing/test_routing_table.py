"""The active table: precedence, resolution rules, run-time changes, threads, explain,
stats and the dispatch log, through a fake C++ backend."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
import torch
from flagos import routing

SIM, CUDA = 0, 1  # the fake backend's devices


def test_shipped_defaults_per_hal(installed) -> None:
    assert routing.resolve("aten::mm", SIM) == ["boxing", "cpu"]
    assert routing.resolve("aten::mm", CUDA) == ["native", "boxing", "cpu"]
    assert routing.resolve("aten::mv", CUDA) == ["boxing", "cpu"]  # native: mm only
    # gems (FlagGems) is opt-in: no shipped chain names it
    assert all("gems" not in r.chain for r in routing.rules())


def test_specificity(installed) -> None:
    routing.load(_file(installed, """
        default = ["gems", "cpu"]
        [ops]
        "aten::add" = "boxing"
        "aten::add.Scalar" = "gems"
        [hal.cuda]
        default = ["native", "cpu"]
        [hal.cuda.ops]
        "aten::add" = "native"
        """))
    # overload beats whole op; HAL-specific beats global at the same key
    assert routing.resolve("aten::add.Tensor", SIM) == ["boxing", "cpu"]
    assert routing.resolve("aten::add.Scalar", CUDA) == ["gems", "cpu"]
    d = routing.table.decide("aten::add.Tensor", "cuda")
    assert d.rule.describe() == "[hal.cuda] aten::add" and d.chain == ("cpu",)
    assert [s.reason for s in d.steps] == [
        "does not serve aten::add.Tensor", "appended: the CPU fallback is always last"]
    # the file's global default covers the shipped [hal.sim] default; [hal.cuda] beats it
    assert routing.resolve("aten::mv", SIM) == ["cpu"]  # gems is cuda only
    assert routing.table.decide("aten::mv", "sim").rule.chain == ("gems", "cpu")
    assert routing.table.decide("aten::mv", "cuda").rule.chain == ("native", "cpu")


def test_later_layers_cover_earlier(installed) -> None:
    routing.set({"hal.cuda.aten::mm": "native", "aten::add.Tensor": "gems"})
    routing.set({"aten::mm": "boxing", "aten::add": "boxing"})
    # a later global whole-op entry covers HAL entries and overload entries before it
    assert routing.resolve("aten::mm", CUDA) == ["boxing", "cpu"]
    assert routing.resolve("aten::add.Tensor", CUDA) == ["boxing", "cpu"]
    routing.set("hal.cuda.aten::add.Tensor=gems")  # a later, more specific entry adds
    assert routing.resolve("aten::add.Tensor", CUDA) == ["gems", "cpu"]
    assert routing.resolve("aten::add.Tensor", SIM) == ["boxing", "cpu"]


def test_filtering_reasons(backend, installed) -> None:
    class Broken(routing.Provider):
        name = "broken"

        def serves(self, op: str) -> bool:
            raise RuntimeError("boom")

    class Cpp(routing.Provider):
        name = "fastcpp"
        is_cpp = True

    routing.register_provider(Broken())
    routing.register_provider(Cpp())
    routing.set({"aten::mm": ["broken", "fastcpp", "gems", "native", "cpu"]})
    steps = {s.provider: s.reason for s in routing.table.decide("aten::mm", "sim").steps}
    assert steps == {
        "broken": "serves() raised RuntimeError: boom",
        "fastcpp": "C++ provider not registered with the flagos core",
        "gems": "not available on HAL 'sim' (runs on: cuda)",
        "native": "not available on HAL 'sim' (runs on: cuda)",
        "cpu": "",
    }
    backend.cpp.add("fastcpp")
    routing.set("aten::mm=fastcpp,native")
    assert routing.resolve("aten::mm", CUDA) == ["fastcpp", "native", "cpu"]
    backend.cpp.add("onlycpp")  # registered in C++ without a Python description: kept
    routing.set("aten::mm=onlycpp")
    assert routing.resolve("aten::mm", SIM) == ["onlycpp", "cpu"]
    with pytest.raises(IndexError):
        routing.resolve("aten::mm", 2)


def test_not_installed_is_skipped(backend, monkeypatch: pytest.MonkeyPatch) -> None:
    # gems and native are well-known names; here no package provides them.
    monkeypatch.setattr(routing.table, "discover", lambda: {"cpu": routing.CpuProvider()})
    routing.reset()
    routing.set("aten::mm=gems,native,cpu")
    d = routing.table.decide("aten::mm", "sim")
    expect = {name: "C++ provider not registered with the flagos core"
              if name in routing.providers() else "not installed" for name in ("gems", "native")}
    assert [(s.provider, s.kept, s.reason) for s in d.steps] == [
        ("gems", False, expect["gems"]), ("native", False, expect["native"]), ("cpu", True, "")]
    with pytest.raises(routing.RoutingConfigError, match="unknown provider 'fast'"):
        routing.set("aten::mm=fast")  # not well-known, not installed: an error


def _file(tmp, text: str, name: str = "routes.toml") -> Path:
    import tempfile
    import textwrap

    path = Path(tempfile.mkdtemp()) / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def test_precedence(monkeypatch, backend, installed) -> None:
    f = _file(None, '[ops]\n"aten::mm" = "gems"\n"aten::mv" = "gems"\n"aten::bmm" = "gems"\n'
                    '"aten::dot" = "gems"\n')
    monkeypatch.setenv("FLAGOS_ROUTES_FILE", str(f))
    monkeypatch.setenv("FLAGOS_ROUTES", "aten::bmm=native ; aten::dot=native")
    routing.reset()
    chain = {op: routing.table.decide(op, "cuda").rule.chain[0]
             for op in ("aten::mm", "aten::mv", "aten::bmm", "aten::dot", "aten::addmm")}
    assert chain == {"aten::mm": "gems", "aten::mv": "gems", "aten::bmm": "native",
                     "aten::dot": "native", "aten::addmm": "native"}  # addmm: [hal.cuda]
    routing.set("aten::mv=boxing;aten::bmm=boxing")  # over the file, under FLAGOS_ROUTES
    assert routing.table.decide("aten::mv", "cuda").rule.chain[0] == "boxing"
    assert routing.table.decide("aten::bmm", "cuda").rule.origin == "FLAGOS_ROUTES:1"
    with routing.override({"aten::bmm": "boxing"}):  # over everything
        assert routing.table.decide("aten::bmm", "cuda").rule.chain[0] == "boxing"
    assert routing.table.decide("aten::bmm", "cuda").rule.chain[0] == "native"
    routing.reset()  # drops set(), keeps env
    assert routing.table.decide("aten::mv", "cuda").rule.chain[0] == "gems"
    assert str(f) in routing.table.decide("aten::mv", "cuda").rule.origin


def test_env_errors(monkeypatch, backend) -> None:
    monkeypatch.setenv("FLAGOS_ROUTES", "aten::mm=cpu;aten::softmax=boxng")
    with pytest.raises(routing.RoutingConfigError) as info:
        routing.reset()
    assert str(info.value).startswith("FLAGOS_ROUTES:2: unknown provider 'boxng'")
    monkeypatch.delenv("FLAGOS_ROUTES")
    bad = _file(None, "[ops]\n'aten::mm' = 'cpu'\n'aten::sofmax' = 'cpu'\n", "mine.toml")
    monkeypatch.setenv("FLAGOS_ROUTES_FILE", str(bad))
    with pytest.raises(routing.RoutingConfigError, match="did you mean 'aten::softmax'") as info:
        routing.reset()
    assert str(info.value).startswith(f"{bad}:3: unknown op 'aten::sofmax'")


def test_invalid_set_changes_nothing(backend) -> None:
    v = routing.version()
    with pytest.raises(routing.RoutingConfigError):
        routing.set({"aten::mm": "cpu", "aten::mv": "gemz"})
    assert routing.version() == v
    assert routing.table.decide("aten::mm", "sim").rule.key == "default"


def test_override_nests_and_restores(backend, installed) -> None:
    v0, bumps = routing.version(), backend.version
    assert routing.resolve("aten::mm", SIM) == ["boxing", "cpu"]
    with routing.override("aten::mm=cpu"):
        assert routing.resolve("aten::mm", SIM) == ["cpu"]
        with pytest.raises(KeyError), routing.override({"aten::mm": ["gems", "cpu"]}):
            assert routing.resolve("aten::mm", CUDA) == ["gems", "cpu"]
            raise KeyError("inside")
        assert routing.resolve("aten::mm", CUDA) == ["cpu"]
    assert routing.resolve("aten::mm", SIM) == ["boxing", "cpu"]
    assert routing.version() == v0 + 4 and backend.version == bumps + 4
    with pytest.raises(routing.RoutingConfigError, match="override\\(\\):1"):
        routing.override("aten::mm=gemz")
    ctx = routing.override("aten::mv=cpu")
    with ctx, ctx:  # one object entered twice
        pass
    assert routing.table._state.overrides == []


def test_runtime_switch_seen_in_stats(backend, installed) -> None:
    a, b = torch.ones(2, 2), torch.ones(2, 2)
    mm = torch.ops.aten.mm.default
    assert backend.dispatch(mm, (a, b), {}, SIM)[0] == "boxing"
    routing.set("aten::mm=cpu")
    assert backend.dispatch(mm, (a, b), {}, SIM)[0] == "cpu"
    with routing.override({"hal.sim.aten::mm": "boxing"}):
        # boxing declines float64: the call goes down the chain to cpu
        assert backend.dispatch(mm, (a.double(), b.double()), {}, SIM)[0] == "cpu"
    assert backend.dispatch(mm, (a, b), {}, SIM)[0] == "cpu"
    s = routing.stats()
    assert {p: (r["calls"], r["declined"]) for p, r in s["aten::mm"].items()} == {
        "boxing": (1, 1), "cpu": (3, 0)}
    assert isinstance(s["aten::mm"]["cpu"]["total_us"], float)
    assert installed["boxing"].calls == ["aten::mm", "aten::mm"]
    resolves = backend.resolves
    backend.dispatch(mm, (a, b), {}, SIM)
    assert backend.resolves == resolves  # cached until the table changes
    routing.reset_stats()
    assert routing.stats() == {}


def test_set_backend_contract(installed, make_backend) -> None:
    fresh = make_backend(["cuda"])
    routing.set_backend(fresh)
    # every Python provider: the fakes, and installed ones (flagos-quant's emulation)
    python = {n for n, p in routing.providers().items() if not p.is_cpp}
    assert set(fresh.python) == python and {"boxing", "gems", "native"} <= python
    assert fresh.resolver is routing.resolve and fresh.version == 1
    assert fresh.chain("aten::mm", 0) == ["native", "boxing", "cpu"]
    with pytest.raises(TypeError, match="missing: .*stats, reset_stats, set_resolver"):
        routing.set_backend(object.__new__(type("Half", (), {
            "bump_version": lambda s: None, "cpp_providers": lambda s: [],
            "provider_engines": lambda s: {},
            "register_python_provider": lambda s, n, f: None,
            "device_hal_names": lambda s: []})))


def test_threads_change_routes_while_others_resolve(backend, installed) -> None:
    valid = {("boxing", "cpu"), ("cpu",), ("gems", "cpu"), ("native", "boxing", "cpu"),
             ("gems", "boxing", "cpu"), ("boxing", "gems", "cpu"), ("native", "cpu")}
    errors: list[BaseException] = []
    seen: set[tuple[str, ...]] = set()
    stop = threading.Event()

    def changer(seed: int) -> None:
        rnd = random.Random(seed)
        try:
            while not stop.is_set():
                chain = rnd.choice(["cpu", "gems,cpu", "boxing,gems,cpu", "native,cpu"])
                if rnd.random() < 0.5:
                    routing.set(f"aten::mm={chain}")
                else:
                    with routing.override({"aten::mm": chain}):
                        pass
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def caller() -> None:
        # 3000 calls, and on until a change was seen (a loaded machine may run the callers
        # before the changers' first change), for at most 20 s.
        deadline = time.monotonic() + 20
        try:
            i = 0
            while i < 3000 or (len(seen) < 2 and time.monotonic() < deadline):
                chain = tuple(backend.chain("aten::mm", i % 2))
                seen.add(chain)
                assert chain in valid and chain[-1] == "cpu", chain
                i += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    changers = [threading.Thread(target=changer, args=(s,)) for s in range(3)]
    callers = [threading.Thread(target=caller) for _ in range(4)]
    for t in changers + callers:
        t.start()
    for t in callers:
        t.join()
    stop.set()
    for t in changers:
        t.join()
    assert errors == []
    assert len(seen) > 1
    assert routing.table._state.overrides == []


def test_explain(backend, installed) -> None:
    routing.set("hal.sim.aten::mm=gems,boxing")
    text = str(routing.explain("aten::mm"))
    assert text.startswith(f"aten::mm (routing table version {routing.version()})")
    assert "flagos:0 (HAL sim)" in text and "flagos:1 (HAL cuda)" in text
    assert "from [hal.sim] aten::mm at set():1 (called at test_routing_table.py:" in text
    assert "- gems: skipped, not available on HAL 'sim' (runs on: cuda)" in text
    assert "- cpu: appended: the CPU fallback is always last" in text
    assert "served by: boxing" in text and "served by: native" in text
    assert f"from [hal.cuda] default at {routing.table.DEFAULTS_FILE}:{_cuda_default()}\n" in text
    e = routing.explain("aten::add.Tensor")
    assert [d.provider for d in e.devices] == ["boxing", "boxing"]  # gems is opt-in
    # a whole op, as a routing key names it: every overload explained
    whole = routing.explain("aten::add")
    assert isinstance(whole, routing.OpExplanation) and whole.op == "aten::add"
    names = [e.op for e in whole.overloads]
    assert "aten::add.Tensor" in names and "aten::add.Scalar" in names and names == sorted(names)
    assert str(whole).startswith(f"aten::add: {len(names)} overloads\n")
    assert "aten::add.Tensor (routing table version" in str(whole)
    with pytest.raises(ValueError, match="did you mean 'aten::mm'"):
        routing.explain("aten::mmm")
    routing.set_backend(None)
    assert "no flagos devices" in str(routing.explain("aten::mm"))


def _cuda_default() -> int:
    lines = routing.table.DEFAULTS_FILE.read_text().splitlines()
    start = lines.index("[hal.cuda]")
    return next(i for i, line in enumerate(lines, 1) if i > start and line.startswith("default"))


def test_dispatch_log_once(monkeypatch, capfd, backend, installed) -> None:
    monkeypatch.setenv("FLAGOS_LOG_DISPATCH", "1")
    routing.reset()
    routing.set("aten::mm=gems,boxing")
    for _ in range(3):
        routing.resolve("aten::mm", SIM)
    routing.set("aten::mv=cpu")  # another op: aten::mm's decision is the same, not logged
    routing.resolve("aten::mm", SIM)
    err = capfd.readouterr().err
    assert err.count("aten::mm on flagos:0 (sim)") == 1, err
    assert "[flagos.routing] aten::mm on flagos:0 (sim) -> boxing -> cpu (from aten::mm at " \
           "set():1" in err
    assert "skipped gems: not available on HAL 'sim'" in err
