"""URLs as hardpos prints them: never with their secrets. A user's password (`http://user:secret@host/v1`) and the
values of a query string (`?api_key=...`, a signed URL's `sig=`) are written as *** wherever a URL reaches an
error line, a dead letter or a report; the URL itself is used as given."""
from __future__ import annotations

import re

_USERINFO = re.compile(r"(?<=://)[^/?#@\s]*@")
_QUERY_VALUE = re.compile(r"([?&;][^=&#;\s]*=)[^&#;\s]*")
_BARE_QUERY = re.compile(r"\?([^=&#\s]+)(?=$|#)")
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")


def redacted(url: str) -> str:
    """The URL with its userinfo and query values as ***."""
    url = _USERINFO.sub("***@", str(url))
    url = _QUERY_VALUE.sub(r"\1***", url)
    return _BARE_QUERY.sub("?***", url)


def redact_urls(text: str) -> str:
    """Every URL in a text (an error message that quotes one) redacted."""
    return _URL.sub(lambda m: redacted(m.group()), str(text))
