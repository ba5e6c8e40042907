"""Round 8 (probe8): a config folder holds one shard set (S1-S3); --finetune_table is the train table, never through a
link nor another table's folder (S4, S5); publish copies the bytes it checked, through no link, into the folder it
opened (S6-S8, S13); --resume keeps the table it began on (S12); the replay engine's answers are its file's (S14); a
table that does not check stops the evaluator (S20); a stage never writes into a published folder (S23); load_table
stays memory-mapped (S32); --coco_captions is a file, not a pattern (S34); --images_dir is no link (S44); an image
URL's secrets stay out of reports and its query stays a query (S9, S10)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

import pytest

import pipeline.stages.publish as publish_stage
from pipeline.options import UsageError
from pipeline.publish.layout import write_run_folder
from pipeline.run import main
from pipeline.tables.folders import PublishError
from pipeline.tables.load import load_table
from tests.image_fixtures import order_rows, schema_row

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CAPTIONS = ROOT / "samples" / "coco" / "captions_sample.json"
REPLAY = ROOT / "samples" / "coco" / "hard_positives_replay.jsonl"


def train_rows(n: int, positive: str = "a dog seated on a bench") -> list[dict]:
    return [schema_row("train", example_id=f"{i:016x}", caption_id=i, caption="a dog sitting on a bench",
                       hard_positive=positive) for i in range(n)]


@pytest.fixture
def published(tmp_path, capsys) -> Path:
    out = tmp_path / "out"
    write_run_folder(out / "run", "order_eval", order_rows(3, "own"))
    assert main(["--stage=publish", f"--output_dir={out}"]) == 0
    capsys.readouterr()
    return out / "hub"


def _without_manifest(folder: Path) -> Path:
    for own in folder.glob(".hardpos*"):
        own.unlink()
    return folder


def test_s1_a_stale_shard_of_an_earlier_upload_is_refused_not_read(published, tmp_path):
    stale = write_run_folder(tmp_path / "stale", "order_eval", order_rows(5, "stale"))
    shard = next((stale / "order_eval").glob("*.parquet"))
    shutil.copyfile(shard, published / "data" / "order_eval" / "test-00001-of-00003.parquet")
    with pytest.raises(PublishError, match="a shard of another set"):
        load_table(str(_without_manifest(published)), "order_eval")


def test_s2_s3_a_shard_of_another_split_or_name_is_refused(published):
    folder = _without_manifest(published) / "data" / "order_eval"
    own = next(folder.glob("*.parquet"))
    shutil.copyfile(own, folder / "zzz-00000-of-00001.parquet")
    with pytest.raises(PublishError, match="a shard of another set"):
        load_table(str(published), "order_eval")
    (folder / "zzz-00000-of-00001.parquet").rename(folder / "odd name.parquet")
    with pytest.raises(PublishError, match="not a shard name"):
        load_table(str(published), "order_eval")


def test_s4_s5_the_finetune_table_is_the_train_table_never_a_link_or_another_table(tmp_path):
    from pipeline.train import replace_views

    run = write_run_folder(tmp_path / "run", "train", train_rows(2))
    write_run_folder(run, "order_eval", order_rows(2, "other"))
    assert replace_views.train_table(str(run / "train"))[1].config == "train"
    with pytest.raises(PublishError, match="not of its train table"):
        replace_views.train_table(str(run / "order_eval"))
    with pytest.raises(PublishError, match="not of its train table"):
        replace_views.train_table(str(run / "order_eval" / "*.parquet"))
    outside = write_run_folder(tmp_path / "outside", "train", train_rows(3, "a dog lying on a bench"))
    (run / "train").rename(tmp_path / "moved")
    (run / "train").symlink_to(outside / "train")
    for named in (run / "train", f"{run}/train/", f"{run}/train/*.parquet"):
        with pytest.raises(PublishError, match="a symbolic link"):
            replace_views.train_table(str(named))


@pytest.mark.parametrize("how", ["folder", "shard"])
def test_s7_s8_publish_places_the_bytes_it_checked_or_refuses(how, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    run = write_run_folder(out / "run", "order_eval", order_rows(3, "own"))
    victim = write_run_folder(tmp_path / "victim", "order_eval", order_rows(3, "victim"))
    build = publish_stage._build_aside

    def swapped_after_the_checks(*args, **kwargs):
        if how == "folder":
            (run / "order_eval").rename(run / "moved")
            (run / "order_eval").symlink_to(victim / "order_eval")
        else:
            shard = next((run / "order_eval").glob("*.parquet"))
            shutil.copyfile(next((victim / "order_eval").glob("*.parquet")), shard.with_name(".new"))
            os.replace(shard.with_name(".new"), shard)
        return build(*args, **kwargs)

    monkeypatch.setattr(publish_stage, "_build_aside", swapped_after_the_checks)
    assert main(["--stage=publish", f"--output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert ("a symbolic link" if how == "folder" else "its sha256 differs") in err and "Traceback" not in err
    assert not (out / "hub" / "data").exists()


def test_publish_copies_so_a_later_change_of_the_run_folder_leaves_the_release_alone(published):
    shard = next((published.parent / "run" / "order_eval").glob("*.parquet"))
    placed = published / "data" / "order_eval" / shard.name
    assert os.stat(shard).st_ino != os.stat(placed).st_ino and os.stat(placed).st_nlink == 1


def test_s6_publish_refuses_a_link_below_the_output_folder_named_through_an_alias(tmp_path, capsys):
    out = tmp_path / "out"
    write_run_folder(out / "run", "order_eval", order_rows(3, "own"))
    (tmp_path / "vic").mkdir()
    (out / "sub").symlink_to(tmp_path / "vic")
    (tmp_path / "alias").symlink_to(out)
    for output_dir, publish_dir in ((out, tmp_path / "alias" / "sub" / "hub"), (tmp_path / "alias", out / "sub" / "hub")):
        assert main(["--stage=publish", f"--output_dir={output_dir}", f"--publish_dir={publish_dir}"]) == 2
        assert "is a symbolic link in the output folder" in capsys.readouterr().err
    assert list((tmp_path / "vic").iterdir()) == []


def test_s13_a_link_planted_after_the_check_is_not_written_through(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    write_run_folder(out / "run", "order_eval", order_rows(3, "own"))
    (tmp_path / "vic").mkdir()
    check = publish_stage.check_publish_path

    def planted_after(target, output_dir):
        check(target, output_dir)
        if not (out / "sub").exists():
            (out / "sub").symlink_to(tmp_path / "vic")

    monkeypatch.setattr(publish_stage, "check_publish_path", planted_after)
    assert main(["--stage=publish", f"--output_dir={out}", f"--publish_dir={out / 'sub' / 'hub'}"]) == 2
    assert "is a symbolic link in the output folder" in capsys.readouterr().err
    assert list((tmp_path / "vic").iterdir()) == []


def test_s12_resume_refuses_a_table_with_no_fingerprint_after_one_with(tmp_path):
    from pipeline.train.checkpoint import check_resume_args

    saved = {"rows_kept": 4, "args": {}, "train_table": {"data": "a", "fingerprint": "f" * 64, "shards": 1}}
    args = argparse.Namespace(data="b")
    for now in ({"data": "b", "fingerprint": None}, {"data": "b", "fingerprint": "e" * 64}):
        with pytest.raises(ValueError, match="is not the train table the checkpoint was trained on"):
            check_resume_args(saved, args, 4, now)
    hub = {"rows_kept": 4, "args": {}, "train_table": {"data": "ORG/NAME", "fingerprint": None, "shards": None}}
    with pytest.raises(ValueError, match="is not the train table"):
        check_resume_args(hub, args, 4, {"data": "b", "fingerprint": None})


def test_s20_a_default_table_that_does_not_check_stops_the_evaluator(published):
    from pipeline.train.evaluate import load_rows

    shard = next((published / "data" / "order_eval").glob("*.parquet"))
    data = bytearray(shard.read_bytes())
    data[200] ^= 1
    shard.write_bytes(bytes(data))
    args = argparse.Namespace(data=str(published), table_list=["order_eval", "swap_eval"], tables_explicit=False,
                              split=None, limit=None, seed=0)
    with pytest.raises(ValueError, match="order_eval: PublishError: .*its sha256 differs"):
        load_rows(args)


def test_s23_a_stage_refuses_a_published_folder_as_its_output(published, capsys):
    assert main(["--stage=order_eval", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={published}",
                 "--progress_seconds=0"]) == 2
    assert "is a published folder" in capsys.readouterr().err
    assert not (published / "report.json").exists()


def test_s32_a_local_table_is_memory_mapped_from_a_private_cache(published):
    table = load_table(str(published), "order_eval")
    assert table.cache_files and all("hardpos-load-" in f["filename"] for f in table.cache_files)


def test_s34_coco_captions_is_one_file_taken_as_written(tmp_path):
    from types import SimpleNamespace

    from pipeline.sources import corpus

    (tmp_path / "coco[1].json").write_text(SAMPLE_CAPTIONS.read_text())
    (tmp_path / "coco1.json").write_text(json.dumps({"images": [], "annotations": []}))
    opts = SimpleNamespace(captions=None, coco_captions=str(tmp_path / "coco[1].json"), captions_format="coco",
                           caption_column=None, id_column=None, image_column=None)
    with corpus.one_plan():
        files = corpus.input_files(opts)
    assert [f.path for f in files] == [str(tmp_path / "coco[1].json")]


def test_s10_an_image_root_with_a_query_keeps_it_a_query():
    from pipeline.publish.images import vg_url

    assert vg_url("http://h/vg/?sig=abc&x=1", "VG_100K/1.jpg") == "http://h/vg/VG_100K/1.jpg?sig=abc&x=1"
    assert vg_url("http://h/vg", "VG_100K/1.jpg") == "http://h/vg/VG_100K/1.jpg"


def test_s44_the_images_stage_refuses_a_linked_images_folder(tmp_path):
    from pipeline.stages.images import check_images_path

    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "vic").mkdir()
    (out / "images").symlink_to(tmp_path / "vic")
    opts = SimpleOpts(output_dir=str(out), images_dir=None)
    with pytest.raises(UsageError, match="is a symbolic link"):
        check_images_path(opts)
    (out / "sub").symlink_to(tmp_path / "vic")
    with pytest.raises(UsageError, match="is a symbolic link in the output folder"):
        check_images_path(SimpleOpts(output_dir=str(out), images_dir=str(out / "sub" / "images")))


class SimpleOpts(argparse.Namespace):
    pass


def test_s14_the_replay_engine_answers_from_its_own_file_not_an_earlier_ones_cache(tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    echoes = tmp_path / "echoes.jsonl"  # every answer the caption itself: a model that changed nothing
    lines = [json.loads(line) for line in REPLAY.read_text().splitlines() if line.strip()]
    echoes.write_text("".join(json.dumps({**e, "text": e["caption"]}) + "\n" for e in lines))
    common = ["--stage=hard_positives", f"--coco_captions={SAMPLE_CAPTIONS}", "--llm_engine=replay", "--model=m",
              "--positive_types=replace,swap", f"--output_dir={out}", "--progress_seconds=0", "--allow_empty"]

    def replay_rows() -> int:
        rows = pq.read_table(next((out / "hard_positives").glob("*.parquet"))).to_pylist()
        return sum(r["llm_engine"] == "replay" for r in rows)

    assert main([*common, f"--llm_replay={REPLAY}"]) == 0
    assert replay_rows() > 0
    assert main([*common, f"--llm_replay={echoes}"]) == 0
    assert replay_rows() == 0  # the echoes are refused; no answer of the first file comes back from the cache


def test_s46_the_trainer_refuses_an_image_fetched_from_another_url(tmp_path):
    from PIL import Image

    from pipeline.publish.images import url_sha256
    from pipeline.train.images import ImageLookup, ImageMissing

    class Found:
        image = Image.new("RGB", (4, 4), "red")

    class Shards(dict):
        def index_row(self, example_id):
            return {"url": "http://***@h/a/1.jpg?sig=***", "url_sha256": url_sha256("http://user:pw@h/a/1.jpg?sig=x")}

    lookup = object.__new__(ImageLookup)
    lookup.root, lookup.shards, lookup.corpus = tmp_path, Shards({"e1": Found()}), None
    assert lookup({"example_id": "e1", "image_url": "http://user:pw@h/a/1.jpg?sig=x"}, crop=False).size == (4, 4)
    with pytest.raises(ImageMissing):  # a query value that differs is another url (probe9 T16: ?id=a, ?id=b)
        lookup({"example_id": "e1", "image_url": "http://user:pw@h/a/1.jpg?sig=y"}, crop=False)
    with pytest.raises(ImageMissing, match=r"fetched from http://\*\*\*@h/a/1.jpg\?sig=\*\*\*, not the row's "
                                           r"http://\*\*\*@h/b/1.jpg"):
        lookup({"example_id": "e1", "image_url": "http://user:pw@h/b/1.jpg"}, crop=False)
