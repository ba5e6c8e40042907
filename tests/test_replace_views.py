"""REPLACE three ways (pipeline/train/replace_views.py): which of the sample's REPLACE rows the held_out view keeps
for each source of finetuning substitutions (a train table, a substitutions file, what a checkpoint records), which
the strict view keeps and when it is stale, and the three views end to end in eval.json, eval.md and the printed
table, with the figures recomputed from scores.parquet."""
import json
from collections import Counter

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from pipeline.train import evaluate, replace_views
from tests.conftest import rows_of, write_run_folder

# (caption, hard_positive, positive_type) of the finetuning table, and what each reaches in the sample's REPLACE rows
FINETUNE = [
    ("a cat sits on a chair", "a cat is seated on a chair", "replace"),  # inflected: sitting -> seated, both subsets
    ("a ball beneath a table", "a ball under a table", "replace"),  # the other way round: under -> beneath
    ("a man wearing a red cap", "a man in a red cap", "replace"),  # wearing -> in, and wears -> in
    ("a man riding a horse", "a man on a horse", "swap"),  # riding -> on: no REPLACE entry
    ("two dogs on the grass", "two dogs on the grass", "swap"),  # no change, no substitution
]
# The sample's REPLACE rows those substitutions reach, as (subset, category, from, to): count.
REACHED = {("attribute", "action", "sitting", "seated"): 1, ("relation", "action", "sitting", "seated"): 1,
           ("relation", "spatial", "under", "beneath"): 1, ("relation", "action", "wearing", "in"): 2,
           ("relation", "action", "wears", "in"): 1}
# The sample's rows of the five entries judged true (relation sitting -> seated was not).
STRICT = {("attribute", "action", "sitting", "seated"): 1, ("attribute", "size", "big", "large"): 1,
          ("attribute", "size", "large", "big"): 1, ("relation", "action", "wearing", "in"): 2,
          ("relation", "spatial", "under", "beneath"): 1}
SUBSTITUTIONS_FILE = "# the finetuning data's substitutions\nsits -> is seated\n\nbeneath -> under  # reversed\n" \
                     "wearing -> in\n"


def entry(row: dict) -> tuple:
    return row["subset"], row["category"], row["replaced_from"], row["replaced_to"]


def left_out(view: replace_views.View, rows: list[dict]) -> Counter:
    return Counter(entry(r) for r in rows if not view.keep(r))


def train_row(k: int, caption: str, positive: str, positive_type: str) -> dict:
    return {"example_id": f"ft{k:03d}", "caption_id": 500 + k, "image_id": k, "key": str(500 + k),
            "file_name": f"{k:012d}.jpg", "image_url": None, "source_file": "captions_train2017.json",
            "caption": caption,
            "hard_positive": positive, "positive_type": positive_type, "hard_negative": f"not {caption}",
            "negative_type": "replace", "positive_generator": None, "positive_model": "test",
            "positive_prompt_sha256": "0" * 64, "negative_generator": "replace/1", "negative_source": "caption",
            "seed": 0}


@pytest.fixture(scope="module")
def replace_rows(sample_output):
    rows = rows_of(sample_output, "replace")
    assert Counter(entry(r) for r in rows if entry(r) in REACHED) == REACHED  # the sample holds what is counted
    return rows


@pytest.fixture(scope="module")
def finetune_run(tmp_path_factory):
    """A run folder holding the train table above (train/train-00000-of-00001.parquet)."""
    return write_run_folder(tmp_path_factory.mktemp("ft") / "run", "train",
                            [train_row(k, *row) for k, row in enumerate(FINETUNE)])


def checkpoint(path, **state):
    import torch

    torch.save({"model": {}, **state}, path)
    return str(path)


# ------------------------------------------------------------------------------------------------- held out

