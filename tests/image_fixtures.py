"""Test helpers for --stage=images: generated JPEGs, a local HTTP server that counts requests, fixture tables."""
from __future__ import annotations

import io
import random
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from PIL import Image

from pipeline.io.schema import load_schema
from pipeline.tables.folders import write_run_folder
from tests.local_http import LocalHTTPServer

_DEFAULTS = {"string": "x", "int64": 0, "int32": 0, "float64": 0.0, "bool": False, "list<string>": []}


def jpeg(seed: int, size: tuple[int, int] = (64, 48)) -> bytes:
    """A noise JPEG: distinct per seed, and dense enough that damage to its data shows."""
    rng = random.Random(seed)
    image = Image.frombytes("RGB", size, rng.randbytes(size[0] * size[1] * 3))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return out.getvalue()


def corrupt_jpeg(seed: int) -> bytes:
    """A JPEG with a stray start-of-frame marker in the middle of its entropy-coded data: OpenCV decodes it
    with a warning (so img2dataset keeps it as a success), PIL refuses it."""
    data = jpeg(seed)
    middle = len(data) // 2
    return data[:middle] + b"\xff\xc0" + data[middle:]


class ImageServer(LocalHTTPServer):
    """http://127.0.0.1:<port>/<path> serving `files` (path -> bytes), 404 for the rest; counts GETs per path.

    Hostile paths: `trickle` ones send a byte every half second until the server stops (by itself after
    stop_after seconds); `endless` ones stream zeros as fast as the client reads, with no Content-Length, until
    it hangs up or the server stops. `sent` counts the body bytes written per path."""

    def __init__(self, files: dict[str, bytes], trickle: tuple[str, ...] = (), endless: tuple[str, ...] = (),
                 stop_after: float | None = None):
        self.files = dict(files)
        self.requests: Counter = Counter()
        self.sent: Counter = Counter()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _stream(self, path: str, chunk: bytes, pause: float) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "image/jpeg")
                self.end_headers()
                try:
                    while not server.stopping.is_set():
                        self.wfile.write(chunk)
                        self.wfile.flush()
                        with server._lock:
                            server.sent[path] += len(chunk)
                        time.sleep(pause)
                except OSError:  # the client hung up
                    pass

            def do_GET(self):
                path = self.path.lstrip("/")
                with server._lock:
                    server.requests[path] += 1
                    data = server.files.get(path)
                if path in trickle:
                    return self._stream(path, b"\xff", 0.5)
                if path in endless:
                    return self._stream(path, bytes(1 << 16), 0)
                if data is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "image/jpeg")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        super().__init__(Handler, stop_after)
        self.url = self.root_url

    def snapshot(self) -> Counter:
        with self._lock:
            return Counter(self.requests)


def schema_row(schema_name: str, **values) -> dict:
    """A row that passes the schema check: every column at a default of its type, then `values`."""
    schema = load_schema(schema_name)
    row = {c["name"]: _DEFAULTS[c["type"]] for c in schema.columns}
    unknown = set(values) - set(row)
    assert not unknown, unknown
    row.update(values)
    schema.check_row(row)
    return row


def order_rows(n: int, word: str = "dog") -> list[dict]:
    """n order_eval rows, captions "a <word> number <i>": a small table for the publish and reader tests."""
    return [schema_row("order_eval", example_id=f"{i:016x}", caption_id=i, caption=f"a {word} number {i}")
            for i in range(n)]


def order_run(tmp_path: Path) -> Path:
    """<tmp_path>/out holding one run folder, run/, with a 3-row order_eval table: the folder the publish probes'
    tests publish (--output_dir=<tmp_path>/out, the release in out/hub)."""
    write_run_folder(tmp_path / "out" / "run", "order_eval", order_rows(3, "own"))
    return tmp_path / "out"


def write_table(output_dir: Path, folder: str, schema_name: str, rows: list[dict]) -> None:
    """<output_dir>/<folder>/<split>-00000-of-00001.parquet, recorded in output_dir's report.json, as the stages
    write it."""
    write_run_folder(output_dir, schema_name, rows, folder)
