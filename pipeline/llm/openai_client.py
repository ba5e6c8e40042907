"""The openai engine's HTTP side, on httpx: requests to an OpenAI-compatible server, each within a total deadline
and a cap on its reply's bytes, the reply's shape checked before validation sees it; and the one check of the
server before the first prompt.

Why not the hand-written urllib client it replaces (docs/llm.md has the probe's figures): urllib's timeout is per
socket read, so a server trickling a byte a second never timed out; a reply was read whole, whatever its size;
http.client's IncompleteRead escaped every except clause; and the ThreadPoolExecutor's workers, stuck in reads,
held up the interpreter's exit after a signal. Here the requests are tasks on one asyncio loop in a daemon thread:
asyncio.wait_for ends a request at its deadline wherever it waits (connect, headers, body), the body is read in
chunks and given up past the cap, and a signal cancels the tasks in flight, whose thread never delays the exit.
"""
from __future__ import annotations

import asyncio
import json
import os
import threading

import httpx

from pipeline.llm.engines import Generation
from pipeline.urls import redact_urls, redacted

RETRY_STATUS = (408, 409, 425, 429, 500, 502, 503, 504)
# Hosted APIs list hundreds of models with their descriptions: a few MB.
MODEL_LIST_BYTES = 16 * 2**20


class RequestFailed(Exception):
    """A request with no usable reply; `retry` says whether asking again may help, `status` is its HTTP status."""

    def __init__(self, reason: str, retry: bool, status: int = 0):
        super().__init__(reason)
        self.retry, self.status = retry, status


class KeyProblem(ValueError):
    """OPENAI_API_KEY cannot be sent as a header; the message names the problem, never the key."""


def key_problem(key: str) -> str | None:
    """Why the key cannot go in an Authorization header, or None. A key is printable ASCII with no space: a CR or
    LF would end the header (h11 refused it, quoting the key in its error), a non-ASCII character cannot be encoded
    (httpx raised UnicodeEncodeError). Names the character's kind and place, never the key."""
    for i, c in enumerate(key, 1):
        if not "\x21" <= c <= "\x7e":
            what = {"\r": "a carriage return (a key read from a file with Windows line ends?)",
                    "\n": "a line feed (a key read with its line end?)", " ": "a space", "\t": "a tab"}.get(c) or (
                "a control character" if c < " " or c == "\x7f" else "a character that is not ASCII")
            return (f"OPENAI_API_KEY holds {what} at character {i} of {len(key)}: a key is printable ASCII with no "
                    f"spaces (the key is not shown)")
    return None


def api_headers() -> dict:
    """The JSON headers of an OpenAI-compatible request; the key, when OPENAI_API_KEY is set, as a Bearer token.
    KeyProblem for a key that is not a valid header value, before any request."""
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}  # the cap counts what is read
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        problem = key_problem(key)
        if problem:
            raise KeyProblem(problem)
        headers["Authorization"] = f"Bearer {key}"
    return headers


def endpoint(base_url: str, name: str) -> str:
    """The URL of an endpoint below the API root: its name appended to the root's path, the root's query string
    (if any) kept after it, not the name appended to the query."""
    url = httpx.URL(base_url)
    return str(url.copy_with(path=url.path.rstrip("/") + "/" + name))


def url_problem(base_url: str) -> str | None:
    """Why base_url cannot be a server's API root, or None (the URL in it redacted)."""
    try:
        url = httpx.URL(base_url)
    except httpx.InvalidURL as e:
        return f"not a URL ({redact_urls(e)})"
    if url.scheme not in ("http", "https") or not url.host:
        return "not an http:// or https:// URL (e.g. http://localhost:8000/v1)"
    if url.port is not None and not 0 < url.port < 65_536:  # httpx takes any number; the socket would overflow
        return f"port {url.port} is not from 1 to 65535"
    return None


async def fetch(client: httpx.AsyncClient, method: str, url: str, deadline_s: float, max_bytes: int,
                body: dict | None = None) -> bytes:
    """The body of a 2xx reply, all of it read within deadline_s and at most max_bytes long; RequestFailed
    otherwise (past the deadline, past the cap, another status, any transport error)."""
    try:
        return await asyncio.wait_for(_read(client, method, url, max_bytes, body), deadline_s)
    except asyncio.TimeoutError:
        raise RequestFailed(f"no complete reply within {deadline_s:g} s", retry=True) from None
    except httpx.LocalProtocolError:  # our own request refused by h11: its message quotes the header (the key)
        raise RequestFailed("LocalProtocolError: the request is not valid HTTP (a header or the URL)",
                            retry=False) from None
    except (httpx.HTTPError, OSError) as e:  # connect, read, a body cut short (RemoteProtocolError), decoding
        raise RequestFailed(f"{type(e).__name__}: {redact_urls(e)}", retry=True) from None


async def _read(client: httpx.AsyncClient, method: str, url: str, max_bytes: int, body: dict | None) -> bytes:
    too_large = RequestFailed(f"reply larger than {max_bytes:,} bytes", retry=False)
    async with client.stream(method, url, json=body) as response:
        status = response.status_code
        if not 200 <= status < 300:
            raise RequestFailed(f"HTTP {status}", retry=status in RETRY_STATUS, status=status)
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise too_large
        chunks, size = [], 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > max_bytes:
                raise too_large
            chunks.append(chunk)
        return b"".join(chunks)


