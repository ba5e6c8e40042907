"""Issue 42b (the fifth probe), the LLM client and the replay engine. On cd18f06 a probe found: an OPENAI_API_KEY
ending in a CR (a CRLF env file) or holding a LF printed in full in the error line, h11's message quoting the header
(M4); a non-ASCII key a 45-line UnicodeEncodeError traceback, exit 1 (M5); a /models or chat reply of 1,827 bytes
with `Content-Encoding: gzip, gzip` took the client to 2.5 / 3.76 GB despite the 16 MiB / 262 KB caps, httpx
decoding every layer of a chunk before its size was counted (M6, M7); a base URL's password with an unescaped `@`
printed from it on, one with a space or a tab printed whole (M11, M12); a `\\ud800` escape in a replay answer a
142-line Beam coder traceback (M29); a 150 MB replay line read whole, +850 MB (M30). Each test fails on cd18f06."""
from __future__ import annotations

import asyncio
import gzip
import io
import json
import tracemalloc
import zlib
from http.server import BaseHTTPRequestHandler

import httpx
import pytest

from pipeline.llm.engines import EngineConfig, ReplayError, Sampling, make_engine, read_replay
from pipeline.run import main
from tests.conftest import SAMPLES
from tests.llm_fixtures import SAMPLE_CAPTIONS, CompletionsServer, hard_positives
from tests.local_http import LocalHTTPServer
from tests.test_llm_client import ask

SECRET = "sk-round5-SECRET"


def one_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


# ------------------------------------------------------------------------------------------------------- M4, M5

@pytest.mark.parametrize("key", [SECRET + "\r", SECRET[:8] + "\n" + SECRET[8:], SECRET + "\u00e9", SECRET + " x"],
                         ids=["trailing CR", "inner LF", "non-ASCII", "space"])
def test_m4_m5_a_key_that_is_no_header_value_is_one_line_exit_2_before_any_request(tmp_path, monkeypatch, capsys,
                                                                                   key):
    """cd18f06: the CR and LF keys printed in full ("LocalProtocolError: Illegal header value b'Bearer sk-...\\r'",
    blamed on the server, which was reachable); the non-ASCII one a 45-line traceback, exit 1."""
    out = tmp_path / "out"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with CompletionsServer(stop_after=60) as server:
        assert main(hard_positives(out, f"--llm_base_url={server.base_url}")) == 2
    line = one_line(capsys)
    assert line.startswith("error: OPENAI_API_KEY holds ") and "the key is not shown" in line, line
    assert "round5" not in line and "SECRET" not in line and "Bearer" not in line
    assert server.model_lists == 0 and server.requests == 0 and not out.exists()  # nothing was sent


def test_m4_a_request_h11_refuses_never_quotes_its_headers():
    """Whatever header h11 refuses, the error (which reaches dead letters) names its kind, never the value."""
    async def get(url: str) -> None:
        from pipeline.llm.openai_client import fetch

        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {SECRET}\r"}) as client:
            await fetch(client, "GET", url, 5.0, 1024)

    from pipeline.llm.openai_client import RequestFailed

    with CompletionsServer(stop_after=60) as server, pytest.raises(RequestFailed) as caught:
        asyncio.run(get(f"{server.base_url}/models"))
    assert "SECRET" not in str(caught.value) and str(caught.value).startswith("LocalProtocolError"), caught.value


def test_m5_a_worker_with_a_non_ascii_key_fails_its_requests_with_one_reason(monkeypatch):
    """A worker whose environment differs from the launcher's: every request fails as request_failed with the
    problem (no traceback, no key)."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET + "\u00e9")
    engine = make_engine(EngineConfig("openai", "stub", base_url="http://127.0.0.1:9/v1"))
    gens = engine.generate(["p1", "p2"], [Sampling(30), Sampling(30)])
    assert [g.finish_reason for g in gens] == ["error", "error"]
    assert gens[0].error.startswith("OPENAI_API_KEY holds a character that is not ASCII") and "SECRET" not in \
        gens[0].error


# ------------------------------------------------------------------------------------------------------- M6, M7

def nested_gzip(decoded: int) -> bytes:
    """gzip of gzip of `decoded` zero bytes: a few KB on the wire."""
    inner = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    layer = b"".join(inner.compress(zeros) for _ in range(decoded >> 20)) + inner.flush()
    return gzip.compress(layer, 9)


def encoded_reply(data: bytes, encoding: str):
    """A failure for CompletionsServer: a 200 reply of `data` with the Content-Encoding given."""
    def reply(handler, server) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Encoding", encoding)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    return reply


class ModelListServer(LocalHTTPServer):
    """GET /v1/models answered with `data` and a Content-Encoding."""

    def __init__(self, data: bytes, encoding: str):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                encoded_reply(data, encoding)(self, None)

        super().__init__(Handler, stop_after=60)
        self.base_url = f"{self.root_url}/v1"


def peak_bytes(call):
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_m6_a_model_list_of_nested_gzip_is_refused_at_the_cap_with_bounded_memory():
    """cd18f06: 1,827 bytes of gzip of gzip of 1 GiB took the launcher to 2.5 GB before it said 'larger than
    16,777,216 bytes'; here 64 MiB decoded must peak near the cap, not the bomb (it peaked past 64 MiB)."""
    from pipeline.llm.openai_client import MODEL_LIST_BYTES, server_problem

    bomb = nested_gzip(64 << 20)
    assert len(bomb) < 8_192
    with ModelListServer(bomb, "gzip, gzip") as server:
        problem, peak = peak_bytes(lambda: server_problem(server.base_url))
    assert peak < MODEL_LIST_BYTES + (8 << 20), peak
    # the server was reached: not "cannot reach the LLM server", as cd18f06 said
    assert problem == f"GET {server.base_url}/models: reply larger than {MODEL_LIST_BYTES:,} bytes", problem
    # a model list gzipped once, though identity was asked, is still read
    with ModelListServer(gzip.compress(json.dumps({"data": [{"id": "stub"}]}).encode()), "gzip") as server:
        assert server_problem(server.base_url) is None


