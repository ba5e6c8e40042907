"""Issue 35 (never lose data, third round), the openai engine's client against hostile servers on 127.0.0.1. On the
hand-written urllib client a probe found: a reply trickled at 1 byte/s hung the run whatever --llm_timeout (N16);
SIGTERM with requests in flight printed its line and left the process alive for minutes (N17); a connection closed
mid-body ended the run with a 249-line traceback (N19); a reply whose content was a list crashed validation (N20);
OPENAI_BASE_URL="not a url" was a 29-line traceback (N14); a 1 GiB reply was OOM-killed at 22.9 GB (N21). Each
prompt here goes through the handler the stage runs (engine, validation, cache), so "not cached" is checked where
the cache is written."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc

import pytest

from pipeline.io.commit import FolderLock
from pipeline.llm.engines import EngineConfig, Sampling, make_engine
from pipeline.llm.handler import HardPositiveHandler
from pipeline.llm.validate import Validator
from pipeline.run import main
from tests.conftest import REPO, visible_files
from tests.llm_fixtures import CompletionsServer, endless, hard_positives, raw_reply, trickle

CAPTION = "A man sitting on a bench."


def ask(server: CompletionsServer, cache, chat_format: str = "auto", **config) -> tuple[dict, list]:
    """One prompt through the stage's handler: its cache entry, and the cache files written."""
    engine_config = EngineConfig("openai", "stub", base_url=server.base_url, chat_format=chat_format, **config)
    handler = HardPositiveHandler(engine_config, str(cache), Sampling(0), 0, 0.7, lambda: Validator(wordnet=False), 1)
    element = {"key": "k", "prompt": f"[INST] Replace one word.\n{CAPTION} [/INST]", "caption": CAPTION,
               "kind": "replace", "max_new_tokens": 30, "attempts": []}
    [result] = handler.run_inference([[element]], make_engine(engine_config))
    [entry] = result.inference
    return entry, sorted(cache.rglob("*.jsonl"))