def parse_reply(data: bytes, chat: bool) -> Generation:
    """The generation in a (chat) completions reply; RequestFailed naming what is wrong with its shape, so that
    validation only ever reads a string."""
    def bad(what: str) -> RequestFailed:
        return RequestFailed(f"bad reply: {what}", retry=False)

    try:
        reply = json.loads(data)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise bad(f"not JSON ({str(e).splitlines()[0][:200]})") from None
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise bad("no choices[0] object")
    choice = choices[0]
    if chat:
        message = choice.get("message")
        if not isinstance(message, dict):
            raise bad("choices[0].message is not an object")
        text, where = message.get("content"), "choices[0].message.content"
    else:
        text, where = choice.get("text"), "choices[0].text"
    text = "" if text is None else text  # no answer: validation rejects it as empty
    if not isinstance(text, str):
        raise bad(f"{where} is a JSON {type(text).__name__}, not a string")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise bad(f"{where} holds a lone surrogate (\\ud800-\\udfff), not text") from None
    finish = choice.get("finish_reason") or "stop"
    if not isinstance(finish, str):
        raise bad("choices[0].finish_reason is not a string")
    usage = reply.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else 0
    if type(tokens) is not int or not 0 <= tokens < 2**31:  # a count for the report only: unknown is 0
        tokens = 0
    return Generation(text, finish, tokens)


class CompletionsClient:
    """POSTs request bodies to one endpoint, `concurrency` at a time, each retried with exponential backoff while
    its failure may pass; a request that still fails comes back as finish_reason "error" with the reason."""

    def __init__(self, url: str, chat: bool, concurrency: int, deadline_s: float, retries: int, max_bytes: int):
        self.url, self.chat, self.concurrency = url, chat, concurrency
        self.deadline_s, self.retries, self.max_bytes = deadline_s, retries, max_bytes
        self.loop = asyncio.new_event_loop()
        # A daemon thread: the requests in flight when a signal stops the run never keep the process alive.
        threading.Thread(target=self.loop.run_forever, name="openai-engine", daemon=True).start()
        self.client = self.slots = None  # made on the loop

    def post_all(self, bodies: list[dict]) -> list[Generation]:
        future = asyncio.run_coroutine_threadsafe(self._all(bodies), self.loop)
        try:
            return future.result()
        except BaseException:  # a signal's KeyboardInterrupt: the requests in flight are abandoned
            future.cancel()
            raise

    async def _all(self, bodies: list[dict]) -> list[Generation]:
        if self.client is None:
            try:
                headers = api_headers()
            except KeyProblem as e:  # the launcher refuses it first; a worker with another environment fails here
                return [Generation("", "error", 0, str(e)) for _ in bodies]
            self.client = httpx.AsyncClient(headers=headers, timeout=None,  # fetch's deadline bounds it all
                                            limits=httpx.Limits(max_connections=self.concurrency))
            self.slots = asyncio.Semaphore(self.concurrency)
        return list(await asyncio.gather(*(self._one(body) for body in bodies)))

    async def _one(self, body: dict) -> Generation:
        async with self.slots:
            error = ""
            for attempt in range(self.retries + 1):
                if attempt:
                    await asyncio.sleep(min(30.0, 0.25 * 2 ** (attempt - 1)))
                try:
                    return parse_reply(await fetch(self.client, "POST", self.url, self.deadline_s, self.max_bytes,
                                                   body), self.chat)
                except RequestFailed as e:
                    error = str(e)
                    if not e.retry:
                        break
            return Generation("", "error", 0, error)


def server_problem(base_url: str, deadline_s: float = 10.0) -> str | None:
    """Why the OpenAI-compatible server at base_url cannot take prompts (GET {base_url}/models, which vLLM, TGI,
    SGLang and llama.cpp's server all answer), or None: checked once before the first prompt, so that a server that
    is down is one line instead of every prompt's retries."""
    url = endpoint(base_url, "models")
    shown = redacted(url)

    async def model_list() -> bytes:
        async with httpx.AsyncClient(headers=api_headers(), timeout=None) as client:
            return await fetch(client, "GET", url, deadline_s, MODEL_LIST_BYTES)

    try:
        data = asyncio.run(model_list())
    except KeyProblem as e:
        return str(e)
    except RequestFailed as e:
        if e.status in (401, 403):
            return f"GET {shown}: HTTP {e.status}: the server refused the key (set OPENAI_API_KEY)"
        if e.status:
            hint = " (is --llm_base_url the API root, e.g. http://host:8000/v1?)" if e.status == 404 else ""
            return f"GET {shown}: HTTP {e.status}{hint}"
        return f"cannot reach the LLM server: GET {shown}: {redact_urls(e)}"
    try:
        json.loads(data)
    except (ValueError, RecursionError):
        return f"GET {shown}: the reply is not JSON: is {redacted(base_url)} an OpenAI-compatible server?"
    return None
