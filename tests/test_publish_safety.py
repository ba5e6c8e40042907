"""Issue 15, publish: it owns only what it wrote, checks everything before the first byte goes to the Hub, refuses
a folder holding a run with no report, and no changed shard gets past it or load_table."""
from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.io.commit import STAGING_MARK
from pipeline.io.parquet import write_shard
from pipeline.io.schema import load_schema
from pipeline.publish.layout import write_run_folder
from pipeline.run import main
from pipeline.tables.folders import PublishError, find_tables
from pipeline.tables.load import load_table
from tests.conftest import REPO
from tests.image_fixtures import order_rows, schema_row
from tests.local_http import LocalHTTPServer


@pytest.fixture
def run_folder(tmp_path) -> Path:
    return write_run_folder(tmp_path / "runs" / "order", "order_eval", order_rows(30))


def publish(output_dir, *extra) -> list[str]:
    return ["--stage=publish", f"--output_dir={output_dir}", *extra]


def test_case1_publish_never_deletes_or_writes_into_a_folder_it_did_not_publish(run_folder, tmp_path, capsys):
    MANIFEST = ".hardpos-publish.json"  # noqa: N806 - as pipeline.tables.folders names it
    mine = tmp_path / "x"
    (mine / "data" / "raw").mkdir(parents=True)
    (mine / "data" / "raw" / "p.csv").write_text("p")
    assert main(publish(run_folder, f"--publish_dir={mine}")) == 2
    err = capsys.readouterr().err
    assert f"--publish_dir {mine} holds data/raw/p.csv, and no {MANIFEST} from an earlier publish" in err
    assert sorted(p.relative_to(mine).as_posix() for p in mine.rglob("*")) == ["data", "data/raw", "data/raw/p.csv"]

    hub = tmp_path / "hub"  # an empty (missing) folder: published, with the manifest of what it wrote
    assert main(publish(run_folder, f"--publish_dir={hub}")) == 0
    manifest = json.loads((hub / MANIFEST).read_text())
    assert sorted(manifest["files"]) == ["README.md", "data/order_eval/test-00000-of-00001.parquet"]
    # a file the user put there is neither replaced nor deleted, and stops the next publish
    (hub / "data" / "notes.txt").write_text("mine")
    assert main(publish(run_folder, f"--publish_dir={hub}")) == 2
    assert f"holds data/notes.txt, which its {MANIFEST} does not list" in capsys.readouterr().err
    assert (hub / "data" / "notes.txt").read_text() == "mine"
    (hub / "data" / "notes.txt").unlink()
    # a smaller release replaces exactly the files the manifest listed
    write_run_folder(run_folder, "order_eval", order_rows(10))
    assert main(publish(run_folder, f"--publish_dir={hub}")) == 0
    assert pq.ParquetFile(hub / "data" / "order_eval" / "test-00000-of-00001.parquet").metadata.num_rows == 10


def test_case4_publish_refuses_a_folder_holding_a_run_with_no_report(run_folder, tmp_path, capsys):
    parent = run_folder.parent
    killed = parent / "killed"  # what a run of an older hardpos, killed before its report, leaves
    write_run_folder(killed, "swap_eval", [schema_row("swap_eval", example_id="e1")], folder="swap")
    (killed / "report.json").unlink()
    assert main(publish(parent)) == 2
    err = capsys.readouterr().err
    assert f"{killed / 'swap'}: shards of table swap_eval that no report.json lists" in err
    assert "--allow_partial" in err
    assert not (parent / "hub").exists()  # refused before writing anything
    assert main(publish(parent, "--allow_partial")) == 0
    out = capsys.readouterr().out
    assert f"skipped (--allow_partial): {killed / 'swap'}" in out
    assert sorted(p.name for p in (parent / "hub" / "data").iterdir()) == ["order_eval"]
    # a folder of the user's named like a staging folder is not a run (hardpos marks its own)
    (killed / "swap").rename(tmp_path / "elsewhere")
    (killed / ".staging-mine").mkdir()
    assert main(publish(parent, "--publish_dir", str(tmp_path / "hub2"))) == 0
    capsys.readouterr()
    # a run in progress (or killed) under this version: its staging folder, with hardpos's mark
    staging = killed / ".staging-eval_sets-0123456789ab"
    staging.mkdir()
    (staging / STAGING_MARK).touch()
    assert main(publish(parent)) == 2
    assert "a run that has not finished: it is running, or was killed" in capsys.readouterr().err


