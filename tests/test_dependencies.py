"""Every third-party import is declared in pyproject.toml (issue 12: pyyaml was not).

``engine/`` and ``gateway/`` may only import the runtime dependencies;
``benchmarks/`` also the ``bench`` extra; ``tests/`` also the ``test`` extra.
Imports are read from the tracked sources with ``ast``; a module is mapped to
the distribution that installs it with ``importlib.metadata``.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from tests.test_repo_hygiene import ROOT, tracked_files

FIRST_PARTY = {"engine", "gateway", "benchmarks", "tests"}
ALLOWED_EXTRAS = {"engine": (), "gateway": (), "benchmarks": ("bench",), "tests": ("test",)}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(spec: str) -> str:
    return _normal(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec).group(1))


def declared(pyproject: dict, extras: tuple[str, ...]) -> set[str]:
    project = pyproject["project"]
    specs = list(project["dependencies"])
    for extra in extras:
        specs += project["optional-dependencies"][extra]
    return {_requirement_name(s) for s in specs}


def third_party_imports(source: str, filename: str = "<source>") -> set[str]:
    tree = ast.parse(source, filename=filename)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in FIRST_PARTY}


def undeclared(sources: list[tuple[str, str]], pyproject: dict, distributions: dict[str, list[str]]) -> list[str]:
    """Problems for ``(repo-relative path, source)`` pairs; ``distributions`` maps module -> distributions."""
    problems = []
    for rel, source in sources:
        top = rel.split("/", 1)[0]
        if not rel.endswith(".py") or top not in ALLOWED_EXTRAS:
            continue
        allowed = declared(pyproject, ALLOWED_EXTRAS[top])
        for module in sorted(third_party_imports(source, rel)):
            dists = {_normal(d) for d in distributions.get(module, [])}
            if not dists:
                problems.append(f"{rel}: imports {module!r}, which no installed distribution provides")
            elif not dists & allowed:
                where = " or ".join(["dependencies", *ALLOWED_EXTRAS[top]])
                problems.append(f"{rel}: imports {module!r} ({'/'.join(sorted(dists))}), "
                                f"not declared in pyproject.toml {where}")
    return problems


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_every_third_party_import_is_declared():
    sources = [(p.relative_to(ROOT).as_posix(), p.read_text(encoding="utf-8"))
               for p in tracked_files() if p.suffix == ".py"]
    assert len(sources) > 50
    assert undeclared(sources, _pyproject(), packages_distributions()) == []


def test_the_check_finds_an_undeclared_import():
    """yaml is declared for tests only: a gateway module importing it is reported, a test importing it is not."""
    dists = {"yaml": ["PyYAML"], "fastapi": ["fastapi"], "tqdm": ["tqdm"], "nosuch": []}
    sources = [("gateway/probe.py", "import yaml\nimport os\nfrom fastapi import FastAPI\n"),
               ("tests/probe.py", "import yaml\n"),
               ("benchmarks/probe.py", "import tqdm\nfrom . import workload\n"),
               ("engine/probe.py", "import nosuch\n")]
    assert undeclared(sources, _pyproject(), dists) == [
        "gateway/probe.py: imports 'yaml' (pyyaml), not declared in pyproject.toml dependencies",
        "engine/probe.py: imports 'nosuch', which no installed distribution provides",
    ]
