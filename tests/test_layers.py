"""The layers of ``engine/`` (README, "Layout"): no import cycle anywhere, the
pure core imports nothing from the shells (nor asyncio, threads, the clock,
randomness, Ray or FastAPI), and each arrow points down: core <- log <- router
<- runtime <- cluster, with the gateway above them all."""

from __future__ import annotations

import ast
import graphlib
import pathlib

ENGINE = pathlib.Path(__file__).resolve().parents[1] / "engine"
LAYERS = ["engine.core", "engine.log", "engine.router", "engine.runtime", "engine.cluster"]
NOT_IN_CORE = {"asyncio", "threading", "time", "random", "secrets", "socket", "subprocess", "os", "ray", "fastapi",
               "starlette", "uvicorn", "concurrent"}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for p in sorted(ENGINE.rglob("*.py")):
        parts = list(p.relative_to(ENGINE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _imports(name: str, path: pathlib.Path) -> tuple[set[str], set[str]]:
    """(engine modules imported, other top-level modules imported), type-checking imports included."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    ours, others = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                (ours if a.name.split(".")[0] == "engine" else others).add(a.name if a.name.startswith("engine")
                                                                           else a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            if base.split(".")[0] != "engine":
                others.add(base.split(".")[0])
                continue
            for a in node.names:
                full = f"{base}.{a.name}"
                ours.add(full if full in MODULES else base)
    return {m for m in ours if m in MODULES and m != name}, others


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(name: str) -> int | None:
    for i, layer in enumerate(LAYERS):
        if name == layer or name.startswith(layer + "."):
            return i
    return None


def test_there_is_no_import_cycle_in_engine():
    graph = {name: ours for name, (ours, _) in GRAPH.items()}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        raise AssertionError(f"import cycle: {' -> '.join(e.args[1])}") from None


def test_every_engine_module_lives_in_a_layer():
    flat = [n for n in MODULES if n != "engine" and _layer(n) is None]
    assert flat == [], f"modules outside the layer packages: {flat}"


def test_imports_point_down_the_layers():
    up = []
    for name, (ours, others) in GRAPH.items():
        mine = _layer(name)
        if mine is None:
            continue
        for dep in ours:
            theirs = _layer(dep)
            if theirs is not None and theirs > mine:
                up.append(f"{name} imports {dep}")
        if "gateway" in others:
            up.append(f"{name} imports gateway")
    assert up == []


def test_the_core_is_pure():
    bad = {name: sorted(others & NOT_IN_CORE) for name, (_, others) in GRAPH.items()
           if _layer(name) == 0 and others & NOT_IN_CORE}
    assert bad == {}
    assert len([n for n in MODULES if _layer(n) == 0]) > 20  # the check saw the core


def test_only_the_cluster_imports_ray():
    assert sorted(n for n, (_, others) in GRAPH.items() if "ray" in others and _layer(n) != 4) == []
