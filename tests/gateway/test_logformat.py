"""``flowrank serve --log-format json`` (gateway/logformat.py): one JSON object per line."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time

import httpx
import pytest

from gateway.cli import build_parser
from gateway.logformat import JsonFormatter, configure
from tests.gateway.test_startup_errors import _env

KEYS = {"ts", "level", "logger", "message", "exception"}


def _record(msg, *args, exc_info=None, level=logging.ERROR):
    return logging.LogRecord("flowrank.test", level, __file__, 7, msg, args, exc_info)


def test_formatter_fields_and_exception():
    try:
        1 / 0
    except ZeroDivisionError:
        rec = _record("batch %s failed", "b-1", exc_info=sys.exc_info())
    line = JsonFormatter().format(rec)
    assert "\n" not in line  # one line, the traceback escaped inside it
    doc = json.loads(line)
    assert set(doc) == KEYS
    assert (doc["level"], doc["logger"], doc["message"]) == ("ERROR", "flowrank.test", "batch b-1 failed")
    assert doc["exception"].startswith("Traceback") and "ZeroDivisionError" in doc["exception"]
    assert doc["ts"].endswith("Z") and len(doc["ts"]) == len("2026-11-01T10:05:00.000Z")
    assert json.loads(JsonFormatter().format(_record("plain", level=logging.INFO)))["exception"] is None


def test_formatter_escapes_what_orjson_refuses():
    doc = json.loads(JsonFormatter().format(_record("player %s", "p-\ud800")))
    assert doc["message"] == "player p-\ud800"


def test_flag_and_bad_format():
    assert build_parser().parse_args(["serve"]).log_format == "text"
    assert build_parser().parse_args(["serve", "--log-format", "json"]).log_format == "json"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--log-format", "xml"])
    with pytest.raises(ValueError):
        configure("xml")


def test_serve_logs_one_json_object_per_line(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--engine", "local", "--port", "0",
                             "--data-dir", str(tmp_path / "data"), "--log-format", "json"],
                            cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        line = ""
        while "listening on" not in line:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the server did not start"
        url = line.split("listening on ", 1)[1].strip()
        assert httpx.get(f"{url}/healthz").status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    docs = [json.loads(ln) for ln in lines]  # every stderr line is one JSON object
    assert docs and all(set(d) == KEYS for d in docs), lines
    loggers = {d["logger"] for d in docs}
    assert any(name.startswith("uvicorn") for name in loggers), loggers  # uvicorn's records come through it too
    assert any("shutdown" in d["message"].lower() for d in docs), lines