def test_m7_a_chat_reply_of_nested_gzip_fails_as_a_request_with_bounded_memory(tmp_path):
    """cd18f06: 3.76 GB for one request in flight at --llm_concurrency=1 (262,144 bytes allowed)."""
    bomb = nested_gzip(64 << 20)
    with CompletionsServer(fail_first=100, failure=encoded_reply(bomb, "gzip, gzip")) as server:
        (entry, cached), peak = peak_bytes(lambda: ask(server, tmp_path / "bomb", request_retries=2))
    assert entry["failed"] and server.requests == 1 and cached == []
    assert entry["attempts"][0]["error"] == "reply larger than 262,144 bytes"
    assert peak < 8 << 20, peak
    # gzip or deflate replies within the cap are read; a coding nobody asked for and we cannot bound is refused
    answer = json.dumps({"choices": [{"message": {"content": "A guy sitting on a bench."}}]}).encode()
    for encoding, data in (("gzip", gzip.compress(answer)), ("deflate", zlib.compress(answer)),
                           ("deflate", zlib.compress(answer)[2:-4]), ("identity, gzip", gzip.compress(answer))):
        with CompletionsServer(fail_first=1, failure=encoded_reply(data, encoding)) as server:
            entry, _ = ask(server, tmp_path / f"ok-{len(data)}-{encoding}")
        assert entry["attempts"][0]["text"] == "A guy sitting on a bench.", (encoding, entry)
    with CompletionsServer(fail_first=100, failure=encoded_reply(b"\x1b\x00", "br")) as server:
        entry, _ = ask(server, tmp_path / "br", request_retries=2)
    assert entry["failed"] and server.requests == 1
    assert entry["attempts"][0]["error"].startswith("bad reply: Content-Encoding 'br', not identity as asked")


# ----------------------------------------------------------------------------------------------------- M11, M12

def test_m11_a_password_with_an_unescaped_at_is_hidden_whole_and_refused(tmp_path, capsys):
    """cd18f06: `--llm_base_url=http://***@ss@127.0.0.1:9/v1` (the redaction stopped at the first '@')."""
    from pipeline.urls import redact_urls, redacted

    assert redacted("http://user:p@ss@127.0.0.1:9/v1?k=v") == "http://***@127.0.0.1:9/v1?k=***"
    assert redact_urls("GET http://user:p@ss@h:9/v1/models: x") == "GET http://***@h:9/v1/models: x"
    assert redacted("https://host/img@2x.png") == "https://host/img@2x.png"  # an '@' in a path is not userinfo
    out = tmp_path / "out"
    assert main(hard_positives(out, "--llm_base_url=http://user:p@ss@127.0.0.1:9/v1")) == 2
    line = one_line(capsys)
    assert line == ("error: --llm_base_url=http://***@127.0.0.1:9/v1: its user or password holds an unescaped '@' "
                    "(write it as %40)"), line
    assert not out.exists()


@pytest.mark.parametrize("url", ["http://user:pa ss@127.0.0.1:9/v1", "http://user:s3cr3t\t@127.0.0.1:9/v1",
                                 "http://user:s3cr3t\r@127.0.0.1:9/v1", "http://user:12/s3cr3t@127.0.0.1:9/v1",
                                 "http://user:s3#cr3t@127.0.0.1:9/v1", "user:s3cr3t@127.0.0.1:9/v1"],
                         ids=["space", "tab", "CR", "slash", "hash", "no scheme"])
