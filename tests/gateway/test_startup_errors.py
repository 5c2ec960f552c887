"""``flowrank serve`` refusals at start: one ``flowrank: error:`` line naming the
file or flag, a distinct exit code per kind, no traceback unless ``--debug``.

Each case runs ``python -m gateway serve`` as a real process (``--engine local``
where Ray is not the point; the Ray-address case fails before Ray starts).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.loopback import free_port

from gateway import startup_errors as se

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1",
               PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""))
    return env


def serve(tmp: Path, *args: str, engine: str = "local", timeout: float = 60.0) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "gateway", "serve", "--engine", engine, "--port", "0", *args]
    if "--data-dir" not in args:
        cmd += ["--data-dir", str(tmp / "data")]
    return subprocess.run(cmd, cwd=tmp, env=_env(), capture_output=True, text=True, timeout=timeout)


def refusal(proc: subprocess.CompletedProcess, code: int, *names: str) -> str:
    """The one error line; asserts the exit code, no traceback, nothing else printed."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == "", proc.stdout  # never got as far as "listening on"
    assert len(lines) == 1 and lines[0].startswith("flowrank: error: "), proc.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def keys_file(tmp: Path, doc) -> Path:
    path = tmp / "keys.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_exit_codes_are_distinct_and_documented():
    codes = [se.EXIT_UNEXPECTED, se.EXIT_USAGE, se.EXIT_KEYS, se.EXIT_FRIENDS, se.EXIT_DATA_DIR_IN_USE,
             se.EXIT_DATA_DIR, se.EXIT_LOG_CORRUPT, se.EXIT_RAY, se.EXIT_LISTEN, se.EXIT_LOG]
    assert len(set(codes)) == len(codes) and set(codes) == set(se.EXIT_CODES)
    readme = (REPO / "README.md").read_text()
    for code in codes:
        assert f"| {code} |" in readme, f"exit code {code} is not in the README's table"


@pytest.mark.parametrize("args, names", [
    (["--port", "99999"], ["--port", "99999", "0-65535"]),
    (["--port", "http"], ["--port"]),
    (["--shards", "0"], ["--shards"]),
    (["--no-such-flag"], ["--no-such-flag"]),
])
def test_bad_flags(tmp_path, args, names):
    line = refusal(serve(tmp_path, *args), se.EXIT_USAGE, *names)
    assert "--help" in line


@pytest.mark.parametrize("doc, names", [
    ({"keys": [{"name": "ops", "role": "boss", "key": "k"}]}, ["role must be one of", "admin"]),
    ("{not json", ["not valid JSON"]),
    ({"tokens": []}, ['{"keys": [...]}']),
])
def test_bad_keys_file(tmp_path, doc, names):
    path = keys_file(tmp_path, doc)
    refusal(serve(tmp_path, "--keys", str(path)), se.EXIT_KEYS, "--keys", str(path), *names)


def test_missing_keys_file(tmp_path):
    refusal(serve(tmp_path, "--keys", str(tmp_path / "nope.json")), se.EXIT_KEYS, "nope.json", "check the path")


def test_missing_friends_file(tmp_path):
    refusal(serve(tmp_path, "--friends-file", "absent.json"), se.EXIT_FRIENDS, "--friends-file absent.json",
            "no such file")


@pytest.mark.parametrize("content, names", [
    ("{oops", ["Expecting"]),
    ('["p-ava", "p-ben"]', ["JSON object"]),
])
def test_bad_friends_file(tmp_path, content, names):
    (tmp_path / "friends.json").write_text(content)
    refusal(serve(tmp_path, "--friends-file", "friends.json"), se.EXIT_FRIENDS, "--friends-file friends.json",
            *names)


def test_friends_url_must_be_http(tmp_path):
    refusal(serve(tmp_path, "--friends-url", "friends.internal:80"), se.EXIT_FRIENDS, "--friends-url")


def test_data_dir_locked_by_a_running_server(tmp_path):
    data = tmp_path / "data"
    first = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--engine", "local", "--port", "0",
                              "--data-dir", str(data)], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        line = ""
        while "listening on" not in line:
            line = first.stdout.readline()
            assert line or first.poll() is None, "the first server died"
            assert time.monotonic() < deadline, "the first server did not start"
        second = serve(tmp_path, "--data-dir", str(data))
        line = refusal(second, se.EXIT_DATA_DIR_IN_USE, f"--data-dir {data}", "LOCK", "another --data-dir")
    finally:
        first.send_signal(signal.SIGTERM)
        try:
            first.wait(timeout=30)
        except subprocess.TimeoutExpired:
            first.kill()
            first.wait()
        first.stdout.close()
    assert first.returncode == 0  # the refusal did not disturb the running server