@pytest.mark.parametrize("form", ["shard folder", "glob", "run folder", "substitutions file"])
def test_held_out_leaves_out_the_rows_the_finetuning_substitutions_reach_either_way_and_inflected(
        form, finetune_run, replace_rows, tmp_path):
    table = {"shard folder": str(finetune_run / "train"), "glob": str(finetune_run / "train" / "*.parquet"),
             "run folder": str(finetune_run)}.get(form)
    listed = None
    if form == "substitutions file":
        listed = tmp_path / "substitutions.txt"
        listed.write_text(SUBSTITUTIONS_FILE)
    view = replace_views.held_out(table, listed and str(listed), pretrained="")
    assert left_out(view, replace_rows) == REACHED
    assert sum(map(view.keep, replace_rows)) == len(replace_rows) - 6
    assert view.info["substitutions"] == (3 if listed else 4)  # riding -> on counts, reaching nothing
    assert view.info["source"].startswith("--finetune_table=" if table else "--finetune_substitutions=")


def test_held_out_from_the_train_table_a_checkpoint_records_with_its_type_filters(finetune_run, replace_rows,
                                                                                tmp_path):
    from pipeline.tables.load import local_table
    from pipeline.train.finetune import train_table_record

    args = {"data": str(finetune_run), "positive_types": "all", "negative_types": "all"}
    # the table's fingerprint, as the trainer records it: held_out reads the table only while it is that one
    record = train_table_record(str(finetune_run), local_table(str(finetune_run), "train"))
    finetuned = checkpoint(tmp_path / "final.pt", args=args, train_table=record)
    view = replace_views.held_out(None, None, finetuned)
    assert left_out(view, replace_rows) == REACHED
    assert str(finetune_run) in view.info["source"]
    # A WiSE-FT checkpoint names the finetuned one, whose run read the table.
    patched = checkpoint(tmp_path / "patched.pt", alpha=0.5, pretrained="", finetuned=finetuned)
    assert left_out(replace_views.held_out(None, None, patched), replace_rows) == REACHED
    # The run kept only swap positives: riding -> on alone was trained on, and it reaches no REPLACE row.
    swap_only = checkpoint(tmp_path / "swap.pt", args={**args, "positive_types": "swap"}, train_table=record)
    view = replace_views.held_out(None, None, swap_only)
    assert view.info["substitutions"] == 1 and left_out(view, replace_rows) == {}


@pytest.mark.parametrize("pretrained, reason", [
    ("", "--pretrained=(random init) is not a checkpoint file"),
    ("openai", "--pretrained=openai is not a checkpoint file"),
    ("no_args.pt", "records no train table"),
    ("gone.pt", "/no/such/run, is not a folder here"),
])
def test_held_out_without_a_source_is_not_computed_with_one_line(pretrained, reason, tmp_path):
    checkpoint(tmp_path / "no_args.pt", step=3)
    checkpoint(tmp_path / "gone.pt", args={"data": "/no/such/run", "positive_types": "all"})
    view = replace_views.held_out(None, None, str(tmp_path / pretrained) if pretrained.endswith(".pt") else pretrained)
    assert view.keep is None
    assert view.info["reason"].startswith("no finetuning substitutions: --finetune_table and --finetune_substitutions "
                                          "not given, and ")
    assert reason in view.info["reason"] and "\n" not in view.info["reason"]


# --------------------------------------------------------------------------------------------------- strict

def test_strict_keeps_the_rows_of_the_entries_judged_true(replace_rows):
    view = replace_views.strict()
    assert Counter(entry(r) for r in replace_rows if view.keep(r)) == STRICT
    assert (view.info["entries_read"], view.info["true_entries"]) == (38, 5)
    assert view.info["table_sha256_matches"] and not view.info["stale"] and view.info["stale_reason"] is None


def test_strict_is_stale_when_its_table_sha256_is_not_the_tables_and_still_filters(replace_rows, tmp_path):
    read = json.loads(replace_views.STRICT_PAIRS.read_text())
    stale_copy = tmp_path / "pairs.json"
    stale_copy.write_text(json.dumps({**read, "table_sha256": "0" * 64}))
    view = replace_views.strict(pairs_path=stale_copy)
    assert view.info["stale"] and not view.info["table_sha256_matches"]
    assert "is not the sha256 of pipeline/perturb/data/replace_table.json" in view.info["stale_reason"]
    assert Counter(entry(r) for r in replace_rows if view.keep(r)) == STRICT
    # Rows built from another table: the verdicts are not about them either.
    other_rows = replace_views.strict(row_table_sha256=["f" * 64])
    assert other_rows.info["stale"] and other_rows.info["table_sha256_matches"]
    assert "REPLACE rows were built from another table (sha256 ffffffffffff…)" in other_rows.info["stale_reason"]


