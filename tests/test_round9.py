"""Round 9 (probe9): links planted inside the folders hardpos builds while it builds them are refused or replaced,
never written through (T1-T3 publish's release, T4 the LLM cache, T6-T8 the images folder); no stage writes into a
published folder's data/ (T9); a report or manifest nested past Python's recursion limit is one line (T28, T31); the
images folder is never a run folder (T33). T16 (an image from a URL that differs only in a query value) is in
test_round8.py::test_s46_*."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import pipeline.stages.publish as publish_stage
from pipeline.options import UsageError
from pipeline.publish.layout import write_run_folder
from pipeline.run import main
from pipeline.tables.folders import NEXT, PublishError
from pipeline.tables.load import load_table
from tests.image_fixtures import order_rows, order_run

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CAPTIONS = ROOT / "samples" / "coco" / "captions_sample.json"
REPLAY = ROOT / "samples" / "coco" / "hard_positives_replay.jsonl"


@pytest.fixture
def out(tmp_path) -> Path:
    return order_run(tmp_path)


@pytest.mark.parametrize("planted", ["data", "data/order_eval", "README.md"])
def test_t1_t3_a_link_planted_in_the_release_being_built_is_never_written_through(planted, out, tmp_path,
                                                                                  monkeypatch, capsys):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("KEEP")
    place, done = publish_stage.place, []

    def plant_first(src, dest, base, *checked):
        if not done:
            done.append(True)
            link = Path(base) / planted
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(victim / "keep.txt" if planted == "README.md" else victim)
        return place(src, dest, base, *checked)

    monkeypatch.setattr(publish_stage, "place", plant_first)
    code = main(["--stage=publish", f"--output_dir={out}"])
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"] and (victim / "keep.txt").read_text() == "KEEP"
    hub = out / "hub"
    assert not any(p.is_symlink() for p in hub.rglob("*"))
    if code == 0:  # the link at README.md's name was replaced by the card
        assert planted == "README.md" and load_table(str(hub), "order_eval").num_rows == 3
    else:
        assert code == 2 and "not a folder publish made" in capsys.readouterr().err


def test_t2_a_link_in_a_release_left_aside_is_never_switched_in(out, tmp_path):
    assert main(["--stage=publish", f"--output_dir={out}"]) == 0
    hub = out / "hub"
    (tmp_path / "victim").mkdir()
    (hub / NEXT).mkdir()
    (hub / NEXT / "data").symlink_to(tmp_path / "victim")
    (hub / NEXT / ".hardpos-publish.json").write_text((hub / ".hardpos-publish.json").read_text())
    with pytest.raises(PublishError, match="a symbolic link, which publish never makes nor switches in"):
        publish_stage.finish_switch(hub)
    assert not (hub / "data").is_symlink()


def test_t4_a_linked_llm_cache_in_the_output_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "victim").mkdir()
    (out / "llm_cache").symlink_to(tmp_path / "victim")
    args = ["--stage=hard_positives", f"--coco_captions={SAMPLE_CAPTIONS}", "--llm_engine=replay", "--model=m",
            f"--llm_replay={REPLAY}", "--positive_types=replace", f"--output_dir={out}", "--progress_seconds=0"]
    assert main(args) == 2
    assert "is a symbolic link in the output folder" in capsys.readouterr().err
    (out / "llm_cache").unlink()
    (out / "llm_cache").mkdir()
    (out / "llm_cache" / "hard_positives").symlink_to(tmp_path / "victim")
    assert main(args) == 2
    assert "hard_positives/ is a symbolic link" in capsys.readouterr().err
    assert list((tmp_path / "victim").iterdir()) == []


@pytest.mark.parametrize("planted", ["shards", "index", "report.json", "settings.json"])
def test_t6_t8_a_link_inside_the_images_folder_is_refused(planted, tmp_path):
    from argparse import Namespace

    from pipeline.stages.images import check_images_path

    out = tmp_path / "out"
    (out / "images").mkdir(parents=True)
    (tmp_path / "victim").mkdir()
    (out / "images" / planted).symlink_to(tmp_path / "victim")
    with pytest.raises(UsageError, match=f"{planted} is a symbolic link"):
        check_images_path(Namespace(output_dir=str(out), images_dir=None))


def test_t33_the_images_folder_is_never_a_run_folder(out):
    from argparse import Namespace

    from pipeline.stages.images import check_images_path

    for images_dir in (out, out / "run"):
        with pytest.raises(UsageError, match="is a run folder"):
            check_images_path(Namespace(output_dir=str(out), images_dir=str(images_dir)))


def test_t9_no_stage_writes_into_a_published_folders_data(out, capsys):
    assert main(["--stage=publish", f"--output_dir={out}"]) == 0
    capsys.readouterr()
    assert main(["--stage=order_eval", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={out / 'hub' / 'data'}",
                 "--progress_seconds=0"]) == 2
    assert "is inside" in capsys.readouterr().err
    assert load_table(str(out / "hub"), "order_eval").num_rows == 3


def test_t28_t31_a_report_or_manifest_nested_too_deep_is_one_line(out, capsys):
    deep = "[" * 100_000 + "]" * 100_000
    (out / "run" / "report.json").write_text('{"tables": ' + deep + "}")
    with pytest.raises(PublishError, match="unreadable report"):
        load_table(str(out / "run"), "order_eval")
    assert main(["--stage=publish", f"--output_dir={out}"]) == 2
    assert "Traceback" not in capsys.readouterr().err
    hub = out.parent / "hub2"
    write_run_folder(out.parent / "fresh" / "run", "order_eval", order_rows(2, "fresh"))
    assert main(["--stage=publish", f"--output_dir={out.parent / 'fresh'}", f"--publish_dir={hub}"]) == 0
    (hub / ".hardpos-publish.json").write_text('{"files": ' + deep + "}")
    with pytest.raises(PublishError, match="not a manifest that publish wrote"):
        load_table(str(hub), "order_eval")
    json.loads("{}")  # the parser still works after the deep one


@pytest.mark.parametrize("content", ["", "[]", "{"])
def test_t43_a_damaged_images_settings_file_is_one_line(content, tmp_path):
    from pipeline.publish.images import settings_problem

    (tmp_path / "settings.json").write_text(content)
    assert "the images stage did not write it this way" in settings_problem(str(tmp_path), "webdataset", 0)


def test_t35_the_images_folder_is_never_in_a_published_folder(out):
    from argparse import Namespace

    from pipeline.stages.images import check_images_path

    assert main(["--stage=publish", f"--output_dir={out}"]) == 0
    for images_dir in (out / "hub", out / "hub" / "images"):
        with pytest.raises(UsageError, match="is in the published folder"):
            check_images_path(Namespace(output_dir=str(out), images_dir=str(images_dir)))


def test_round10_a_published_folder_named_through_an_alias_is_still_one(out, tmp_path, capsys):
    """probe10 U20, U21, U23: a link to a release's data/ named as --output_dir or --images_dir."""
    from pipeline.tables.folders import published_folder_holding

    assert main(["--stage=publish", f"--output_dir={out}"]) == 0
    (tmp_path / "alias").symlink_to(out / "hub" / "data")
    assert published_folder_holding(tmp_path / "alias" / "run") == (out / "hub").resolve()
    assert main(["--stage=order_eval", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={tmp_path / 'alias'}",
                 "--progress_seconds=0"]) == 2
    assert "a published folder" in capsys.readouterr().err


def test_round10_no_dotdot_in_the_finetune_table(out):
    """probe10 U15, U18: <hub>/data/train/../train read as a user's own folder, unchecked."""
    from pipeline.train import replace_views

    with pytest.raises(PublishError, match="without '..'"):
        replace_views.train_table(str(out / "run" / ".." / "run"))


def test_round10_a_captions_url_is_redacted_in_its_error(tmp_path, capsys):
    """probe10 U30: --captions with a password and a token printed whole."""
    assert main(["--stage=train_negatives", "--captions=https://u:PASSPROBE@127.0.0.1:9/x.jsonl?token=QTOKPROBE",
                 f"--output_dir={tmp_path / 'o'}", "--progress_seconds=0"]) == 2
    err = capsys.readouterr().err
    assert "PASSPROBE" not in err and "QTOKPROBE" not in err
