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
