"""URLs as hardpos prints them: never with their secrets. A user's password (`http://user:secret@host/v1`) and the
values of a query string (`?api_key=...`, a signed URL's `sig=`) are written as *** wherever a URL reaches an
error line, a dead letter or a report; the URL itself is used as given.

The userinfo is everything from `://` to the last `@` of the authority (the part before the first `/`, `?` or
`#`), as httpx reads it: a password with an unescaped `@` (`http://user:p@ss@host/v1`) or a space is hidden whole,
not from its first `@` or up to its first space. Where a URL is given whole (a flag), `hidden_why` says when even
that cannot find its secrets (a space or control character, an `@` after the authority, an `@` with no `://`):
such a URL is refused without being shown (openai_client.url_problem)."""
from __future__ import annotations

import re

# After scheme:// or scheme:/ (a library that joins a URL as a path, as `datasets` does, leaves one slash).
_USERINFO = re.compile(r"(?<=:/)(/?)[^/?#]*@")  # greedy: up to the authority's last @
_QUERY_VALUE = re.compile(r"([?&;#][^=&#;\s]*=)[^&#;\s]*")  # a fragment's too: #access_token=
# a component with no '=' is a value (but *** itself, what redaction wrote)
_BARE_QUERY = re.compile(r"(?<=[?&;])(?!\*\*\*(?:[&#;]|$))[^=&#;\s]+(?=[&#;]|$)")
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*:/[^\s'\"<>]+")


_SCHEME = re.compile(r"[a-zA-Z][-a-zA-Z0-9+.]*://")
_SCHEME_HEAD = re.compile(r"[a-zA-Z][-a-zA-Z0-9+.]*:/{1,2}")


def has_scheme(path) -> bool:
    """Whether a path names a file system by its scheme (gs://, s3://, http://), as Beam's FileSystems decide:
    scheme:// at the start. `/data/x://../proc` is a local path, whatever it holds further on."""
    return bool(_SCHEME.match(str(path).strip()))


# An authority that is neither host nor host:port (a port is digits, then perhaps the message's punctuation) and has
# no '@': a userinfo cut short before its '@' ("http://user:secr..." from a message cut to a length), whose password
# part is hidden.
_CUT_USERINFO = re.compile(r"(?<=:/)(/?[^/?#@\[\]:]*):(?![0-9]*[^\w/?#@]*(?:[/?#]|$))[^/?#@]*(?=[/?#]|$)")


def redacted(url: str) -> str:
    """The URL with its userinfo and query values as ***; also the password of a userinfo cut short before its
    '@' (an authority whose 'port' is not digits), and everything up to the last '@' of a URL whose password holds
    a '/', '?' or '#'."""
    url = str(url)
    head = _SCHEME_HEAD.match(url)
    authority = re.match(r"[^/?#]*", url[head.end():]).group() if head else ""
    rest = url[head.end() + len(authority):] if head else ""
    port = authority.partition(":")[2]
    if head and port and "@" not in authority and (
            "@" in rest.partition("?")[0] or "@" in rest.partition("#")[2] or ("@" in rest and not port.isdigit())):
        # "user:pass" cut by a '/', '?' or '#' in the password, its '@' further on: hidden up to the last '@' (an
        # '@' in a path after a plain host, img@2x.png, is no userinfo)
        url = head.group() + "***" + url[url.rfind("@"):]
    url = _USERINFO.sub(r"\1***@", url, count=1)
    url = _CUT_USERINFO.sub(r"\1:***", url, count=1)
    url = _QUERY_VALUE.sub(r"\1***", url)
    base, mark, query = url.partition("?")
    return base + _BARE_QUERY.sub("***", mark + query) if mark else url


def shown_whole(url: str) -> str:
    """A URL given whole (a flag's value) for a message: redacted, or not shown at all where its secrets cannot be
    told apart from the rest of it (hidden_why: a password holding '/', '?' or '#' leaves its tail in the path)."""
    why = hidden_why(url)
    return f"(a URL not shown here: {why})" if why else redacted(url)


def _clipped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def shown(url: str, limit: int = 80) -> str:
    """A URL for a message: redacted whole first, then cut to `limit` characters (a cut made first could leave a
    password without the '@' that marks it)."""
    return _clipped(redacted(url), limit)


def redact_urls(text: str) -> str:
    """Every URL in a text (an error message that quotes one) redacted."""
    return _URL.sub(lambda m: redacted(m.group()), str(text))


def cut(text: str, limit: int) -> str:
    """A message's text for a line of `limit` characters: its URLs redacted before it is cut (redact_urls)."""
    return _clipped(redact_urls(text) if ":/" in str(text) else str(text), limit)


def hidden_why(url: str) -> str | None:
    """Why the secrets of a URL given whole cannot be told apart from the rest of it (so that it must not be printed,
    even redacted), or None: whitespace or a control character in it, where parsers disagree on where a part ends;
    an `@` with no scheme:// before it; an `@` after the authority (a password holding a `/`, `?` or `#` puts the
    rest of it in the path: `http://user:12/ss@host` is port 12 of host `user`). An `@` in the query is a value's
    (redacted) or a key's, never a password."""
    for c in str(url):
        if c.isspace() or not c.isprintable():
            what = "a space" if c == " " else "a line break" if c in "\r\n" else "a tab" if c == "\t" else \
                "whitespace or a control character"
            return f"it holds {what} (percent-encode it, e.g. %20)"
    _, sep, rest = str(url).partition("://")
    if not sep:
        return "it holds an '@' but no scheme:// before it" if "@" in url else None
    authority = re.match(r"[^/?#]*", rest).group()
    after = rest[len(authority):]  # path, query and fragment
    path, _, fragment = after.partition("#")
    if "@" in path.split("?", 1)[0] or "@" in fragment:
        return "it holds an '@' after its host (a password holding a '/', '?' or '#' must percent-encode it)"
    host = authority.rpartition("@")[2]
    if host.startswith("["):  # an IPv6 literal: the port after its ']' (none without one: not a URL at all)
        port = host.partition("]")[2].partition(":")[2]
    else:
        port = host.partition(":")[2]
    if port and not port.isdigit():
        # "http://u:pw?x@host": parsers take u as the host and pw as its port, and quote that 'port' in errors
        return "its port is not a number (a password holding a '/', '?' or '#' must percent-encode it)"
    return None


_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.IGNORECASE)


