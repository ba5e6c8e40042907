"""A test HTTP server on 127.0.0.1 (a free port) that serves from a thread for the length of a with-block.

With stop_after=N it also stops by itself N seconds after it started, so a test whose client never lets go
(a download that never ends, a run that hangs) cannot hang the test suite; handlers that stream or wait should
end when `stopping` is set.
"""
from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer


class LocalHTTPServer:
    def __init__(self, handler, stop_after: float | None = None):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True  # a handler still streaming never holds up the stop
        self.root_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._timer = threading.Timer(stop_after, self._stop) if stop_after else None

    def _stop(self):
        if not self.stopping.is_set():
            self.stopping.set()
            self.httpd.shutdown()
            self.httpd.server_close()

    def __enter__(self):
        self._thread.start()
        if self._timer:
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc):
        if self._timer:
            self._timer.cancel()
        self._stop()