@pytest.mark.parametrize("body_only", [False, True], ids=["from the status line", "in the body"])
def test_n16_a_reply_that_trickles_ends_at_the_deadline_then_fails_as_a_request(tmp_path, body_only):
    with CompletionsServer(fail_first=100, failure=trickle(body_only), stop_after=20) as server:
        started = time.monotonic()
        entry, cached = ask(server, tmp_path, timeout_s=1.0, request_retries=1)
        took = time.monotonic() - started
    assert entry["failed"] and server.requests == 2 and cached == []
    assert [a["error"] for a in entry["attempts"]] == ["no complete reply within 1 s"]
    assert took < 8  # two attempts of 1 s and a backoff; the trickle would go on for 40 minutes


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_n17_a_signal_with_requests_in_flight_ends_the_run_in_10_s_unlocked_with_nothing_committed(tmp_path, sig):
    out = tmp_path / "out"
    with CompletionsServer(gated=True, stop_after=200) as server:  # asked, never answers
        proc = subprocess.Popen([sys.executable, "-m", "pipeline.run", *hard_positives(out), "--llm_timeout=600",
                                 f"--llm_base_url={server.base_url}", "--positive_checks=rules"],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            assert server.asked.wait(180), "the run never asked its model"
            os.killpg(proc.pid, getattr(signal, sig))
            sent = time.monotonic()
            _, err = proc.communicate(timeout=10)
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    assert proc.returncode == 130 and took < 10, err
    assert [line for line in err.splitlines() if line.strip()] == [
        f"error: interrupted by {sig}; nothing was committed to {out}, its earlier contents stay"]
    with FolderLock(str(out), "hard_positives"):  # free: a second run may start
        pass
    assert visible_files(out) == {} and not list(out.glob(".staging-*"))  # no table, report or cache file


def test_n19_a_body_cut_short_is_retried_then_fails_as_a_request(tmp_path):
    cut = raw_reply(b'{"choices": [{"message": {"content": "A guy', promised=1_000)
    with CompletionsServer(fail_first=2, failure=cut) as server:
        entry, cached = ask(server, tmp_path / "recovers", request_retries=3)
    assert not entry["failed"] and server.requests == 3 and len(cached) == 1  # answered at the third try
    with CompletionsServer(fail_first=100, failure=cut) as server:
        entry, cached = ask(server, tmp_path / "never", request_retries=2)
    assert entry["failed"] and server.requests == 3 and cached == []
    assert entry["attempts"][0]["error"].startswith("RemoteProtocolError: ")


BAD_SHAPES = [  # (endpoint, reply body, what the error says)
    ("auto", {"choices": [{"message": {"content": ["A guy", "sitting"]}}]},
     "choices[0].message.content is a JSON list, not a string"),
    ("auto", {"choices": [{"message": {"content": {"text": "A guy"}}}]}, "content is a JSON dict, not a string"),
    ("auto", {"choices": [{"message": "A guy sitting on a bench."}]}, "choices[0].message is not an object"),
    ("auto", {"object": "error", "message": "overloaded"}, "no choices[0] object"),
    ("auto", {"choices": []}, "no choices[0] object"),
    ("auto", [{"text": "A guy"}], "no choices[0] object"),
    ("auto", {"choices": [{"message": {"content": "\ud800 guy"}}]}, "holds a lone surrogate"),
    ("auto", {"choices": [{"message": {"content": "A guy"}, "finish_reason": 7}]}, "finish_reason is not a string"),
    ("none", {"choices": [{"text": 42}]}, "choices[0].text is a JSON int, not a string"),
    ("auto", b"<html>Bad gateway</html>", "not JSON"),
    ("auto", b"\xff\xfe{}", "not JSON"),
    ("auto", b"[" * 100_000, "not JSON"),
]


@pytest.mark.parametrize("chat_format,body,says", BAD_SHAPES)
def test_n20_a_reply_of_the_wrong_shape_fails_as_a_request_before_validation(tmp_path, chat_format, body, says):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    with CompletionsServer(fail_first=100, failure=raw_reply(data)) as server:
        entry, cached = ask(server, tmp_path, chat_format=chat_format, request_retries=2)
    assert entry["failed"] and server.requests == 1 and cached == []  # the same question gets the same answer
    [attempt] = entry["attempts"]
    assert attempt["error"].startswith("bad reply: ") and says in attempt["error"], attempt["error"]
    assert Validator(wordnet=False)({"kind": "replace", "caption": CAPTION}, attempt).reason == "request_failed"


def test_n21_a_reply_past_the_cap_fails_with_bounded_memory_and_is_not_cached(tmp_path):
    with CompletionsServer(fail_first=100, failure=endless) as server:
        tracemalloc.start()
        try:
            entry, cached = ask(server, tmp_path, request_retries=2)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert entry["failed"] and server.requests == 1 and cached == []
    assert entry["attempts"][0]["error"] == "reply larger than 262,144 bytes"  # the default --llm_max_reply_bytes
    assert peak < 8 * 2**20 and server.streamed < 32 * 2**20, (peak, server.streamed)  # it streams 64 MiB
    with CompletionsServer(fail_first=100, failure=raw_reply(b"{}", promised=10**9)) as server:
        entry, _ = ask(server, tmp_path, max_reply_bytes=1_024)  # refused from its Content-Length, unread
    assert entry["attempts"][0]["error"] == "reply larger than 1,024 bytes"


@pytest.mark.parametrize("given,url,problem", [
    ("OPENAI_BASE_URL", "not a url", "not a URL: it holds a space"),  # not shown: round 5's M12
    ("--llm_base_url", "localhost:8000/v1", "not an http:// or https:// URL"),
    ("--llm_base_url", "http://[::1/v1", "not a URL ("),
    ("OPENAI_BASE_URL", "http://127.0.0.1:99999/v1", "port 99999 is not from 1 to 65535"),
])
def test_n14_a_base_url_that_is_no_url_is_one_line_exit_2_before_any_work(tmp_path, monkeypatch, capsys, given,
                                                                          url, problem):
    out = tmp_path / "out"
    monkeypatch.setenv("OPENAI_BASE_URL", url if given == "OPENAI_BASE_URL" else "http://127.0.0.1:1/v1")
    assert main(hard_positives(out, *([f"--llm_base_url={url}"] if given == "--llm_base_url" else []))) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    shown = "" if " " in url else f"={url}"  # a value with a space may hide a password's end (M12)
    assert len(lines) == 1 and lines[0].startswith(f"error: {given}{shown}: {problem}"), lines
    assert not out.exists()


@pytest.mark.parametrize("given", ["--llm_base_url", "OPENAI_BASE_URL"])
def test_n25_credentials_in_the_base_url_are_never_printed(tmp_path, monkeypatch, capsys, given):
    """46709a5 printed `http://user:secret@host/v1` twice in the error line of a server it could not reach."""
    url = "http://user:secret@127.0.0.1:1/v1?api_key=hidden"
    out = tmp_path / "out"
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    assert main(hard_positives(out, *([f"--llm_base_url={url}"] if given == "--llm_base_url" else []))) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {given}=http://***@127.0.0.1:1/v1?api_key=***: "
                                                   f"cannot reach the LLM server: GET "
                                                   f"http://***@127.0.0.1:1/v1/models?api_key=***"), lines
    assert "secret" not in lines[0] and "hidden" not in lines[0]


def test_n25_a_base_url_with_a_query_string_keeps_it_after_each_endpoint(tmp_path):
    """46709a5 appended /models after the query (GET /v1?api-version=1/models, a 404), and so each prompt's
    /chat/completions. Now the endpoint goes on the path and the query stays after it."""
    out = tmp_path / "out"
    with CompletionsServer(stop_after=120) as server:
        assert main(hard_positives(out, f"--llm_base_url={server.base_url}?api-version=1",
                                   "--positive_checks=rules")) == 0
    assert server.model_lists == 1 and server.paths and set(server.paths) == {"/v1/chat/completions"}
    assert set(server.queries) == {"api-version=1"}
