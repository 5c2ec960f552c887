"""The served-process fixture of the end-to-end tests (tests/e2e/test_serve_kill.py ``Served``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_serve_kill import Served


@pytest.fixture
def served_factory(tmp_path):
    made: list[Served] = []

    def make(engine: str, workers: int = 1, extra: tuple[str, ...] = (), tmp: Path | None = None,
             keys: bool = True) -> Served:
        s = Served(tmp or tmp_path, engine, workers, extra, keys)
        made.append(s)
        return s

    yield make
    for s in made:
        s.cleanup()
