"""``flowrank serve --log-format json``: one JSON object per log line.

Each line is ``{"ts", "level", "logger", "message", "exception"}``: ``ts`` is
UTC ``YYYY-MM-DDTHH:MM:SS.sssZ`` (the API's own timestamp format), ``level``
the level name, ``message`` the formatted message, ``exception`` the
formatted traceback or null. The whole process logs through one root handler
on stderr (FlowRank's loggers, uvicorn's, Ray's driver-side ones); the
start-up lines ``flowrank: listening on …`` stay plain on stdout, where
scripts read them.

``text`` (the default) leaves logging as it always was.

>>> import logging
>>> rec = logging.LogRecord("flowrank.gateway", logging.WARNING, __file__, 1, "shard %d slow", (3,), None)
>>> rec.created = 1793527500.25
>>> JsonFormatter().format(rec)
'{"ts":"2026-11-01T10:05:00.250Z","level":"WARNING","logger":"flowrank.gateway","message":"shard 3 slow","exception":null}'
"""

from __future__ import annotations

import json
import logging
import sys

import orjson

from engine.core.timefmt import format_timestamp

FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        exception = None
        if record.exc_info:
            exception = self.formatException(record.exc_info)
        elif record.exc_text:
            exception = record.exc_text
        if record.stack_info:
            stack = self.formatStack(record.stack_info)
            exception = stack if exception is None else f"{exception}\n{stack}"
        doc = {
            "ts": format_timestamp(int(record.created * 1000)),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "exception": exception,
        }
        try:
            return orjson.dumps(doc).decode()
        except orjson.JSONEncodeError:  # e.g. a lone surrogate from a client's input: escape it instead
            return json.dumps(doc, separators=(",", ":"))


def configure(fmt: str, level: int = logging.INFO) -> None:
    """Install the root handler for ``json``; ``text`` changes nothing."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}")
    if fmt == "text":
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)
    adopt()


# Loggers that install their own handlers: uvicorn's (uvicorn is then started with log_config=None) and
# Ray's driver-side logger, which ``import ray`` configures (serve calls adopt() again once Ray is up).
# Ray's workers do not log to the driver (init_ray passes log_to_driver=False).
_OWN_HANDLERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "ray")


def adopt(names: tuple[str, ...] = _OWN_HANDLERS) -> None:
    """Send these loggers' records through the root (JSON) handler instead of their own."""
    for name in names:
        lg = logging.getLogger(name)
        for h in list(lg.handlers):
            lg.removeHandler(h)
        lg.propagate = True
