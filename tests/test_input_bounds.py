"""Issue 15, input bounds: a caption past --max_caption_chars/--max_caption_words, an id outside int64 and a
record nested past --max_json_depth are dead letters with their reason in every table, never a crash or a hang."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.run import main
from tests.conftest import ARO_SAMPLE, SAMPLES, VL_SAMPLE, eval_sets_args, report

CAPTIONS = SAMPLES / "coco" / "captions_sample.json"
REPLAY = SAMPLES / "coco" / "hard_positives_replay.jsonl"
DEEP = 100_000


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth  # json.dumps cannot write it: it recurses


@pytest.fixture(scope="module")
def hostile_chain(tmp_path_factory):
    """--stage=all (train_negatives + hard_positives + train_set) on the sample captions plus a 1.2 MB caption,
    a caption id and an image id of 2**63, and a caption record nested 100,000 levels deep."""
    base = tmp_path_factory.mktemp("hostile_captions")
    data = json.loads(CAPTIONS.read_text())
    image = data["images"][0]["id"]
    data["annotations"] += [
        {"id": 70001, "image_id": image, "caption": "A man riding a horse on a beach. " * 36_000},
        {"id": 2**63, "image_id": image, "caption": "A man riding a horse on a beach."},
        {"id": 70002, "image_id": 2**63, "caption": "A man riding a horse on a beach."},
    ]
    text = json.dumps(data)
    deep = f'{{"id": 70003, "image_id": {image}, "caption": "A dog on a beach.", "extra": {nested(DEEP)}}}'
    captions = base / "captions.json"
    captions.write_text(text.replace('"annotations": [', f'"annotations": [{deep}, ', 1))
    out = base / "out"
    assert main(["--stage=all", f"--coco_captions={captions}", "--llm_engine=replay", f"--llm_replay={REPLAY}",
                 "--model=m", f"--cache_dir={base / 'cache'}", f"--output_dir={out}", "--progress_seconds=0",
                 "--positive_checks=rules", "--positive_types=replace,swap",  # the LLM's only, no WordNet: faster
                 "--negative_types=shuffle_nouns_and_adj"]) == 0
    return out, report(out)


def rejected(out: Path, table: str) -> dict[int, str]:
    return {r["source_index"]: r["reason"] for r in pq.read_table(out / "rejected" / f"{table}-00000-of-00001.parquet")
            .to_pylist() if r["reason"] != "request_failed"}


@pytest.mark.parametrize("table", ["train_negatives", "hard_positives", "train"])
def test_case12_a_huge_caption_is_a_dead_letter_not_a_spacy_crash(hostile_chain, table):
    out, folder_report = hostile_chain
    section = folder_report["tables"][table]
    assert section["balanced"] and section["reject_reasons"]["caption_too_long"] == 1
    assert rejected(out, table)[70001] == "caption_too_long"


@pytest.mark.parametrize("table", ["train_negatives", "hard_positives", "train"])
def test_case13_ids_outside_int64_are_dead_letters_and_the_counts_balance(hostile_chain, table):
    out, folder_report = hostile_chain
    section = folder_report["tables"][table]
    assert section["balanced"] and section["reject_reasons"]["id_out_of_range"] == 2
    letters = rejected(out, table)
    assert letters[70002] == "id_out_of_range"
    assert "id_out_of_range" in letters.values() and all(-2**63 <= k < 2**63 for k in letters)


def test_case14_a_record_nested_100000_deep_is_a_dead_letter(hostile_chain, tmp_path):
    out, folder_report = hostile_chain
    for table in ("train_negatives", "hard_positives", "train"):
        assert folder_report["tables"][table]["reject_reasons"]["json_too_deep"] == 1
        assert rejected(out, table)[70003] == "json_too_deep"
    # The same in a JSON-list source, for eval_sets: the record is rejected, the file is read.
    records = ARO_SAMPLE.read_text().rstrip().removesuffix("]")
    aro = tmp_path / "aro.json"
    aro.write_text(records + f', {{"image_path": "VG_100K/1.jpg", "deep": {nested(DEEP)}}}]')
    assert main(eval_sets_args(tmp_path / "out", None, aro, "--progress_seconds=0")) == 0
    swap = report(tmp_path / "out")["tables"]["swap"]
    assert swap["balanced"] and swap["reject_reasons"]["json_too_deep"] == 1


def test_case10_very_long_vl_checklist_captions_are_dead_letters(tmp_path):
    root = tmp_path / "vl"
    shutil.copytree(VL_SAMPLE, root)
    spatial = root / "Relation" / "vg" / "spatial.json"
    twenty_kb = " ".join(f"cat{i} on mat{i}" for i in range(1_000))  # 3,000 words, which hung the diff
    many_words = " ".join(["a cat on a mat"] * 80)  # 400 words in 1,200 characters
    records = json.loads(spatial.read_text()) + [
        ["VG_100K/1.jpg", {"POS": [caption], "NEG": [caption.replace(" on ", " under ")]}]
        for caption in (twenty_kb, many_words)]
    spatial.write_text(json.dumps(records))
    assert main(eval_sets_args(tmp_path / "out", root, None, "--progress_seconds=0")) == 0
    replace = report(tmp_path / "out")["tables"]["replace"]
    assert replace["balanced"] and replace["reject_reasons"]["caption_too_long"] == 2
    details = sorted(r["detail"] for r in pq.read_table(tmp_path / "out" / "rejected").to_pylist()
                     if r["reason"] == "caption_too_long")
    assert details == ["POS caption has 16,779 characters, more than --max_caption_chars=2,000",
                       "POS caption has 400 words, more than --max_caption_words=300"]


def test_case14_control_characters_are_escaped_in_the_samples_file():
    from pipeline.stages.captions import samples_markdown

    row = {"example_id": "e1", "caption": "a dog\n| on\x1b[2J a \x00mat\u202e", "hard_negative": "a cat"}
    text = samples_markdown("t", [("replace", [row])], ["caption", "hard_negative"], 0)
    line = next(l for l in text.splitlines() if l.startswith("| 1 |"))
    assert line == "| 1 | a dog\\n\\| on\\x1b[2J a \\x00mat\\u202e | a cat |"
    assert not any(c in text for c in "\x1b\x00\u202e")