def test_case7_publish_and_load_table_refuse_a_shard_changed_after_it_was_written(run_folder, tmp_path, capsys):
    shard = run_folder / "order_eval" / "test-00000-of-00001.parquet"
    original = shard.read_bytes()
    # the same number of rows, other content
    write_shard(order_rows(30, word="cat"), str(shard), load_schema("order_eval"))
    assert main(publish(run_folder)) == 2
    assert "its sha256 differs from the one" in capsys.readouterr().err
    with pytest.raises(PublishError, match="sha256 differs"):
        load_table(str(run_folder), "order_eval", cache_dir=str(tmp_path / "hf"))
    # flipped bits, anywhere in the file
    rng = random.Random(7)
    for _ in range(25):
        damaged = bytearray(original)
        damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        shard.write_bytes(bytes(damaged))
        with pytest.raises(PublishError, match="sha256 differs"):
            find_tables(run_folder)
    shard.write_bytes(original)
    assert [t.rows for t in find_tables(run_folder)] == [30]


def test_case7_page_checksums_catch_flipped_bits_in_the_data_on_read(tmp_path):
    path = tmp_path / "shard.parquet"
    write_shard(order_rows(200), str(path), load_schema("order_eval"))
    original = path.read_bytes()
    expected = pq.read_table(path).to_pylist()
    meta = pq.ParquetFile(path).metadata
    chunks = [meta.row_group(0).column(c) for c in range(meta.num_columns)]
    spans = [((c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset), c.total_compressed_size)
             for c in chunks]
    rng = random.Random(0)
    silent = 0
    for _ in range(200):  # flips inside the column chunks: pages and their headers
        start, size = rng.choice(spans)
        damaged = bytearray(original)
        damaged[start + rng.randrange(size)] ^= 1 << rng.randrange(8)
        try:
            rows = pq.read_table(io.BytesIO(bytes(damaged)), page_checksum_verification=True).to_pylist()
        except Exception:  # noqa: BLE001 - any read error is a detection
            continue
        silent += rows != expected
    assert silent == 0


class _StandInHub(BaseHTTPRequestHandler):
    requests: list[str] = []

    def _any(self):
        _StandInHub.requests.append(f"{self.command} {self.path}")
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_HEAD = _any

    def log_message(self, *args):
        pass


def test_case8_publish_sends_nothing_to_the_hub_when_a_check_fails(run_folder):
    report_path = run_folder / "report.json"
    report = json.loads(report_path.read_text())
    report["tables"]["order_eval"].update(read=31, balanced=False)  # one record unaccounted for
    report_path.write_text(json.dumps(report))
    _StandInHub.requests = []
    with LocalHTTPServer(_StandInHub, stop_after=120) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.root_url, "HF_TOKEN": "hf_stand_in", "HF_HUB_DISABLE_TELEMETRY": "1"}
        done = subprocess.run([sys.executable, "-m", "pipeline.run", *publish(run_folder, "--hub_repo=org/name")],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "the counts of table order_eval do not balance" in done.stderr
    assert _StandInHub.requests == []


@pytest.mark.parametrize("linked", ["shard", "table folder"])
def test_n23_a_shard_or_table_folder_that_is_a_link_is_never_published(run_folder, tmp_path, capsys, linked):
    """A run's shard replaced by a symbolic link to the same bytes outside the folder (so its sha256 holds):
    46709a5 published the link itself, pointing outside, and the next publish refused its own folder. Now
    publish refuses it before writing anything, and so does load_table."""
    shard = next((run_folder / "order_eval").glob("*.parquet"))
    outside = tmp_path / "outside"
    outside.mkdir()
    if linked == "shard":
        target = outside / shard.name
        shard.rename(target)
        shard.symlink_to(target)
        link = shard
    else:
        target = outside / "order_eval"
        (run_folder / "order_eval").rename(target)
        (run_folder / "order_eval").symlink_to(target)
        link = run_folder / "order_eval"
    hub = tmp_path / "hub"
    assert main(publish(run_folder, f"--publish_dir={hub}")) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == [f"error: {link}: a symbolic link (to {target}), which hardpos never reads a table through or "
                     f"publishes; put the file itself there, or run the stage again"]
    assert not hub.exists()
    with pytest.raises(PublishError, match="a symbolic link"):
        load_table(str(run_folder), "order_eval")
