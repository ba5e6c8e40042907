"""Round 17 (probe18, on 924fa9c; the Q numbers are the probe's): the chain's parse table as plain data in a folder
the launcher makes (Q4, Q5, Q14, Q15: tests/test_parse_once.py), a backslash in a suite's real path (Q18), a run
into a tool's output folder (Q20)."""
from __future__ import annotations

from argparse import Namespace

import pytest

from conftest import SAMPLES


def test_q18_a_backslash_webdataset_would_drop_is_refused(tmp_path):
    from pipeline.train.clip import UsageError
    from pipeline.train.suites import root_flag

    root = tmp_path / "e\\v"
    root.mkdir()
    (tmp_path / "ev").mkdir()  # what braceexpand would read instead
    with pytest.raises(UsageError, match="which webdataset reads as URL syntax"):
        root_flag(Namespace(retrieval_root=str(root)), "retrieval_root")


@pytest.mark.parametrize("tool", ["evaluate", "finetune"])
def test_q20_a_run_into_a_tools_output_folder_is_refused_before_its_lock(tool, tmp_path, capsys):
    import os

    from pipeline.folder_lock import holder_record, lock_local
    from pipeline.run import main

    out = tmp_path / "ev"
    os.close(lock_local(str(out), holder_record(tool), "--out"))
    (out / "report.md").write_text("the tool's figures")
    code = main(["--stage=train_negatives", f"--coco_captions={SAMPLES / 'coco' / 'captions_sample.json'}",
                 f"--output_dir={out}", "--progress_seconds=0"])
    assert code == 2 and "output folder (its lock file says so)" in capsys.readouterr().err
    assert (out / "report.md").read_text() == "the tool's figures" and not (out / "train_negatives").exists()


@pytest.mark.parametrize("text", ["\n" * 10_000, "a photo of a {c}." + "x" * 2000 + "\n"])
def test_q21_templates_past_what_a_suite_publishes_are_refused(text, tmp_path):
    from pipeline.train.clip import UsageError
    from pipeline.train.suites.zeroshot import TEMPLATES, check_templates

    (tmp_path / TEMPLATES).write_text(text)
    with pytest.raises(UsageError, match="more than"):
        check_templates(tmp_path)


def test_q22_every_sugarcrepe_id_given_twice_is_skipped(tmp_path):
    from pipeline.train.suites.ranking import sugarcrepe_rows

    entry = '{"filename": "x.jpg", "caption": "a cat", "negative_caption": "a dog"}'
    (tmp_path / "add_att.json").write_text(f'{{"100": {entry}, "101": {entry}, "102": {entry}, "100": {entry}, '
                                           f'"102": {entry}, "104": {entry}}}')
    rows, _, bad = sugarcrepe_rows(tmp_path)
    assert [r["example_id"] for r in rows] == ["add_att:101", "add_att:104"] and bad == {"repeated_field": 2}


@pytest.mark.parametrize("planted", ["fetch_list_folder", "tmp_file", "tmp_user_files", "tmp_link"])
def test_q26_q28_what_sits_in_shards_under_img2datasets_names_is_what_it_writes(planted, tmp_path):
    import os
    from types import SimpleNamespace

    from pipeline.options import UsageError
    from pipeline.stages.images import check_images_path

    shards = tmp_path / "out" / "images" / "shards"
    shards.mkdir(parents=True)
    (tmp_path / "mine").mkdir()
    if planted == "fetch_list_folder":
        (shards / "_fetch_list.parquet").mkdir()
    elif planted == "tmp_file":
        (shards / "_tmp").write_text("a note")
    elif planted == "tmp_user_files":
        (shards / "_tmp" / "mine").mkdir(parents=True)
        (shards / "_tmp" / "0.feather").write_bytes(b"")
    else:
        os.symlink(tmp_path / "mine", shards / "_tmp")
    opts = SimpleNamespace(output_dir=str(tmp_path / "out"), images_dir=None)
    with pytest.raises(UsageError, match="shards/_(fetch_list.parquet|tmp) "):
        check_images_path(opts)
    if planted == "tmp_user_files":  # a leftover of img2dataset's own passes
        os.rmdir(shards / "_tmp" / "mine")
        check_images_path(opts)


