"""``flowrank log import`` on the command line (gateway/log_cli.py; the import itself:
tests/log/test_pg_import.py)."""

from __future__ import annotations

import pytest

from gateway.cli import main
from tests.log.test_pg_import import make_data_dir


def test_the_cli_imports_then_refuses_a_second_time(pg_url, tmp_path, capsys):
    records = make_data_dir(tmp_path, trimmed=False)
    assert main(["log", "import", "--data-dir", str(tmp_path), "--log", pg_url]) == 0
    out = capsys.readouterr()
    assert f"{len(records)} records in" in out.out and "3 snapshots" in out.out
    assert "does not verify" in out.err
    assert main(["log", "import", "--data-dir", str(tmp_path), "--log", pg_url, "--no-snapshots"]) == 1
    assert "error: the PostgreSQL log" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["log", "import", "--data-dir", str(tmp_path), "--log", "mysql://x"])
    assert exc.value.code == 2
