"""Round 18 of the hostile probes, and what round 9 left (Z9's prefix): a secret cut short by a message's length limit
is still a secret, and is never printed in part."""
from __future__ import annotations

import sys

PASSWORD = "Zq7PASSWORDrunsPastTheCut" * 6
KEY = "sk-R18SECRETKEYVALUEabcdef"


def test_a_url_cut_before_its_at_hides_what_it_holds_of_the_password():
    from pipeline.urls import redacted, redact_urls

    assert redacted("http://user:Zq7PASSW") == "http://user:***"
    assert redact_urls("error at http://user:Zq7PASSW... (line 3)") == "error at http://user:*** (line 3)"
    # a port is digits: host:port is left as it is
    assert redacted("http://host:8080/v1?x=1") == "http://host:8080/v1?x=***"
    assert redacted("http://[::1]:8080/v1") == "http://[::1]:8080/v1"


def test_a_url_in_a_message_is_redacted_before_it_is_cut():
    from pipeline.urls import cut, shown

    url = f"ftp://user:{PASSWORD}@host/x.jpg"
    for text in (shown(url), shown(url, 20), cut(f"cannot read {url}", 40)):
        assert "Zq7PASS" not in text and len(text) <= 80, text


def test_the_one_line_errors_cut_after_redacting():
    from pipeline.checks import one_line as check_line
    from pipeline.train.clip import one_line as clip_line

    error = OSError(f"{'x' * 270} http://user:{PASSWORD}@host/file")  # the cut at 300 lands in the password
    for line in (check_line(error), clip_line(error)):
        assert "Zq7" not in line and "PASSW" not in line, line


def test_fetch_refuses_a_url_without_printing_part_of_its_password(tmp_path):
    from pipeline.publish.images import FetchConfig, fetch_bounded

    url = f"ftp://averylongusername:{PASSWORD}@host/x.jpg"  # the first 80 characters end inside the password
    key, body, error = fetch_bounded(("k", url), 1.0, None, [], FetchConfig(images_dir=str(tmp_path)))
    assert body is None and "refused url" in error and "Zq7" not in error and "PASSW" not in error, error


def test_the_last_line_of_defence_hides_a_secret_cut_short_at_either_end(capsys, monkeypatch):
    from pipeline.urls import redact_output

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    saved = sys.stdout, sys.stderr
    try:
        redact_output()
        print(f"bad key {KEY[:12]}... given", file=sys.stderr)  # cut at its end
        print(f"...{KEY[-10:]} was the rest", file=sys.stderr)  # cut at its start
        print(f"whole {KEY} and short {KEY[:7]}", file=sys.stderr)  # fewer than 8 characters say nothing
        print("an ordinary line", file=sys.stderr)
    finally:
        sys.stdout, sys.stderr = saved
    err = capsys.readouterr().err.splitlines()
    assert err == ["bad key ***... given", "...*** was the rest", f"whole *** and short {KEY[:7]}",
                   "an ordinary line"], err