def secret_values() -> list[str]:
    """The values of the environment's secrets (OPENAI_API_KEY, HF_TOKEN, AWS_SECRET_ACCESS_KEY...: a name holding
    KEY, TOKEN, SECRET, PASSW or CREDENTIAL, a value of 8 characters or more), longest first."""
    import json
    import os

    found = {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= 8}
    # and as an error line may quote them: repr() or JSON escapes a backslash or a quote in the value
    found |= {form for v in list(found) for form in (repr(v)[1:-1], json.dumps(v)[1:-1], ascii(v)[1:-1])}
    return sorted(found, key=lambda v: (-len(v), v))


SECRET_RUN = 8  # no run of this many characters of a secret is printed: a message cut to a length cuts one short


def redact_secrets(text: str, secrets: list[str], partial: list[str] | None = None) -> str:
    """The text with every secret, and every run of SECRET_RUN or more of the characters of those in `partial`
    (default: all; a secret cut short, at either end, by a message's length limit), as ***."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, "***")
    partial = secrets if partial is None else partial
    if not partial or len(text) < SECRET_RUN:
        return text
    covered = bytearray(len(text))
    for secret in partial:
        pieces = {secret[i:i + SECRET_RUN] for i in range(len(secret) - SECRET_RUN + 1)}
        first = {piece[0] for piece in pieces}
        for i in range(len(text) - SECRET_RUN + 1):
            if text[i] in first and text[i:i + SECRET_RUN] in pieces:
                covered[i:i + SECRET_RUN] = b"\x01" * SECRET_RUN
    if not any(covered):
        return text
    out, i = [], 0
    while i < len(text):
        if covered[i]:
            while i < len(text) and covered[i]:
                i += 1
            out.append("***")
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


class _Redacting:
    """A text stream that writes every URL with its secrets as *** (redact_urls), and the environment's secret values,
    or any run of SECRET_RUN of their characters, as *** wherever they appear (a file's content quoted in an error,
    a library's message): what a process prints, a traceback or a library's log line included, never shows a
    password, a query value or a key."""

    def __init__(self, stream):
        import os

        self._stream = stream
        self._secrets = secret_values()
        # a value naming a file (GOOGLE_APPLICATION_CREDENTIALS) is a path, hidden whole: its runs ("/home/me")
        # are every path's beside it
        self._partial = [v for v in self._secrets if not os.path.exists(v)]

    def write(self, text):
        text = redact_urls(text) if ":/" in text else text
        return self._stream.write(redact_secrets(text, self._secrets, self._partial))

    def __getattr__(self, name):
        return getattr(self._stream, name)


def redact_output() -> None:
    """sys.stdout and sys.stderr redacted from here on (a command-line entry point calls it first): the last line of
    defence behind each message's own redaction, for tracebacks and lines hardpos does not write itself."""
    import sys

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, _Redacting):
            setattr(sys, name, _Redacting(stream))
