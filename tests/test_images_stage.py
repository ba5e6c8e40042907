"""--stage=images end to end against a local HTTP server: shards, report, index, re-runs, resume, formats."""
import contextlib
import io
import json
import shutil
import tarfile
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
from PIL import Image

from pipeline.publish.images import check_image, failure_reason, open_images, row_ref, verify_shards
from pipeline.run import main
from tests.image_fixtures import ImageServer, corrupt_jpeg, jpeg, schema_row, write_table

COCO_GOOD = {1: (64, 48), 2: (80, 60), 3: (72, 40)}
VG_GOOD = {10: (96, 64), 11: (64, 96)}
FILES = {
    **{f"coco/{n}.jpg": jpeg(n, size) for n, size in COCO_GOOD.items()},
    **{f"vg/VG_100K/{n}.jpg": jpeg(n, size) for n, size in VG_GOOD.items()},
    "coco/5.jpg": corrupt_jpeg(5),  # OpenCV decodes it, so only the PIL check can refuse it
    "coco/6.jpg": b"not an image at all " * 20,  # refused from its header, before img2dataset's decode
}  # coco/4.jpg and vg/VG_100K/12.jpg are not served: 404
GOOD = {path for path in FILES if path not in ("coco/5.jpg", "coco/6.jpg")}
FAILED = {"coco/4.jpg": "http_404", "coco/5.jpg": "decode_error", "coco/6.jpg": "decode_error",
          "vg/VG_100K/12.jpg": "http_404"}
FAST = ["--image_processes=1", "--image_threads=4", "--image_timeout=5"]


@pytest.fixture(scope="module")
def server():
    with ImageServer(FILES) as s:
        yield s


def _coco_tables(out: Path, url: str) -> None:
    def coco(n):
        return f"{url}/coco/{n}.jpg"
    negatives = [("cap-a", 1, 0), ("cap-a", 1, 1), ("cap-b", 1, 0), ("cap-c", 2, 0), ("cap-d", 4, 0),
                 ("cap-e", 5, 0), ("cap-f", 6, 0)]
    rows = [schema_row("train_negatives", example_id=e, image_id=n, image_url=coco(n), negative_index=i)
            for e, n, i in negatives]
    rows.append(schema_row("train_negatives", example_id="cap-g", image_id=7, image_url=None))
    write_table(out, "train_negatives", "train_negatives", rows)
    # The same captions' images again in another table (cap-a shares image 1): each image is fetched once.
    write_table(out, "train", "train", [schema_row("train", example_id=e, image_id=n, image_url=coco(n))
                                        for e, n in (("cap-a", 1), ("cap-h", 3), ("cap-i", 4))])


SWAP_ROWS = {"swap-1": ("VG_100K/10.jpg", (4.0, 6.0, 30.0, 20.0)), "swap-2": ("VG_100K/11.jpg", (0.0, 0.0, 64.0, 48.0)),
             "swap-3": ("VG_100K/11.jpg", (10.0, 20.0, 30.0, 40.0)), "swap-4": ("VG_100K/12.jpg", (1.0, 1.0, 5.0, 5.0))}


def _swap_table(out: Path) -> None:
    rows = [schema_row("swap_eval", example_id=e, source_index=i, image_path=path, image_id=None,
                       **dict(zip(("bbox_x", "bbox_y", "bbox_w", "bbox_h"), box, strict=True)))
            for i, (e, (path, box)) in enumerate(SWAP_ROWS.items())]
    write_table(out, "swap", "swap_eval", rows)


