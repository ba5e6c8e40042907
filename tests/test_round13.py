"""Round 13 (probe13, on a5a7416; the X numbers are the probe's): a cache line counts only with numbers its table's
columns hold (X1, X2); the trainer's checkpoints and log are of their kind and read with a bound (X3-X5, X17); the
images stage's own files are read with a bound and a damaged one is one line (X6-X10); a replay line naming a field
twice is refused (X11); the kernel's files are never read and the environment's secrets never printed (X12, X13,
X16, X19); no run commits into a release, nor spills into one (X14, X18); --dask_memory_limit is checked (X15)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from conftest import run_cli
from pipeline.llm.cache import parse_line
from pipeline.run import main
from tests.image_fixtures import order_run

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CAPTIONS = ROOT / "samples" / "coco" / "captions_sample.json"

WRITTEN = {"key": "k", "attempts": [{"text": "x", "finish_reason": "stop", "output_tokens": 3,
                                     "sampling": {"max_new_tokens": 30, "temperature": 0.0, "top_p": 1.0, "seed": 5}}]}


# ------------------------------------------------------------------------------------------- X1, X2: cache lines

@pytest.mark.parametrize("field,value", [("output_tokens", 2 ** 40), ("max_new_tokens", 2 ** 40),
                                         ("output_tokens", -1), ("max_new_tokens", 2 ** 31)])
def test_x1_x2_a_cache_line_whose_token_count_no_int32_column_holds_is_a_miss(field, value):
    """output_tokens and max_new_tokens are int32 columns: a count past them made a row that failed the schema, and
    the report did not balance on every rerun."""
    entry = json.loads(json.dumps(WRITTEN))
    assert parse_line(json.dumps(entry)) is not None
    attempt = entry["attempts"][0]
    (attempt if field == "output_tokens" else attempt["sampling"])[field] = value
    assert parse_line(json.dumps(entry)) is None


# ------------------------------------------------------------------------------------------- X3-X5, X17: trainer

def test_x3_pruning_keeps_a_users_file_that_is_no_numbered_checkpoint(tmp_path):
    from pipeline.train.checkpoint import prune_checkpoints

    for name in ("step_1.pt", "step_2.pt", "step_10.pt", "step_final.pt", "step_3.pt.bak"):
        (tmp_path / name).write_text(name)
    prune_checkpoints(tmp_path, keep=1, step=10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_10.pt", "step_3.pt.bak", "step_final.pt"]


@pytest.mark.parametrize("name", ["checkpoints/.step_1.pt.tmp", "checkpoints/step_2.pt", ".final.pt.tmp",
                                  "checkpoints/.latest.pt.tmp"])
def test_x4_x17_a_folder_where_the_trainer_saves_a_file_is_refused_before_any_work(name, tmp_path, capsys):
    from pipeline.train.finetune import main as finetune

    out = tmp_path / "out"
    (out / name).mkdir(parents=True)
    (out / name / "keep.txt").write_text("the user's")
    code = finetune([f"--data={tmp_path / 'no-data'}", f"--images={tmp_path}", f"--out={out}", "--model=hardpos-tiny",
                     "--pretrained="])
    err = capsys.readouterr().err
    assert code == 2 and f"{name} is not a file" in err and "Traceback" not in err
    assert (out / name / "keep.txt").read_text() == "the user's"


def test_x5_a_huge_log_line_is_dropped_without_being_held(tmp_path):
    import tracemalloc

    from pipeline.train.finetune import truncate_log

    log = tmp_path / "log.jsonl"
    with open(log, "wb") as f:
        f.write(b'{"step": 1, "loss": 2.0}\n')
        f.truncate(f.tell() + (64 << 20))  # 64 MiB of zeros, no line break: a sparse file
    with open(log, "ab") as f:
        f.write(b'\n{"step": 2, "loss": 1.0}\n{"step": 9}\n')
    tracemalloc.start()
    try:
        truncate_log(log, 2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert log.read_bytes() == b'{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.0}\n'
    assert peak < 16 << 20, peak


# --------------------------------------------------------------------------------------- X6-X10: images stage

@pytest.mark.parametrize("content", [b"", b"[]", b"[" * 100_000, "sparse"])
def test_x6_x9_a_stage_file_of_the_images_stage_that_it_did_not_write_is_one_line(content, tmp_path):
    import tracemalloc

    from pipeline.publish.images import OWN_JSON_LIMIT, PlantedEntry, own_json

    path = tmp_path / "00000_stats.json"
    if content == "sparse":
        with open(path, "wb") as f:
            f.truncate(OWN_JSON_LIMIT + 1)
    else:
        path.write_bytes(content)
    tracemalloc.start()
    try:
        with pytest.raises(PlantedEntry, match="move it away"):
            own_json(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < OWN_JSON_LIMIT // 4
    path.write_text('{"status_dict": {}}')
    assert own_json(str(path)) == {"status_dict": {}}


@pytest.mark.parametrize("damage", ["empty", "nested"])
def test_x9_x10_a_damaged_images_report_is_named_as_such_not_taken_for_a_run(damage, tmp_path):
    from argparse import Namespace

    from pipeline.options import UsageError
    from pipeline.stages.images import check_images_path

    out = tmp_path / "out"
    (out / "images").mkdir(parents=True)
    (out / "images" / "report.json").write_text("" if damage == "empty" else "[" * 100_000)
    with pytest.raises(UsageError, match="report.json: .*the images stage did not write it"):
        check_images_path(Namespace(output_dir=str(out), images_dir=None))


def test_x8_a_huge_settings_file_is_refused_unread(tmp_path):
    from pipeline.publish.images import OWN_JSON_LIMIT, settings_problem

    with open(tmp_path / "settings.json", "wb") as f:
        f.truncate(OWN_JSON_LIMIT + 1)
    assert "more than the stage ever writes" in settings_problem(str(tmp_path), "webdataset", 0)
    (tmp_path / "settings.json").write_text(json.dumps({"image_format": "webdataset", "image_size": 0}))
    assert settings_problem(str(tmp_path), "webdataset", 0) is None


# ------------------------------------------------------------------------------------------- X11: replay lines

def test_x11_a_replay_line_naming_a_field_twice_is_refused(tmp_path):
    from pipeline.llm.engines import ReplayError, read_replay

    path = tmp_path / "replay.jsonl"
    path.write_text('{"type": "replace", "caption": "a dog", "text": "a puppy"}\n'
                    '{"type": "replace", "caption": "a zebra by a pool", "text": "a zebra by a pond", '
                    '"text": "a zebra by a puddle"}\n')
    with pytest.raises(ReplayError, match=r"replay.jsonl:2: field 'text' appears twice"):
        list(read_replay(str(path)))


# ------------------------------------------------------------------------------------ X12, X13, X16, X19: secrets

def test_x12_a_corpus_file_linked_to_the_kernels_environment_is_refused_never_quoted(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.csv").write_text("key,caption,url\nk1,a red dog on a green sofa,http://x/1.jpg\n")
    (corpus / "b.csv").symlink_to("/proc/self/environ")
    done = run_cli("--stage=train_negatives", f"--captions={corpus}/*.csv", f"--output_dir={tmp_path / 'out'}",
                   env={**os.environ, "OPENAI_API_KEY": "sk-SECRETROUND13KEY"})
    assert done.returncode == 2 and "a file of the kernel's" in done.stderr, done.stderr[-1500:]
    assert "SECRETROUND13" not in done.stdout + done.stderr


def test_x13_a_substitution_file_linked_to_the_kernels_environment_is_refused(tmp_path):
    from pipeline.train.clip import UsageError
    from pipeline.train.replace_views import read_substitution_file

    (tmp_path / "subs.txt").symlink_to("/proc/self/environ")
    with pytest.raises(UsageError, match="a file of the kernel's"):
        read_substitution_file(str(tmp_path / "subs.txt"))
    (tmp_path / "long.txt").write_text("x" * 500 + "\n")
    with pytest.raises(UsageError) as refused:
        read_substitution_file(str(tmp_path / "long.txt"))
    assert len(str(refused.value)) < 250


def test_x12_x19_the_environments_secrets_and_mangled_urls_are_redacted_at_the_last_line_of_defence(monkeypatch,
                                                                                                    capsys):
    from pipeline.urls import redact_output

    monkeypatch.setenv("HF_TOKEN", "hf_SECRETTOKEN13")
    monkeypatch.setenv("PATH_LIKE", "not-a-secret-value")
    saved = sys.stdout, sys.stderr
    try:
        redact_output()
        print("columns: HF_TOKEN=hf_SECRETTOKEN13, PATH_LIKE=not-a-secret-value", file=sys.stderr)
        print("Couldn't find any data file at /x/https:/u:SECRETPT13@127.0.0.1:9/d?token=QSECRET13.", file=sys.stderr)
    finally:
        sys.stdout, sys.stderr = saved
    err = capsys.readouterr().err
    assert "SECRETTOKEN13" not in err and "SECRET" + "PT13" not in err and "QSECRET13" not in err, err
    assert "not-a-secret-value" in err and "https:/***@127.0.0.1:9/d?token=***" in err


def test_x16_a_dask_address_with_a_password_is_refused_unshown(tmp_path):
    done = run_cli("--stage=order_eval", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={tmp_path / 'out'}",
                   "--runner=DaskRunner", "--dask_client_address=tcp://u:SECRETDASK13@127.0.0.1:9")
    assert done.returncode == 2 and "--dask_client_address is not a Dask scheduler's address" in done.stderr, \
        done.stderr[-1500:]
    assert "SECRETDASK13" not in done.stdout + done.stderr and not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------ X14, X18: releases

def test_x14_no_run_commits_its_table_into_a_release_named_like_it(tmp_path, capsys):
    run = order_run(tmp_path)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert main(["--stage=publish", f"--output_dir={run}", f"--publish_dir={fresh / 'order_eval'}"]) == 0
    before = sorted(p.name for p in (fresh / "order_eval").iterdir())
    code = main(["--stage=order_eval", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={fresh}"])
    assert code == 2 and "order_eval is a published folder" in capsys.readouterr().err
    assert sorted(p.name for p in (fresh / "order_eval").iterdir()) == before


def test_x18_no_spill_folder_inside_a_release(tmp_path, capsys):
    run = order_run(tmp_path)
    assert main(["--stage=publish", f"--output_dir={run}"]) == 0
    code = main(["--stage=order_eval", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={tmp_path / 'o'}",
                 f"--spill_dir={run / 'hub' / 'data'}"])
    assert code == 2 and "is in the published folder" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------- X15: options

@pytest.mark.parametrize("limit,ok", [("banana", False), ("-1", False), ("0", False), ("3GiBx", False),
                                      ("3GiB", True), ("2.5GB", True), ("0.5", True), ("auto", True)])
def test_x15_the_dask_memory_limit_is_checked_as_a_flag(limit, ok, capsys):
    from pipeline.run import UsageError, parse

    args = ["--stage=order_eval", "--output_dir=/tmp/unused", f"--coco_captions={SAMPLE_CAPTIONS}",
            f"--dask_memory_limit={limit}"]
    if ok:
        assert parse(args)[1].dask_memory_limit == limit
    else:
        with pytest.raises((UsageError, SystemExit)):
            parse(args)
