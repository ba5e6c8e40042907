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