def _run(argv: list[str]) -> tuple[int, str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        rc = main(argv)
    return rc, printed.getvalue()


def _args(first, *extra) -> list[str]:
    return ["--stage=images", f"--output_dir={first.out}", f"--image_root={first.server.url}/vg", *FAST, *extra]


@pytest.fixture(scope="module")
def first(server, tmp_path_factory):
    """One fetch of the fixture tables; tests that run again do so on a copy of its images folder."""
    out = tmp_path_factory.mktemp("images_out")
    _coco_tables(out, server.url)
    _swap_table(out)
    run = SimpleNamespace(out=out, images=out / "images", server=server)
    rc, printed = _run(_args(run, "--images_per_shard=2"))
    run.rc, run.printed, run.requests = rc, printed, server.snapshot()
    run.report = json.loads((out / "images" / "report.json").read_text())
    return run


def _path(url: str) -> str:
    return url.split("/", 3)[3]


def _tar_images(images: Path) -> list[bytes]:
    found = []
    for path in sorted((images / "shards").glob("*.tar")):
        with tarfile.open(path) as tar:
            found += [tar.extractfile(m).read() for m in tar if m.name.endswith(".jpg")]
    return found


def _copy_images(first, tmp_path) -> Path:
    copy = tmp_path / "images"
    shutil.copytree(first.images, copy)
    return copy


def test_shards_hold_exactly_the_good_images_each_fetched_once(first):
    assert first.rc == 0, first.printed
    stored = _tar_images(first.images)
    assert sorted(stored) == sorted(FILES[p] for p in GOOD)  # original bytes, each once, nothing corrupt
    for data in stored:
        Image.open(io.BytesIO(data)).load()
    assert first.requests == Counter({p: 1 for p in [*FILES, "coco/4.jpg", "vg/VG_100K/12.jpg"]})


def test_report_names_every_failure_and_counts_add_up(first):
    report = first.report
    assert report["report_path"] == str(first.images / "report.json")
    failures = {_path(f["url"]): f for f in report["failures"]}
    assert {p: f["reason"] for p, f in failures.items()} == FAILED
    assert failures["coco/5.jpg"]["error"].startswith("PIL")  # caught by the decode check, not by img2dataset
    assert failures["coco/6.jpg"]["error"] == "unreadable image header: PIL UnidentifiedImageError: cannot identify " \
                                              "image file"
    assert "404" in failures["coco/4.jpg"]["error"]
    tables = report["tables"]
    assert {t: (s["read"], s["rows"], s["discarded"], s["rejected"]) for t, s in tables.items()} == {
        "swap": (4, 3, 0, 1), "train": (3, 2, 0, 1), "train_negatives": (8, 4, 1, 3)}
    assert all(s["balanced"] for s in tables.values())
    assert tables["train_negatives"]["reject_reasons"] == {"decode_error": 2, "http_404": 1}
    assert tables["train_negatives"]["discard_reasons"] == {"no_image_url": 1}
    assert report["images"] == {"wanted": 9, "in_shards": 5, "fetched": 5, "already_present": 0, "failed": 4,
                                "failed_this_run": 4, "failed_earlier": 0, "requested": 9,
                                "failure_reasons": {"decode_error": 2, "http_404": 2}}
    assert report["shards"]["decode_failures_removed"] == 1
    assert "train_negatives" in first.printed and "failed decode_error" in first.printed


def test_index_maps_every_row_and_the_reader_crops_swap_rows(first):
    swap = {r["example_id"]: r for r in pq.read_table(first.images / "index" / "swap.parquet").to_pylist()}
    assert set(swap) == set(SWAP_ROWS)
    for example_id, (path, box) in SWAP_ROWS.items():
        row = swap[example_id]
        assert (row["bbox_x"], row["bbox_y"], row["bbox_w"], row["bbox_h"]) == box
        assert row["image_key"] == f"vg/{path}" and row["url"].endswith(path)
    assert swap["swap-4"]["status"] == "failed" and swap["swap-4"]["shard"] is None
    with tarfile.open(first.images / swap["swap-1"]["shard"]) as tar:
        assert tar.extractfile(f"{swap['swap-1']['key']}.jpg").read() == FILES["vg/VG_100K/10.jpg"]
    negatives = {r["example_id"]: r for r in pq.read_table(first.images / "index" / "train_negatives.parquet")
                 .to_pylist()}
    assert negatives["cap-a"]["table_rows"] == 2 and negatives["cap-a"]["bbox_x"] is None
    assert (negatives["cap-g"]["status"], negatives["cap-g"]["reason"]) == ("no_image", "no_image_url")
    assert negatives["cap-e"]["reason"] == "decode_error"

    with open_images(str(first.images)) as images:
        assert set(images) == {"cap-a", "cap-b", "cap-c", "cap-h", "swap-1", "swap-2", "swap-3"}
        row = images["swap-3"]
        served = Image.open(io.BytesIO(FILES["vg/VG_100K/11.jpg"]))
        assert row.image.size == VG_GOOD[11] and row.bbox == (10.0, 20.0, 30.0, 40.0)
        assert row.crop().tobytes() == served.crop((10, 20, 40, 60)).tobytes()
        assert images["cap-h"].bbox is None and images["cap-h"].image.size == COCO_GOOD[3]
    assert set(open_images(str(first.images), tables=["swap"])) == {"swap-1", "swap-2", "swap-3"}


def test_a_rerun_fetches_nothing_and_reports_the_images_as_present(first, tmp_path):
    images = _copy_images(first, tmp_path)
    before = first.server.snapshot()
    rc, printed = _run(_args(first, f"--images_dir={images}"))
    assert rc == 0, printed
    assert first.server.snapshot() == before
    report = json.loads((images / "report.json").read_text())
    assert report["images"]["requested"] == report["images"]["fetched"] == 0
    assert (report["images"]["already_present"], report["images"]["failed_earlier"]) == (5, 4)
    assert {_path(f["url"]): f["reason"] for f in report["failures"]} == FAILED
    assert report["tables"] == {  # the same rows; their images now count as already there
        t: {**s, "images": {**s["images"], "fetched": 0, "already_present": s["images"]["in_shards"]}}
        for t, s in first.report["tables"].items()}
    for index in (first.images / "index").glob("*.parquet"):  # same inputs, same index bytes
        assert (images / "index" / index.name).read_bytes() == index.read_bytes()


def test_retry_failed_images_asks_again_for_the_failures_only(first, tmp_path):
    images = _copy_images(first, tmp_path)
    before = first.server.snapshot()
    first.server.files["coco/4.jpg"] = jpeg(4)  # the missing image has appeared
    try:
        rc, printed = _run(_args(first, f"--images_dir={images}", "--retry_failed_images"))
    finally:
        del first.server.files["coco/4.jpg"]
    assert rc == 0, printed
    assert first.server.snapshot() - before == Counter({p: 1 for p in FAILED})
    report = json.loads((images / "report.json").read_text())
    assert (report["images"]["fetched"], report["images"]["already_present"], report["images"]["failed"]) == (1, 5, 3)
    assert report["tables"]["train"]["rows"] == 3
    assert sorted(_tar_images(images)) == sorted([*(FILES[p] for p in GOOD), jpeg(4)])


def test_an_interrupted_round_is_resumed_by_the_next_run(first, tmp_path):
    images = _copy_images(first, tmp_path)
    # As if the run had stopped while writing shard 00001: img2dataset writes its stats last.
    lost = pq.read_table(images / "shards" / "00001.parquet", columns=["url"])["url"].to_pylist()
    (images / "shards" / "00001_stats.json").unlink()
    before = first.server.snapshot()
    rc, printed = _run(_args(first, f"--images_dir={images}"))
    assert rc == 0, printed
    assert first.server.snapshot() - before == Counter({_path(u): 1 for u in lost})
    report = json.loads((images / "report.json").read_text())
    assert report["shards"]["incomplete_removed"] == ["00001"]
    assert report["images"]["in_shards"] == 5 and report["images"]["requested"] == len(lost) == 2
    assert sorted(_tar_images(images)) == sorted(FILES[p] for p in GOOD)


def test_a_shard_a_stopped_run_left_unchecked_is_checked_once(first, tmp_path):
    images = _copy_images(first, tmp_path)
    row = pq.read_table(images / "index" / "swap.parquet").to_pylist()[0]
    shard = images / row["shard"]
    member = f"{row['key']}.jpg"
    # As if the run had stopped after img2dataset wrote the shard, holding a corrupt image, and before the check.
    damaged = io.BytesIO()
    with tarfile.open(shard) as src, tarfile.open(fileobj=damaged, mode="w") as dst:
        for m in src:
            data = corrupt_jpeg(99) if m.name == member else src.extractfile(m).read()
            m.size = len(data)
            dst.addfile(m, io.BytesIO(data))
    shard.write_bytes(damaged.getvalue())
    stats_path = shard.with_name(shard.stem + "_stats.json")
    stats = json.loads(stats_path.read_text())
    stats.pop("hardpos_verified")
    stats_path.write_text(json.dumps(stats))

    removed = verify_shards(str(images))
    assert list(removed) == [row["image_key"]] and removed[row["image_key"]].startswith("PIL")
    with tarfile.open(shard) as tar:
        assert member not in tar.getnames() and f"{row['key']}.json" not in tar.getnames()
    meta = {r["key"]: r for r in pq.read_table(shard.with_suffix(".parquet")).to_pylist()}
    assert meta[row["key"]]["status"] == "failed_to_decode" and meta[row["key"]]["width"] is None
    assert json.loads(stats_path.read_text())["successes"] == stats["successes"] - 1
    assert verify_shards(str(images)) == {}  # checked once


def test_parquet_shards_from_a_local_image_root(tmp_path):
    root = tmp_path / "vg"
    (root / "VG_100K").mkdir(parents=True)
    (root / "VG_100K_2").mkdir()
    local = {"VG_100K/20.jpg": jpeg(20, (50, 40)), "VG_100K_2/21 b.jpg": jpeg(21, (40, 50)),
             "VG_100K/23.jpg": corrupt_jpeg(23)}  # VG_100K/22.jpg is missing
    for path, data in local.items():
        (root / path).write_bytes(data)
    out = tmp_path / "out"
    write_table(out, "replace", "replace_eval", [
        schema_row("replace_eval", example_id=f"rep-{i}", source_index=i, image_path=p, image_id=None)
        for i, p in enumerate(["VG_100K/20.jpg", "VG_100K_2/21 b.jpg", "VG_100K/22.jpg", "VG_100K/23.jpg"])])
    rc, printed = _run(["--stage=images", f"--output_dir={out}", f"--image_root={root}", "--image_format=parquet",
                        *FAST])
    assert rc == 0, printed
    images = out / "images"
    report = json.loads((images / "report.json").read_text())
    assert {f["url"].rsplit("/", 1)[1]: f["reason"] for f in report["failures"]} == {
        "22.jpg": "file_not_found", "23.jpg": "decode_error"}
    assert report["tables"]["replace"]["rows"] == 2 and report["tables"]["replace"]["balanced"]
    stored = [d for p in (images / "shards").glob("*.parquet") for d in pq.read_table(p)["jpg"].to_pylist() if d]
    assert sorted(stored) == sorted([local["VG_100K/20.jpg"], local["VG_100K_2/21 b.jpg"]])
    with open_images(str(images)) as found:
        assert set(found) == {"rep-0", "rep-1"}
        assert found["rep-1"].image.size == (40, 50)
        assert found.index_row("rep-1")["url"].endswith("21%20b.jpg")


@pytest.mark.parametrize("extra, message", [
    ([], "--image_root is required: swap"),
    (["--image_tables=nope", "--image_root=http://x"], "--image_tables: no table nope recorded in"),
    (["--image_root=/no/such/folder"], "--image_root: no such folder"),
    (["--image_root=gs://bucket/vg"], "--image_root: unsupported URL scheme"),
    (["--image_root=http://x", "--image_size=-1"], "--image_size: must be from 0 to 65,535, got -1"),
    (["--image_root=http://x", "--image_format=parquet"], "--image_format=parquet, but the shards"),
])
def test_bad_flags_fail_fast_naming_the_flag(first, capsys, extra, message):
    assert main(["--stage=images", f"--output_dir={first.out}", *extra]) == 2
    assert message in capsys.readouterr().err


def test_a_shard_changed_since_its_report_recorded_it_is_refused_naming_it(first, tmp_path, capsys):
    """Issue 35: the stage read a table's shards by a glob and trusted their page checksums, which leave the page
    headers out; now a shard whose sha256 is not the one its report recorded is one line, before any fetch."""
    out = tmp_path / "out"
    for table in ("train", "train_negatives", "swap"):
        shutil.copytree(first.out / table, out / table)
    shutil.copy(first.out / "report.json", out / "report.json")
    shard = out / "train" / "train-00000-of-00001.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    assert main(["--stage=images", f"--output_dir={out}", f"--image_root={first.server.url}/vg", *FAST]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {shard}: its sha256 differs from the one "
                                                   f"{out / 'report.json'} recorded")
    assert not (out / "images").exists()


