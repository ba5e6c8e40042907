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
import re
import threading
import zlib

import httpx

from pipeline.llm.engines import Generation
from pipeline.urls import hidden_why, redact_secrets, redact_urls, redacted, secret_values

RETRY_STATUS = (408, 409, 425, 429, 500, 502, 503, 504)
# Hosted APIs list hundreds of models with their descriptions: a few MB.
MODEL_LIST_BYTES = 16 * 2**20


class RequestFailed(Exception):
    """A request with no usable reply; `retry` says whether asking again may help, `status` is its HTTP status,
    `answered` whether the server sent a reply (of a status, a size or an encoding we refuse)."""

    def __init__(self, reason: str, retry: bool, status: int = 0, answered: bool = False):
        super().__init__(reason)
        self.retry, self.status, self.answered = retry, status, answered or bool(status)


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
    """Why base_url cannot be a server's API root, or None (the URL in it redacted). A URL whose secrets cannot be
    found to redact (urls.hidden_why: a space, a control character, an '@' after the host) is refused, and the
    caller does not show it; so is a password with an unescaped '@', which parsers split in different places."""
    hidden = hidden_why(base_url)
    if hidden:
        return f"not a URL: {hidden}; not shown, since it may hold a password"
    try:
        url = httpx.URL(base_url)
    except httpx.InvalidURL as e:
        return f"not a URL ({redact_urls(e)})"
    if re.match(r"[^/?#]*", base_url.partition("://")[2]).group().count("@") > 1:  # httpx splits at the last
        return "its user or password holds an unescaped '@' (write it as %40)"
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
    except (httpx.HTTPError, OSError) as e:  # connect, read, a body cut short (RemoteProtocolError)
        raise RequestFailed(f"{type(e).__name__}: {redact_urls(e)}", retry=True) from None


async def _read(client: httpx.AsyncClient, method: str, url: str, max_bytes: int, body: dict | None) -> bytes:
    too_large = RequestFailed(f"reply larger than {max_bytes:,} bytes", retry=False, answered=True)
    async with client.stream(method, url, json=body) as response:
        status = response.status_code
        if not 200 <= status < 300:
            raise RequestFailed(f"HTTP {status}", retry=status in RETRY_STATUS, status=status)
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise too_large
        decoded = BoundedDecoding(response.headers.get_list("Content-Encoding", split_commas=True), max_bytes)
        async for raw in response.aiter_raw():  # the bytes on the wire: decoded here, never past the cap
            decoded.feed(raw)
        return decoded.finish()


DECODE_PIECE = 1 << 16


class BoundedDecoding:
    """A reply's body decoded from the bytes on the wire, never holding more than `cap` decoded bytes (plus 64 KiB
    in each layer) whatever the body: RequestFailed once the body, on the wire or decoded, passes the cap. We send
    Accept-Encoding: identity, yet a server may compress anyway: gzip and deflate, in any number of layers, are
    decoded a bounded piece at a time (zlib's max_length); any other coding is refused. httpx's aiter_bytes decoded
    each chunk whole through every layer before its size could be counted: 1,827 bytes of gzip of gzip took the
    client to 2.5 GB before the 16 MiB cap said no."""

    def __init__(self, codings: list[str], cap: int):
        self.cap, self.size, self.wire = cap, 0, 0
        self.too_large = RequestFailed(f"reply larger than {cap:,} bytes", retry=False, answered=True)
        self.layers = []  # the last coding applied is the first undone
        for coding in reversed([c.strip().lower() for c in codings]):
            if coding in ("", "identity"):
                continue
            if coding not in ("gzip", "x-gzip", "deflate"):
                shown = coding.encode("ascii", "replace")[:40].decode("ascii")
                raise RequestFailed(f"bad reply: Content-Encoding {shown!r}, not identity as asked (gzip and deflate "
                                    f"are read; nothing else)", retry=False, answered=True)
            self.layers.append(_Inflater(coding))
        self.pending = b""  # wire bytes not yet given to the first layer
        self.chunks: list[bytes] = []

    def feed(self, raw: bytes) -> None:
        self.wire += len(raw)
        if self.wire > self.cap:
            raise self.too_large
        self.pending += raw
        self._drain()

    def finish(self) -> bytes:
        self._drain()
        return b"".join(self.chunks)

    def _drain(self) -> None:
        while True:
            piece = self._take(len(self.layers) - 1, min(DECODE_PIECE, self.cap - self.size + 1))
            if not piece:
                return
            self.size += len(piece)
            if self.size > self.cap:
                raise self.too_large
            self.chunks.append(piece)

    def _take(self, layer: int, limit: int) -> bytes:
        """At most `limit` bytes out of layer `layer` (-1: the wire), pulling its input from the layer before."""
        if layer < 0:
            piece, self.pending = self.pending[:limit], self.pending[limit:]
            return piece
        inflater = self.layers[layer]
        while True:
            data = inflater.tail() or self._take(layer - 1, DECODE_PIECE)
            out = inflater.inflate(data, limit)
            if out or not data:
                return out


class _Inflater:
    """One gzip or deflate layer, inflated at most `limit` bytes at a time (deflate: zlib-wrapped, else raw, as
    httpx reads it)."""

    def __init__(self, coding: str):
        self.raw_deflate_fallback = coding == "deflate"
        self.z = zlib.decompressobj(zlib.MAX_WBITS | 16 if coding != "deflate" else zlib.MAX_WBITS)

    def tail(self) -> bytes:
        return self.z.unconsumed_tail

    def inflate(self, data: bytes, limit: int) -> bytes:
        if self.z.eof:  # what follows the end of the stream is ignored, as httpx does
            return b""
        try:
            out = self.z.decompress(data, limit)
        except zlib.error as e:
            if self.raw_deflate_fallback:
                self.z, self.raw_deflate_fallback = zlib.decompressobj(-zlib.MAX_WBITS), False
                return self.inflate(data, limit)
            raise RequestFailed(f"bad reply: its compressed body does not decode ({e})", retry=False,
                                answered=True) from None
        self.raw_deflate_fallback = False
        return out


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
    if _holds_secret(text):  # a server echoing the key: the answer would reach rows, dead letters and the cache
        raise bad(f"{where} holds a secret of this environment (OPENAI_API_KEY or another), or part of one; not kept")
    finish = choice.get("finish_reason") or "stop"
    if not isinstance(finish, str):
        raise bad("choices[0].finish_reason is not a string")
    usage = reply.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else 0
    if type(tokens) is not int or not 0 <= tokens < 2**31:  # a count for the report only: unknown is 0
        tokens = 0
    return Generation(text, finish, tokens)


_SECRETS: list[str] | None = None


def _holds_secret(text: str) -> bool:
    global _SECRETS
    if _SECRETS is None:
        _SECRETS = secret_values()
    return bool(_SECRETS) and redact_secrets(text, _SECRETS) != text


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
        if e.answered:  # reached: its reply is refused
            return f"GET {shown}: {redact_urls(e)}"
        return f"cannot reach the LLM server: GET {shown}: {redact_urls(e)}"
    try:
        json.loads(data)
    except (ValueError, RecursionError):
        return f"GET {shown}: the reply is not JSON: is {redacted(base_url)} an OpenAI-compatible server?"
    return None