# ---------------------------------------------------------------------------------------------- end to end

@pytest.fixture(scope="module")
def images(replace_rows, tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    for k, row in enumerate(replace_rows):
        (root / row["image_path"]).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (48, 40), (40 * (k % 6), 90, 200 - 30 * (k % 5))).save(root / row["image_path"], "JPEG")
    return root


def run(sample_output, images, out, *extra) -> int:
    return evaluate.main(["--model=hardpos-tiny", "--pretrained=", f"--data={sample_output}", f"--images={images}",
                          "--tables=replace", f"--out={out}", "--workers=0", "--bootstrap=200", "--seed=3", *extra])


def recomputed(scores: list[dict]) -> dict:
    c, n, p = (np.array([r[k] for r in scores]) for k in ("s_c", "s_n", "s_p"))
    return {"original_accuracy": float(np.mean(c > n)), "augmented_accuracy": float(np.mean((c > n) & (p > n))),
            "brittleness": float(np.mean(((c > n) & (n > p)) | ((p > n) & (n > c))))}


def test_three_views_in_eval_json_markdown_and_the_printed_table(sample_output, images, finetune_run, replace_rows,
                                                                 tmp_path, capsys):
    out = tmp_path / "out"
    assert run(sample_output, images, out, f"--finetune_table={finetune_run / 'train'}") == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "eval.json").read_text())
    views = result["replace_views"]
    assert list(views) == ["released", "held_out", "strict"]
    assert [(v["status"], v["rows"], v["of"]) for v in views.values()] == [("ok", 38, 38), ("ok", 32, 38),
                                                                          ("ok", 6, 38)]
    assert views["released"]["set"] == result["sets"]["REPLACE"]
    assert views["released"]["subsets"] == {k: v for k, v in result["subsets"].items() if k.startswith("REPLACE-")}
    assert views["held_out"]["left_out"] == ["sitting -> seated", "under -> beneath", "wearing -> in", "wears -> in"]
    assert not views["strict"]["stale"]
    # Each view's figures are the definitions applied to the scores of the rows it keeps, with intervals.
    scores = {r["example_id"]: r for r in pq.read_table(out / "scores.parquet").to_pylist()}
    kept = {"held_out": [r for r in replace_rows if entry(r) not in REACHED],
            "strict": [r for r in replace_rows if entry(r) in STRICT]}
    for name, rows in kept.items():
        got = views[name]["set"]
        assert got["n"] == len(rows)
        assert {k: got[k] for k in ("original_accuracy", "augmented_accuracy", "brittleness")} == pytest.approx(
            recomputed([scores[r["example_id"]] for r in rows]))
        for metric, ci in (("original_accuracy", "original_ci95"), ("brittleness", "brittleness_ci95")):
            assert got[ci][0] <= got[metric] <= got[ci][1]
        assert sum(g["n"] for g in views[name]["subsets"].values()) == len(rows)
    markdown = (out / "eval.md").read_text()
    assert "## REPLACE three ways, % with bootstrap 95% intervals (200 resamples, seed 3)" in markdown
    for text in (markdown, printed):
        assert "| hardpos-tiny / random init | held_out | REPLACE | 32 of 38 |" in text
        assert "| hardpos-tiny / random init | strict | REPLACE | 6 of 38 |" in text
        assert "held_out: rows whose substitution is none of the 4 substitutions of --finetune_table=" in text
        assert "its table_sha256 matches pipeline/perturb/data/replace_table.json" in text