def test_an_output_dir_without_image_tables_is_refused(tmp_path, capsys):
    assert main(["--stage=images", f"--output_dir={tmp_path}"]) == 2
    assert "--output_dir: no table with an image_url or image_path column" in capsys.readouterr().err


def test_row_refs_and_failure_reasons():
    coco = row_ref({"example_id": "e", "image_url": "http://h/1.jpg", "image_id": 1}, None)
    assert (coco.key, coco.url, coco.bbox) == ("coco/1", "http://h/1.jpg", None)
    assert row_ref({"example_id": "e", "image_url": None, "image_id": 1}, None).missing == "no_image_url"
    vg = row_ref({"example_id": "e", "image_path": "VG_100K/2.jpg", "bbox_x": 1, "bbox_y": 2, "bbox_w": 3,
                  "bbox_h": 4}, "http://h/vg/")
    assert (vg.key, vg.url, vg.bbox) == ("vg/VG_100K/2.jpg", "http://h/vg/VG_100K/2.jpg", (1.0, 2.0, 3.0, 4.0))
    assert row_ref({"example_id": "e", "image_path": "a b.jpg"}, "/data/vg").url == "file:///data/vg/a%20b.jpg"
    assert [failure_reason(s, e) for s, e in [
        ("failed_to_download", "HTTP Error 404: Not Found"), ("failed_to_download", "<urlopen error timed out>"),
        ("failed_to_download", "<urlopen error [Errno 111] Connection refused>"),
        ("failed_to_download", "<urlopen error [Errno -2] Name or service not known>"),
        ("failed_to_resize", "Image decoding error"), ("failed_to_decode", "PIL OSError: broken data stream"),
        ("failed_to_resize", "image too small"), ("failed_to_download", "something else")]] == [
        "http_404", "timeout", "connection_refused", "dns_error", "decode_error", "decode_error", "image_rejected",
        "download_error"]
    assert check_image(jpeg(1)) is None and check_image(corrupt_jpeg(1)).startswith("PIL")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """Issue 15: one fetch of rows that point at a server trickling a byte every half second, one streaming
    zeros with no end, files outside the local image root and URLs that are not http(s)."""
    base = tmp_path_factory.mktemp("hostile")
    root = base / "vg"
    (root / "VG_100K").mkdir(parents=True)
    (root / "VG_100K" / "1.jpg").write_bytes(jpeg(31))
    secret = base / "secret.jpg"  # a valid image, so that reading it would store it
    secret.write_bytes(jpeg(32))
    (root / "VG_100K" / "link.jpg").symlink_to(secret)
    out = base / "out"
    with ImageServer({"coco/1.jpg": jpeg(33)}, trickle=("coco/slow.jpg",), endless=("coco/huge.jpg",),
                     stop_after=90) as server:
        urls = {"ok": f"{server.url}/coco/1.jpg", "slow": f"{server.url}/coco/slow.jpg",
                "huge": f"{server.url}/coco/huge.jpg", "file": secret.as_uri(), "ftp": "ftp://127.0.0.1/coco/9.jpg"}
        write_table(out, "train", "train", [schema_row("train", example_id=e, image_id=n, image_url=url)
                                            for n, (e, url) in enumerate(urls.items(), 1)])
        paths = {"vg-ok": "VG_100K/1.jpg", "vg-up": "../secret.jpg", "vg-abs": str(secret),
                 "vg-link": "VG_100K/link.jpg"}
        write_table(out, "replace", "replace_eval", [
            schema_row("replace_eval", example_id=e, source_index=i, image_path=p, image_id=None)
            for i, (e, p) in enumerate(paths.items())])
        started = time.monotonic()
        rc, printed = _run(["--stage=images", f"--output_dir={out}", f"--image_root={root}", "--image_processes=1",
                            "--image_threads=4", "--image_timeout=2", "--image_deadline=3",
                            "--image_max_bytes=1000000"])
        seconds = time.monotonic() - started
        sent = dict(server.sent)
    index = {r["example_id"]: r for t in ("train", "replace")
             for r in pq.read_table(out / "images" / "index" / f"{t}.parquet").to_pylist()}
    return SimpleNamespace(rc=rc, printed=printed, seconds=seconds, sent=sent, index=index, secret=secret.read_bytes(),
                           images=out / "images", report=json.loads((out / "images" / "report.json").read_text()))


