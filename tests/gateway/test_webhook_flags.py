"""`flowrank serve` webhook flags (docs/api.md §16 "Webhooks"): parsed into Settings, refused when bad."""

from __future__ import annotations

import pytest

from gateway.cli import build_parser, settings_from_args


def test_webhook_flags_reach_the_settings(tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"shh\n")
    s = settings_from_args(build_parser().parse_args([
        "serve", "--webhook-url", "https://game.example.com/hooks?x=1", "--webhook-secret-file", str(secret),
        "--webhook-give-up-s", "3600"]))
    assert (s.webhook_url, s.webhook_secret_file, s.webhook_give_up_s) == (
        "https://game.example.com/hooks?x=1", str(secret), 3600.0)
    d = settings_from_args(build_parser().parse_args(["serve"]))
    assert (d.webhook_url, d.webhook_secret_file, d.webhook_give_up_s) == (None, None, 86400.0)


@pytest.mark.parametrize("argv, says", [
    (["--webhook-url", "ftp://x/"], "not an http(s) URL"),
    (["--webhook-url", "game.example.com/hooks"], "not an http(s) URL"),
    (["--webhook-give-up-s", "0"], "positive number of seconds"),
    (["--webhook-give-up-s", "soon"], "positive number of seconds"),
    (["--webhook-secret-file", "/no/such/file"], "no such file"),
    (["--webhook-secret-file", "EMPTY"], "the file is empty"),
])
def test_bad_webhook_flags_are_one_line_exit_2(tmp_path, capsys, argv, says):
    (tmp_path / "empty").write_bytes(b"\r\n")
    argv = [str(tmp_path / "empty") if a == "EMPTY" else a for a in argv]
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["serve", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"flowrank: error: argument {argv[0]}: ") and says in err and err.count("\n") == 1