def test_data_dir_that_is_a_file(tmp_path):
    (tmp_path / "data").write_text("not a directory")
    refusal(serve(tmp_path), se.EXIT_DATA_DIR, "--data-dir", "not a directory")


def test_corrupt_event_log(tmp_path):
    from engine.log.segment_log import SegmentedFileLog

    with SegmentedFileLog.open(tmp_path / "data" / "log") as log:
        for i in range(3):
            log.append_batch([f"v{i}"])
        segment = log.segments()[0][1]
    with open(segment, "r+b") as f:
        f.write(b"XXXX")  # the segment's magic
    refusal(serve(tmp_path), se.EXIT_LOG_CORRUPT, "--data-dir", segment, "byte offset 0", "backup")
    assert Path(segment).read_bytes()[:4] == b"XXXX"  # nothing was repaired behind the operator's back


def test_unreachable_ray_address(tmp_path):
    port = free_port()  # nothing listens there
    started = time.monotonic()
    proc = serve(tmp_path, "--ray-address", f"127.0.0.1:{port}", engine="ray", timeout=60)
    refusal(proc, se.EXIT_RAY, f"--ray-address 127.0.0.1:{port}", "ray start --head")
    assert time.monotonic() - started < 30  # refused by the probe, not after ray.init's minutes of retries


def test_malformed_ray_address(tmp_path):
    refusal(serve(tmp_path, "--ray-address", "headnode", engine="ray"), se.EXIT_USAGE, "--ray-address",
            "host:port")


def test_port_in_use(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = serve(tmp_path, "--host", "127.0.0.1", "--port", str(port))
    refusal(proc, se.EXIT_LISTEN, f"127.0.0.1:{port}", "--port")
    assert not (tmp_path / "data" / "log").exists()  # refused before the engine opened the data dir


def test_debug_prints_the_traceback_then_the_line(tmp_path):
    path = keys_file(tmp_path, {"keys": [{"name": "ops", "role": "boss", "key": "k"}]})
    proc = serve(tmp_path, "--keys", str(path), "--debug")
    assert proc.returncode == se.EXIT_KEYS
    assert "Traceback" in proc.stderr and "KeyFileError" in proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1].startswith("flowrank: error: --keys: ")


def test_unforeseen_failures_are_one_line_too():
    err = se.classify(RuntimeError("boom\nsecond line"), None)
    assert err.exit_code == se.EXIT_UNEXPECTED and "RuntimeError: boom" in err.message and "--debug" in err.message


def test_log_corruption_reported_by_a_ray_actor_is_recognised():
    """ClusterEngine opens the log inside an actor: the error comes back as Ray's text."""
    from engine.core.errors import LogCorruption

    text = ("The actor died because of an error raised in its creation task, ...\n"
            "engine.core.errors.LogCorruption: log segment /d/log/00.log: bad CRC at byte offset 40\n")
    err = se.classify(RuntimeError(text), None)
    assert err.exit_code == se.EXIT_LOG_CORRUPT and "/d/log/00.log: bad CRC at byte offset 40" in err.message
    wrapped = RuntimeError("task failed")
    wrapped.__cause__ = LogCorruption("log segment /d/log/01.log: short segment header at byte offset 0")
    assert se.classify(wrapped, None).exit_code == se.EXIT_LOG_CORRUPT


def test_bound_socket_gives_accepted_connections_tcp_nodelay():
    """asyncio sets TCP_NODELAY on an accepted connection only when its socket
    names TCP; without it a keep-alive response (head, then body) waits for the
    client's delayed ACK, 40 ms per request. Checked on the server's side of a
    real loopback connection accepted through ``bind``'s socket."""
    import asyncio

    async def main() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def connected(reader, writer):
            sock = writer.get_extra_info("socket")
            seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        sock = se.bind("127.0.0.1", 0)
        server = await asyncio.start_server(connected, sock=sock)
        async with server:
            _, w = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
            value = await asyncio.wait_for(seen, 10)
            w.close()
        return value

    assert asyncio.run(main()) != 0


@pytest.mark.parametrize("args, code, names", [
    (["--standby"], se.EXIT_USAGE, ["--standby", "--log"]),
    (["--log", "http://db/x"], se.EXIT_USAGE, ["--log", "PostgreSQL URL"]),
    (["--log", "postgresql://postgres@127.0.0.1:1/nothing", "--prune-log"], se.EXIT_USAGE, ["--prune-log", "--log"]),
    (["--log", "postgresql://postgres@127.0.0.1:1/nothing?connect_timeout=2"], se.EXIT_LOG, ["--log", "PostgreSQL"]),
])
def test_log_flags_and_an_unreachable_database(tmp_path, args, code, names):
    """docs/api.md §19: --standby needs --log; --log takes a PostgreSQL URL; --prune-log is refused with it; a
    database that does not answer is exit code 10, one line."""
    refusal(serve(tmp_path, *args), code, *names)