def test_no_source_reports_held_out_not_computed_and_a_stale_strict_read(sample_output, images, tmp_path,
                                                                          monkeypatch, capsys):
    read = json.loads(replace_views.STRICT_PAIRS.read_text())
    stale_copy = tmp_path / "pairs.json"
    stale_copy.write_text(json.dumps({**read, "table_sha256": "0" * 64}))
    monkeypatch.setattr(replace_views, "STRICT_PAIRS", stale_copy)
    out = tmp_path / "out"
    assert run(sample_output, images, out) == 0
    printed = capsys.readouterr().out
    views = json.loads((out / "eval.json").read_text())["replace_views"]
    assert views["held_out"] == {"status": "not_computed", "of": 38, "reason": views["held_out"]["reason"]}
    assert (views["strict"]["status"], views["strict"]["rows"], views["strict"]["stale"]) == ("ok", 6, True)
    markdown = (out / "eval.md").read_text()
    for text in (markdown, printed):
        assert "| held_out | REPLACE | not computed (of 38) |" in text
        assert "- hardpos-tiny / random init: held_out: not computed: no finetuning substitutions" in text
        assert "| strict (stale) | REPLACE | 6 of 38 |" in text and "; STALE: its table_sha256 000000000000…" in text


@pytest.mark.parametrize("flag, content, message", [
    ("--finetune_table=/no/such/table", None, "--finetune_table: no Parquet shard at /no/such/table"),
    ("--finetune_substitutions", "sitting -> seated\nsitting seated\n", ":2: 'sitting seated' is not `old -> new`"),
    ("--finetune_substitutions", "-> seated\n", ":1: '-> seated' is not `old -> new`"),
    ("--finetune_substitutions=/no/such/file", None, "--finetune_substitutions: cannot read /no/such/file"),
])
def test_bad_finetuning_flags_fail_fast_with_one_line(flag, content, message, sample_output, images, tmp_path,
                                                      capsys):
    if content is not None:
        (tmp_path / "subs.txt").write_text(content)
        flag = f"{flag}={tmp_path / 'subs.txt'}"
    assert run(sample_output, images, tmp_path / "out", flag) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --finetune_") and message in err and "\n" not in err
    assert not (tmp_path / "out").exists()


def test_a_finetune_table_shard_changed_since_its_run_recorded_it_is_refused(finetune_run, tmp_path):
    import shutil

    from pipeline.train.replace_views import held_out

    run = tmp_path / "run"
    shutil.copytree(finetune_run, run)
    shard = next((run / "train").glob("*.parquet"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(replace_views.UsageError, match="sha256 differs"):
        held_out(str(run), None, None)


def test_n26_a_substitutions_file_that_is_not_utf8_or_not_a_file_is_one_line(tmp_path):
    """46709a5 ended in a UnicodeDecodeError traceback for a --finetune_substitutions file in latin-1."""
    path = tmp_path / "subs.txt"
    path.write_bytes("sitting -> s\xe9ated\n".encode("latin-1"))
    with pytest.raises(replace_views.UsageError, match=r"subs.txt is not UTF-8 text \(byte 12 is b'\\xe9'\)"):
        replace_views.read_substitution_file(str(path))
    with pytest.raises(replace_views.UsageError, match="/dev/zero is not a regular file"):
        replace_views.read_substitution_file("/dev/zero")


@pytest.mark.parametrize("damage", ["report is a list", "a section is a list", "sha256 is a list",
                                    "caption is int", "hard_positive is a list"])
def test_n27_a_finetune_table_with_an_odd_report_or_columns_is_one_line(finetune_run, tmp_path, damage):
    """--finetune_table whose report.json is [] or has odd sections, or whose text columns are int or list: an
    AttributeError traceback on 46709a5; now a UsageError naming the file."""
    import shutil

    import pyarrow as pa

    run = tmp_path / "run"
    shutil.copytree(finetune_run, run)
    report_path = run / "report.json"
    report = json.loads(report_path.read_text())
    if damage == "report is a list":
        report = []
    elif damage == "a section is a list":
        report["tables"]["train"] = []
    elif damage == "sha256 is a list":
        report["tables"]["train"]["sha256"] = []
    else:
        report_path.unlink()  # a user's own table: nothing to check its shards against
        column = damage.split()[0]
        values = [1, 2] if damage.endswith("int") else [["a"], ["b"]]
        other = "hard_positive" if column == "caption" else "caption"
        shard = next((run / "train").glob("*.parquet"))
        pq.write_table(pa.table({column: values, other: ["a cat", "a dog"]}), shard)
    if not damage.startswith(("caption", "hard_positive")):
        report_path.write_text(json.dumps(report))
    with pytest.raises(replace_views.UsageError, match=r"^--finetune_table: .*(not a hardpos report|not text)"):
        replace_views.held_out(str(run), None, None)