@pytest.mark.parametrize("reader", ["replace_table", "scheduler_file", "lock_holder"])
def test_q29_q31_json_nested_past_the_parsers_depth_is_one_line(reader, tmp_path):
    import fcntl
    import os

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000)
    if reader == "replace_table":
        from pipeline.perturb.eval_replace import ReplaceTable

        with pytest.raises(ValueError, match="nested too deeply"):
            ReplaceTable.load(deep)
    elif reader == "scheduler_file":
        from pipeline.options import UsageError
        from pipeline.run import _check_scheduler_file

        with pytest.raises(UsageError, match="not a running Dask scheduler's file"):
            _check_scheduler_file(str(deep))
    else:
        from pipeline.folder_lock import LOCK_FILE, LockRefused, holder_record, lock_local

        out = tmp_path / "out"
        out.mkdir()
        (out / LOCK_FILE).write_text("[" * 4000)
        held = os.open(out / LOCK_FILE, os.O_RDWR)
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            with pytest.raises(LockRefused, match="is being written by another run"):
                lock_local(str(out), holder_record("train_negatives"), "--output_dir")
        finally:
            os.close(held)


def test_q32_q34_ranking_records_whose_texts_are_not_strings_are_bad_records(tmp_path):
    from pipeline.train.suites.ranking import sugarcrepe_rows, vl_checklist_rows

    vl = tmp_path / "vl" / "Attribute" / "vg"
    vl.mkdir(parents=True)
    (vl / "color.json").write_text('[["a.jpg", {"POS": "a white ball", "NEG": ["a red ball"]}], '
                                   '["b.jpg", {"POS": ["a ball"], "NEG": "a green ball"}], '
                                   '["c.jpg", {"POS": ["a cat"], "NEG": ["a dog"]}]]')
    rows, bad = vl_checklist_rows(tmp_path / "vl")
    assert [r["options"] for r in rows] == [["a cat", "a dog"]] and bad == {"bad_record": 2}
    sugar = tmp_path / "sugar"
    sugar.mkdir()
    (sugar / "add_att.json").write_text('{"100": {"filename": "x.jpg", "caption": "a cat", "negative_caption": '
                                        '["a dog"]}, "102": {"filename": "x.jpg", "caption": 7, "negative_caption": '
                                        '"a dog"}, "103": {"filename": "x.jpg", "caption": "a cat", '
                                        '"negative_caption": "a dog"}}')
    rows, _, bad = sugarcrepe_rows(sugar)
    assert [r["example_id"] for r in rows] == ["add_att:103"] and bad == {"bad_record": 2}


@pytest.mark.parametrize("kind", ["staging", "spill"])
def test_q36_q37_no_run_commits_into_a_folder_a_run_removes_whole(kind, tmp_path, capsys):
    from pipeline.io import spill
    from pipeline.run import main
    from pipeline.tables.folders import STAGING_MARK, STAGING_PREFIX

    if kind == "staging":
        dead = tmp_path / f"{STAGING_PREFIX}all-0123456789ab"
        dead.mkdir()
        (dead / STAGING_MARK).write_text("")
    else:
        dead = tmp_path / f"{spill.PREFIX}train_negatives-0123456789ab"
        dead.mkdir()
        (dead / spill.MARK).write_text("")
    code = main(["--stage=train_negatives", f"--coco_captions={SAMPLES / 'coco' / 'captions_sample.json'}",
                 f"--output_dir={dead / 'mine'}", "--progress_seconds=0"])
    assert code == 2 and "write into a folder of its own" in capsys.readouterr().err
    assert not (dead / "mine").exists()


def test_q39_q40_several_workers_as_threads_are_refused(tmp_path, capsys):
    from pipeline.run import main

    code = main(["--stage=train_negatives", f"--coco_captions={SAMPLES / 'coco' / 'captions_sample.json'}",
                 f"--output_dir={tmp_path / 'out'}", "--direct_num_workers=2", "--direct_running_mode=multi_threading"])
    assert code == 2 and "not safe across threads" in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("text", ["0" * 31 + "1" + "0" * 7, "1" + " " * 100, "1_0"])
def test_q47_the_shard_count_is_read_whole_as_clip_benchmark_reads_it(text, tmp_path):
    from pipeline.train.clip import UsageError
    from pipeline.train.suites.zeroshot import is_wds_folder

    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "0.tar").write_bytes(b"")
    (tmp_path / "test" / "nshards.txt").write_text(text)
    with pytest.raises(UsageError, match="does not hold test/0.tar to test/N-1.tar"):
        is_wds_folder(tmp_path)
    (tmp_path / "test" / "nshards.txt").write_text("1\n")
    assert is_wds_folder(tmp_path)
