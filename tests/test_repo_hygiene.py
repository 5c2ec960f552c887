"""A fresh clone is self-contained: no tracked file points outside the repository.

Issue 12: the tests read their vectors from a directory beside the checkout,
the README linked the contract there, and committed benchmark outputs carried
the build machine's absolute paths. These tests fail on any such reference in a tracked file, and
on a relative Markdown link whose target is missing or outside the repository.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Built from pieces so that this file does not match itself and is scanned like any other.
_SEP = "/"
FORBIDDEN = [
    ".." + _SEP + "shared",            # the reference material beside the checkout
    _SEP + "work" + _SEP,              # absolute paths of the machines that built and benchmarked it
    _SEP + "root" + _SEP,
    _SEP + "home" + _SEP,
    _SEP + "Users" + _SEP,
]

_SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"}


def tracked_files() -> list[Path]:
    """``git ls-files`` of the checkout; a walk of the tree when it is not a git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        names = [n for n in out.decode("utf-8").split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for dirpath, dirnames, filenames in os.walk(ROOT):
            dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info")]
            names += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in filenames]
    return [ROOT / n for n in names if (ROOT / n).is_file()]


def _text(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None  # binary (PNG plots)
    return data.decode("utf-8", errors="replace")


def outside_references(files: list[Path], root: Path = ROOT) -> list[str]:
    found = []
    for path in files:
        text = _text(path)
        if text is None:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            for pattern in FORBIDDEN:
                if pattern in line:
                    found.append(f"{path.relative_to(root)}:{lineno}: {pattern!r} in {line.strip()[:120]!r}")
    return found


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def broken_markdown_links(files: list[Path], root: Path = ROOT) -> list[str]:
    found = []
    for path in files:
        if path.suffix != ".md":
            continue
        text = _text(path) or ""
        for lineno, line in enumerate(text.splitlines(), 1):
            for target in _LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                    continue  # http:, mailto:, in-page anchors
                rel = target.split("#", 1)[0]
                resolved = (path.parent / rel).resolve()
                where = f"{path.relative_to(root)}:{lineno}: link {target!r}"
                if not resolved.is_relative_to(root):
                    found.append(f"{where} leaves the repository")
                elif not resolved.exists():
                    found.append(f"{where} names a missing file")
    return found


def test_the_checkout_has_files_to_check():
    names = {p.relative_to(ROOT).as_posix() for p in tracked_files()}
    assert {"README.md", "docs/api.md", "tests/conformance/seed_scenarios.json"} <= names


def test_no_tracked_file_names_a_path_outside_the_repository():
    assert outside_references(tracked_files()) == []


def test_markdown_links_stay_inside_the_repository():
    assert broken_markdown_links(tracked_files()) == []


def test_the_checks_catch_what_they_are_for(tmp_path: Path):
    """The detectors themselves: each forbidden kind is reported, clean text is not."""
    (tmp_path / "README.md").write_text("# x\n", encoding="utf-8")
    docs = tmp_path / "docs"
    docs.mkdir()
    probe = docs / "probe.md"
    probe.write_text(
        "see [contract](../" + FORBIDDEN[0] + "/API.md)\n"
        "wrote " + _SEP + "work" + _SEP + "main/out.json\n"
        "[missing](no-such-file.md) [ok](../README.md) [web](https://example.org/x) [here](#top)\n",
        encoding="utf-8",
    )
    refs = outside_references([probe], root=tmp_path)
    links = broken_markdown_links([probe], root=tmp_path)
    assert [r.split(": ")[0] for r in refs] == ["docs/probe.md:1", "docs/probe.md:2"], refs
    assert [m.split("link ", 1)[1] for m in links] == [
        repr("../" + FORBIDDEN[0] + "/API.md") + " leaves the repository",
        "'no-such-file.md' names a missing file",
    ], links
    clean = docs / "clean.md"
    clean.write_text("[ok](../README.md) and [api](probe.md#status), paths like benchmarks/x.json\n",
                     encoding="utf-8")
    assert outside_references([clean], root=tmp_path) == []
    assert broken_markdown_links([clean], root=tmp_path) == []
