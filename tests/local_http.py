"""A test HTTP server on 127.0.0.1 (a free port) that serves from a thread for the length of a with-block."""
from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer


class LocalHTTPServer:
    def __init__(self, handler):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.root_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