@pytest.mark.parametrize("given", ["--llm_base_url", "OPENAI_BASE_URL"])
def test_m12_a_base_url_whose_password_cannot_be_told_apart_is_refused_unshown(tmp_path, monkeypatch, capsys, url,
                                                                              given):
    """cd18f06: 'error: --llm_base_url=http://user:pa ss@127.0.0.1:9/v1: cannot reach ...' (the URL pattern
    stopped at the space, so no userinfo was found), and the tab variant whole in httpx's 'not a URL'."""
    from pipeline.urls import redacted

    assert redacted("http://user:pa ss@127.0.0.1:9/v1") == "http://***@127.0.0.1:9/v1"
    out = tmp_path / "out"
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    assert main(hard_positives(out, *([f"--llm_base_url={url}"] if given == "--llm_base_url" else []))) == 2
    line = one_line(capsys)
    assert line.startswith(f"error: {given}: not a URL: it holds ") and "not shown" in line, line
    for part in ("pa ss", "s3cr3t", "cr3t", "127.0.0.1"):
        assert part not in line, line
    assert not out.exists()


# ----------------------------------------------------------------------------------------------------- M29, M30

def replay_lines(change=lambda r: r) -> list[str]:
    source = SAMPLES / "coco" / "hard_positives_replay.jsonl"
    return [json.dumps(change(json.loads(line))) for line in source.read_text().splitlines() if line.strip()]


def replay_run(out, replay, *extra) -> list[str]:
    return ["--stage=hard_positives", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={out}",
            "--llm_engine=replay", "--model=m", "--positive_types=replace", f"--llm_replay={replay}",
            "--progress_seconds=0", *extra]


@pytest.mark.parametrize("field", ["text", "caption"])
def test_m29_a_lone_surrogate_escape_in_a_replay_answer_refuses_the_file_naming_the_line(tmp_path, capsys, field):
    """cd18f06: every answer ending in a JSON \\ud800 escape gave a 142-line traceback from Beam's coder."""
    lines = replay_lines()
    record = json.loads(lines[2])
    record[field] += "\ud800"
    lines[2] = json.dumps(record)  # ensure_ascii: the escape \ud800, valid UTF-8 JSON
    replay = tmp_path / "replay.jsonl"
    replay.write_text("\n".join(lines) + "\n")
    with pytest.raises(ReplayError, match=rf"replay.jsonl:3: its {field} holds a lone surrogate"):
        list(read_replay(str(replay)))
    out = tmp_path / "out"
    assert main(replay_run(out, replay)) == 2
    assert one_line(capsys) == (f"error: --llm_replay: {replay}:3: its {field} holds a lone surrogate (a JSON escape "
                                f"\\ud800-\\udfff), not text")
    assert not out.exists()


def test_m30_a_replay_line_past_max_record_bytes_refuses_the_file_unread(tmp_path, capsys):
    """cd18f06: a 150 MB answer was read whole (+850 MB RSS) into every worker. Now a line past --max_record_bytes
    refuses the file, naming the line, measured in 1 MiB pieces, never held."""
    lines = replay_lines()
    big = json.dumps({"type": "replace", "caption": "an unused caption", "text": "x" * (24 << 20)})
    replay = tmp_path / "replay.jsonl"
    replay.write_text("\n".join(lines[:5] + [big] + lines[5:]) + "\n")
    del big
    caught, peak = peak_bytes(lambda: pytest.raises(ReplayError, lambda: list(read_replay(str(replay)))))
    assert str(caught.value) == (f"{replay}:6: a line of {(24 << 20) + 64:,} bytes, longer than "
                                 f"--max_record_bytes=1,048,576 (measured, never held)"), caught.value
    assert peak < 8 << 20, peak  # cd18f06 held the line, its str and the parsed text: over 70 MiB
    assert len(list(read_replay(str(replay), 32 << 20))) == len(lines) + 1  # a raised bound reads it
    out = tmp_path / "out"
    assert main(replay_run(out, replay)) == 2
    assert one_line(capsys).startswith(f"error: --llm_replay: {replay}:6: a line of ")
    assert not out.exists()


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 20])
def test_m30_bounded_replay_lines_split_as_readline_did(chunk):
    """The replay reader's lines (files.stream_lines) whatever the piece size: CRLF, a last line with no line
    break, a line of exactly the bound, one past it."""
    from pipeline.sources.files import LongLine, stream_lines

    data = b"abc\r\n\n" + b"x" * 8 + b"\n" + b"y" * 9 + b"\nlast"
    got = [(type(x).__name__, x.size) if isinstance(x, LongLine) else x
           for x in stream_lines(io.BytesIO(data), 8, chunk)]
    assert got == [b"abc", b"", b"x" * 8, ("LongLine", 10), b"last"]
    assert list(stream_lines(io.BytesIO(b"a\n"), 8, chunk)) == [b"a"]