def test_case11_a_download_has_a_deadline_and_a_size_cap(hostile):
    assert hostile.rc == 0, hostile.printed
    assert hostile.seconds < 45  # the trickle would run until the server stops by itself, after 90 s
    assert hostile.index["slow"]["reason"] == "deadline_exceeded"
    assert hostile.index["huge"]["reason"] == "too_large"
    assert hostile.sent["coco/huge.jpg"] < 20_000_000  # cut off near --image_max_bytes, never read whole
    assert hostile.index["ok"]["status"] == "ok"
    assert hostile.report["tables"]["train"]["balanced"]


def test_case15_image_paths_and_urls_are_confined_to_the_root_and_http(hostile):
    assert hostile.rc == 0, hostile.printed
    assert {e: (r["status"], r["reason"]) for e, r in hostile.index.items() if e not in ("slow", "huge")} == {
        "ok": ("ok", None), "vg-ok": ("ok", None),
        "file": ("failed", "url_not_http"), "ftp": ("failed", "url_not_http"),
        "vg-up": ("failed", "path_outside_image_root"), "vg-abs": ("failed", "path_outside_image_root"),
        "vg-link": ("failed", "path_outside_image_root")}
    assert hostile.secret not in _tar_images(hostile.images)  # never read, so never stored
    replace = hostile.report["tables"]["replace"]
    assert replace["balanced"] and replace["rejected"] == 3
    assert replace["reject_reasons"] == {"path_outside_image_root": 3}
