"""Round 11 (probe11, 47 cases on 31c8dd4, 23 failed; the V numbers are the probe's): the replay file the workers
read is the one the launcher recorded (V1); files of hardpos's own folders are read only when regular files (V2, V3,
V4, V17); a damaged cache line is a miss (V8, V9, V24) and a cache file is streamed (V41); what a commit places is of
its kind or missing (V35-V38); the trainer and the evaluator never write through a link in --out (V19-V21); no
release inside a release or the LLM cache (V26, V42); what publish switches in is what it wrote (V46, V47);
compressed replay files fail in one line and inflate only what is read (V5, V45); --cache_dir a file (V15)."""
from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import os
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import pytest

import pipeline.stages.llm_rewrites as llm_rewrites
import pipeline.stages.publish as publish_stage
from conftest import run_cli
from pipeline.llm.cache import file_lines, parse_line
from pipeline.llm.engines import ReplayError, read_replay
from pipeline.publish.layout import write_run_folder
from pipeline.run import main
from pipeline.tables.folders import MANIFEST, NEXT
from pipeline.tables.load import load_table
from tests.image_fixtures import order_rows, order_run

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CAPTIONS = ROOT / "samples" / "coco" / "captions_sample.json"
REPLAY = ROOT / "samples" / "coco" / "hard_positives_replay.jsonl"


def positives_args(out: Path, *extra: str) -> list[str]:
    return ["--stage=hard_positives", f"--coco_captions={SAMPLE_CAPTIONS}", "--llm_engine=replay",
            f"--llm_replay={REPLAY}", "--model=m", f"--output_dir={out}", "--progress_seconds=0", *extra]


@pytest.fixture(scope="module")
def positives(tmp_path_factory) -> Path:
    """A hard_positives run on the sample (its cache in <out>/llm_cache), copied by the tests that change it."""
    out = tmp_path_factory.mktemp("positives") / "out"
    assert main(positives_args(out)) == 0
    return out


def copy_of(folder: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(folder, tmp_path / "out", symlinks=True)
    return tmp_path / "out"


def rows(out: Path) -> int:
    return json.loads((out / "report.json").read_text())["tables"]["hard_positives"]["rows"]


# ------------------------------------------------------------------------------------------- V1: the replay file

def test_v1_a_replay_file_other_than_the_one_recorded_stops_the_run_in_one_line(tmp_path, monkeypatch, capsys):
    """The launcher records (made_from) and keys the cache by the replay file's sha256; a worker that reads another
    version (the file replaced meanwhile, here the launcher's record made to differ) stops the run: exit 2, one line,
    nothing committed, instead of rows from the new file under the old file's sha256."""
    monkeypatch.setattr(llm_rewrites, "_replay_sha256", lambda opts: hashlib.sha256(b"another version").hexdigest())
    out = tmp_path / "out"
    assert main(positives_args(out)) == 2
    err = capsys.readouterr().err
    assert "changed since the run began" in err and "nothing was written" in err
    assert not (out / "report.json").exists()


# ------------------------------------------------------------------------------- V2, V3, V17: own folders' files

@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_v2_v17_a_report_that_is_a_fifo_or_a_folder_is_one_line(kind, positives, tmp_path):
    out = copy_of(positives, tmp_path)
    (out / "report.json").unlink()
    os.mkfifo(out / "report.json") if kind == "fifo" else (out / "report.json").mkdir()
    done = run_cli(*positives_args(out), "--runner=DirectRunner")  # a fresh process: a FIFO cannot hang pytest
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"a {'FIFO' if kind == 'fifo' else 'folder'}, not a file hardpos wrote" in done.stderr


def test_v3_a_staging_folder_whose_commit_record_is_a_fifo_is_set_aside(positives, tmp_path):
    out = copy_of(positives, tmp_path)
    staging = out / ".staging-hard_positives-aaaaaaaaaaaa"
    staging.mkdir()
    (staging / ".hardpos-staging").touch()
    os.mkfifo(staging / "commit.json")
    done = run_cli(*positives_args(out), "--runner=DirectRunner")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not staging.exists() and any(p.name.startswith(".damaged-") for p in out.iterdir())


# ------------------------------------------------------------------------------------------ V4, V8, V9, V24, V41

def test_v4_v41_a_cache_file_that_is_no_regular_file_or_holds_an_endless_line_has_no_lines(tmp_path, monkeypatch):
    import pipeline.llm.cache as cache

    def readable(path):
        return SimpleNamespace(metadata=SimpleNamespace(path=str(path)),
                               open=lambda compression_type=None: open(path, "rb"))

    os.mkfifo(tmp_path / "fifo.jsonl")
    assert list(file_lines(readable(tmp_path / "fifo.jsonl"))) == []  # never opened: an open would block
    monkeypatch.setattr(cache, "MAX_LINE_BYTES", 1000)
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"\0" * 10_000 + b"\n" + b'{"key": "k"}\n')
    assert list(file_lines(readable(big))) == ['{"key": "k"}']


DAMAGED = [{"attempts": 5}, {"attempts": [{"text": "x"}, {"text": "y"}]}, {"accepted": 0, "attempts": []},
           {"attempts": [{"text": "x", "finish_reason": "stop", "sampling": {"max_new_tokens": "many"}}]},
           {"accepted": 3, "attempts": [{"text": "x", "finish_reason": "stop"}]}]


@pytest.mark.parametrize("damaged", DAMAGED, ids=range(len(DAMAGED)))
def test_v8_v9_v24_a_damaged_cache_line_is_a_miss(damaged):
    assert parse_line(json.dumps({"key": "k", **damaged})) is None
    assert parse_line(json.dumps({"key": "k", "attempts": [{"text": "x", "finish_reason": "stop"}]}))


def test_v8_v9_v24_a_run_with_damaged_cache_lines_asks_again_and_balances(positives, tmp_path):
    out = copy_of(positives, tmp_path)
    folder = out / "llm_cache" / "hard_positives"
    keys = [json.loads(line)["key"] for f in folder.glob("*.jsonl") for line in f.read_text().splitlines()]
    for f in folder.glob("*.jsonl"):
        f.unlink()
    (folder / "zz-damaged.jsonl").write_text("".join(json.dumps({"key": key, **DAMAGED[i % len(DAMAGED)]}) + "\n"
                                                     for i, key in enumerate(keys)))
    assert main(positives_args(out)) == 0
    assert rows(out) == rows(positives)


def test_v15_a_cache_dir_that_is_a_file_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert main(positives_args(tmp_path / "out", f"--cache_dir={tmp_path / 'afile'}")) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------- V35-V38

@pytest.mark.parametrize("name,kind", [("rejected", "file"), ("hard_positives", "file"), ("report.md", "folder"),
                                       ("report.json", "folder")])
def test_v35_v38_what_a_commit_places_must_be_of_its_kind(name, kind, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text("the user's") if kind == "file" else (out / name).mkdir()
    code = main(positives_args(out))
    assert code == 2 and "Traceback" not in capsys.readouterr().err
    assert (out / name).is_file() if kind == "file" else (out / name).is_dir()  # never moved aside or deleted


def test_v38_a_folder_where_the_samples_file_goes_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "train_negatives_samples.md").mkdir(parents=True)
    assert main(["--stage=train_negatives", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={out}"]) == 2
    assert "train_negatives_samples.md is a folder" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- V19-V21: trainer, evaluator

@pytest.mark.parametrize("planted", ["log.jsonl", "checkpoints", "checkpoints/step_1.pt"])
def test_v19_v20_the_trainer_never_writes_through_a_link_in_its_out(planted, tmp_path, capsys):
    from pipeline.train.finetune import main as finetune

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "step_0.pt").write_text("the user's")
    out = tmp_path / "out"
    (out / Path(planted).parent).mkdir(parents=True, exist_ok=True)
    (out / planted).symlink_to(victim / "step_0.pt" if planted.endswith((".pt", ".jsonl")) else victim)
    code = finetune([f"--data={tmp_path / 'no-data'}", f"--images={tmp_path}", f"--out={out}", "--model=hardpos-tiny",
                     "--pretrained="])
    assert code == 2 and "is a symbolic link" in capsys.readouterr().err
    assert sorted(p.name for p in victim.iterdir()) == ["step_0.pt"] and (victim / "step_0.pt").read_text() == \
        "the user's"


def test_v21_the_evaluator_never_writes_through_a_link_in_its_out(tmp_path, capsys):
    from pipeline.train.evaluate import main as evaluate

    victim = tmp_path / "victim.json"
    victim.write_text("the user's")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "eval.json").symlink_to(victim)
    (tmp_path / "data").mkdir()
    code = evaluate(["--model=hardpos-tiny", f"--data={tmp_path / 'data'}", f"--images={tmp_path}",
                     f"--out={tmp_path / 'out'}"])
    assert code == 2 and "eval.json is a symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "the user's"


# ------------------------------------------------------------------------------------ V26, V42, V46, V47: publish

@pytest.fixture
def run_folder(tmp_path) -> Path:
    return order_run(tmp_path)


def test_v26_no_release_in_the_llm_cache(positives, tmp_path, capsys):
    out = copy_of(positives, tmp_path)
    assert main(["--stage=publish", f"--output_dir={out}", f"--publish_dir={out / 'llm_cache' / 'hard_positives'}"]) \
        == 2
    assert "the LLM cache" in capsys.readouterr().err


@pytest.mark.parametrize("inside", ["data/extra", NEXT, ".hardpos-next-mine"])
def test_v42_no_release_inside_a_release(inside, run_folder, capsys):
    assert main(["--stage=publish", f"--output_dir={run_folder}"]) == 0
    before = sorted(p for p in (run_folder / "hub").rglob("*"))
    capsys.readouterr()
    assert main(["--stage=publish", f"--output_dir={run_folder}", f"--publish_dir={run_folder / 'hub' / inside}"]) \
        == 2
    assert sorted(p for p in (run_folder / "hub").rglob("*")) == before
    assert load_table(str(run_folder / "hub"), "order_eval").num_rows == 3


@pytest.mark.parametrize("how", ["file", "hard link"])
def test_v46_v47_a_shard_put_in_place_of_publishs_copy_is_found_and_removed(how, run_folder, tmp_path, monkeypatch,
                                                                           capsys):
    outside = tmp_path / "outside.parquet"
    write_run_folder(tmp_path / "other", "order_eval", order_rows(3, "racer"))
    outside.write_bytes(next((tmp_path / "other").glob("*/*.parquet")).read_bytes())
    pending, done = publish_stage._switch_pending, []

    def replace_once(target):  # a racer in the publish folder, after finish_switch's check, before its renames
        aside = Path(target) / NEXT
        if not done and (aside / MANIFEST).is_file():
            done.append(True)
            shard = next((aside / "data").rglob("*.parquet"))
            shard.unlink()
            shard.write_bytes(outside.read_bytes()) if how == "file" else os.link(outside, shard)
        return pending(target)

    monkeypatch.setattr(publish_stage, "_switch_pending", replace_once)
    assert main(["--stage=publish", f"--output_dir={run_folder}"]) == 2
    assert done and "not the file publish wrote" in capsys.readouterr().err
    assert not any((run_folder / "hub" / "data").rglob("*.parquet")) and os.stat(outside).st_nlink == 1
    monkeypatch.setattr(publish_stage, "_switch_pending", pending)
    assert main(["--stage=publish", f"--output_dir={run_folder}"]) == 0
    assert sorted(load_table(str(run_folder / "hub"), "order_eval")["caption"]) == \
        sorted(r["caption"] for r in order_rows(3, "own"))


# ----------------------------------------------------------------------------------- V5, V45: compressed replays

def test_v5_a_replay_file_not_compressed_as_named_is_one_line(tmp_path):
    fake = tmp_path / "replay.jsonl.gz"
    fake.write_bytes(REPLAY.read_bytes())
    with pytest.raises(ReplayError, match="cannot be decompressed as its name says"):
        for _ in read_replay(str(fake)):
            pass


@pytest.mark.parametrize("suffix,opener", [(".gz", gzip.open), (".bz2", bz2.open)])
def test_v45_a_compression_bomb_inflates_only_what_is_read(suffix, opener, tmp_path):
    bomb = tmp_path / f"bomb.jsonl{suffix}"
    with opener(bomb, "wb") as f:
        for _ in range(160):
            f.write(b"\0" * (1 << 20))  # 160 MiB of zeros, a few hundred bytes packed
    tracemalloc.start()
    try:
        with pytest.raises(ReplayError, match="compression bomb"):
            for _ in read_replay(str(bomb)):
                pass
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"{peak:,} bytes held at once"


# ------------------------------------------------------------------------------ images: a link in shards/ (round 10)

@pytest.mark.parametrize("kind", ["link", "fifo", "linked folder"])
def test_a_link_or_fifo_planted_in_the_images_shards_is_removed_never_read(kind, tmp_path):
    """img2dataset writes shards/ by path; what is planted there meanwhile is found before any shard is read or
    indexed (publish/images.refuse_planted, run before and after img2dataset)."""
    from pipeline.publish.images import PlantedEntry, refuse_planted

    shards = tmp_path / "images" / "shards"
    (shards / "sub").mkdir(parents=True)
    (shards / "00000.tar").write_bytes(b"a shard")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("KEEP")
    planted = shards / "sub" / "00001.tar"
    if kind == "link":
        planted.symlink_to(victim / "keep.txt")
    elif kind == "fifo":
        os.mkfifo(planted)
    else:
        planted.symlink_to(victim)
    with pytest.raises(PlantedEntry, match="never make"):
        refuse_planted(str(shards))
    assert not os.path.lexists(planted) and (victim / "keep.txt").read_text() == "KEEP"
    refuse_planted(str(shards))  # files and folders only: nothing to say


# ------------------------------------------------------------------- round 12 (probe12 on b6d5ada): W1-W11

WRITTEN = {"key": "k", "attempts": [{"text": "x", "finish_reason": "stop", "output_tokens": 3,
                                     "sampling": {"max_new_tokens": 30, "temperature": 0.0, "top_p": 1.0, "seed": 5}}]}


@pytest.mark.parametrize("edit", ["seed", "output_tokens", "text", "caption"])
def test_w1_w4_a_cache_line_no_table_or_coder_holds_is_a_miss(edit):
    entry = json.loads(json.dumps(WRITTEN))
    assert parse_line(json.dumps(entry)) is not None
    attempt = entry["attempts"][0]
    if edit == "seed":
        attempt["sampling"]["seed"] = 2 ** 70  # past int64: the row would fail the schema, counted twice
    elif edit == "output_tokens":
        attempt["output_tokens"] = 2 ** 70
    elif edit == "text":
        attempt["text"] = "a \ud800 b"  # a lone surrogate: Beam's coder cannot encode it
    else:
        entry["caption"] = "x\udc00"
    assert parse_line(json.dumps(entry)) is None


@pytest.mark.parametrize("planted", [".final.pt.tmp", "checkpoints/.step_1.pt.tmp"])
def test_w5_a_checkpoint_is_never_saved_through_a_link_at_its_temporary_name(planted, tmp_path):
    """A racer plants a link at the temporary name after the trainer's start-up check: atomic_save removes it
    (never follows it) and writes a file of its own."""
    torch = pytest.importorskip("torch")
    from pipeline.train.checkpoint import atomic_save

    victim = tmp_path / "victim.txt"
    victim.write_text("the user's")
    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    (out / planted).symlink_to(victim)
    target = out / planted.replace(".tmp", "").replace("/.", "/").lstrip(".")
    atomic_save({"step": 1}, target)
    assert victim.read_text() == "the user's" and not os.path.lexists(out / planted)
    assert torch.load(target)["step"] == 1


def test_w6_the_evaluators_files_are_written_beside_and_renamed(tmp_path):
    """A link planted at scores.parquet after the evaluator's start-up check is replaced, never written through."""
    import pyarrow.parquet as pq

    from pipeline.train.evaluate import write_scores

    victim = tmp_path / "victim.txt"
    victim.write_text("the user's")
    (tmp_path / "scores.parquet").symlink_to(victim)
    write_scores([{"example_id": "e", "table": "t", "subset": "s", "category": "c", "replaced_from": None,
                   "replaced_to": None, "s_c": 0.5, "s_n": 0.25, "s_p": 0.75}], tmp_path / "scores.parquet")
    assert victim.read_text() == "the user's" and not (tmp_path / "scores.parquet").is_symlink()
    assert pq.read_table(tmp_path / "scores.parquet").num_rows == 1


@pytest.mark.parametrize("where", ["hardpos-tiny_random", "hardpos-tiny_random/replace_swap"])
def test_w7_w8_no_link_anywhere_in_the_evaluators_out(where, tmp_path):
    from pipeline.folder_lock import planted_link

    victim = tmp_path / "victim"
    (victim / "replace_swap").mkdir(parents=True)
    out = tmp_path / "out"
    (out / Path(where).parent).mkdir(parents=True, exist_ok=True)
    (out / where).symlink_to(victim if where.count("/") == 0 else victim / "replace_swap")
    assert f"{where} is a symbolic link" in planted_link("--out", str(out), files=["results.json"])


def test_w9_w10_a_report_or_manifest_larger_than_any_written_is_refused_unread(tmp_path):
    from pipeline.io.report import OWN_FILE_LIMIT, read_own_file
    from pipeline.tables.folders import MANIFEST_LIMIT, PublishError, read_manifest

    big = tmp_path / "report.json"
    with open(big, "wb") as f:
        f.truncate(OWN_FILE_LIMIT + 1)  # sparse: no disk used
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="more than any report"):
            read_own_file(str(big))
        with open(tmp_path / MANIFEST, "wb") as f:
            f.truncate(MANIFEST_LIMIT + 1)
        with pytest.raises(PublishError, match="more than any manifest"):
            read_manifest(tmp_path)
        assert tracemalloc.get_traced_memory()[1] < 8 << 20
    finally:
        tracemalloc.stop()


def test_w11_a_folder_where_the_latest_checkpoint_goes_is_refused_before_any_work(tmp_path, capsys):
    from pipeline.train.finetune import main as finetune

    out = tmp_path / "out"
    (out / "checkpoints" / "latest.pt").mkdir(parents=True)
    code = finetune([f"--data={tmp_path / 'no-data'}", f"--images={tmp_path}", f"--out={out}", "--model=hardpos-tiny",
                     "--pretrained=", "--resume=latest"])
    assert code == 2 and "checkpoints/latest.pt is not a file" in capsys.readouterr().err


@pytest.mark.parametrize("tool,name", [("evaluate", "eval.json"), ("finetune", "log.jsonl"),
                                       ("finetune", "summary.json")])
def test_w20_w22_a_folder_where_a_file_of_the_out_goes_is_refused_before_any_work(tool, name, tmp_path, capsys):
    from pipeline.train.evaluate import main as evaluate
    from pipeline.train.finetune import main as finetune

    out = tmp_path / "out"
    (out / name).mkdir(parents=True)
    (tmp_path / "data").mkdir()
    common = [f"--data={tmp_path / 'data'}", f"--images={tmp_path}", f"--out={out}", "--model=hardpos-tiny"]
    code = evaluate(common) if tool == "evaluate" else finetune([*common, "--pretrained="])
    assert code == 2 and f"{name} is not a file" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--aro_vga", "--vl_checklist_root", "--output_dir", "--spill_dir"])
def test_w25_w32_a_url_flag_with_a_password_is_one_line_and_never_shows_it(flag, tmp_path):
    url = "http://u:PASSPROBE12@127.0.0.1:9/x"
    args = ["--stage=eval_sets", f"--output_dir={tmp_path / 'o'}", "--runner=DirectRunner",
            f"--vl_checklist_root={ROOT / 'samples' / 'vl_checklist'}",
            f"--aro_vga={ROOT / 'samples' / 'aro' / 'visual_genome_attribution.json'}"]
    args = [a for a in args if not a.startswith(flag + "=")] + [f"{flag}={url}"]
    done = run_cli(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-1500:]
    assert "PASSPROBE12" not in done.stdout + done.stderr and "http://***@127.0.0.1:9/x" in done.stderr


def test_w25_what_a_command_prints_is_redacted_at_the_last_line_of_defence(capsys):
    import sys

    from pipeline.urls import redact_output

    saved = sys.stdout, sys.stderr
    try:
        redact_output()
        print("a traceback line quoting https://u:PW@host/x?token=TOK", file=sys.stderr)
    finally:
        sys.stdout, sys.stderr = saved
    err = capsys.readouterr().err
    assert "PW" not in err and "TOK" not in err and "https://***@host/x?token=***" in err


@pytest.mark.parametrize("source", ["vl_checklist", "aro"])
def test_w42_w43_a_record_naming_a_field_twice_is_rejected_not_read_as_its_last(source, tmp_path):
    import shutil

    from conftest import eval_sets_args

    vl, aro = tmp_path / "vl", tmp_path / "aro.json"
    shutil.copytree(ROOT / "samples" / "vl_checklist", vl)
    shutil.copyfile(ROOT / "samples" / "aro" / "visual_genome_attribution.json", aro)
    if source == "aro":
        text = aro.read_text()
        aro.write_text(text.replace('"true_caption"', '"true_caption": "a swapped caption", "true_caption"', 1))
    else:
        path = next(vl.rglob("*.json"))
        text = path.read_text()
        path.write_text(text.replace('"POS"', '"POS": ["a pair named twice"], "POS"', 1))
    assert main(eval_sets_args(tmp_path / "out", vl, aro)) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    table = "swap" if source == "aro" else "replace"
    assert report["tables"][table]["reject_reasons"].get("repeated_field") == 1


def test_w50_w51_a_publish_dir_with_dotdot_or_the_output_folder_itself_is_refused(run_folder, capsys):
    assert main(["--stage=publish", f"--output_dir={run_folder}",
                 f"--publish_dir={run_folder / 'nothere' / '..' / 'hub2'}"]) == 2
    assert "which is no folder" in capsys.readouterr().err and not (run_folder / "hub2").exists()
    assert main(["--stage=publish", f"--output_dir={run_folder}", f"--publish_dir={run_folder}"]) == 2
    assert "is the output folder" in capsys.readouterr().err


@pytest.mark.parametrize("name,kind", [("report.json", "fifo"), ("settings.json", "folder"), ("shards", "file")])
def test_w62_an_images_folder_entry_of_the_wrong_kind_is_refused_before_any_work(name, kind, tmp_path):
    from argparse import Namespace

    from pipeline.options import UsageError
    from pipeline.stages.images import check_images_path

    out = tmp_path / "out"
    (out / "images").mkdir(parents=True)
    path = out / "images" / name
    os.mkfifo(path) if kind == "fifo" else path.mkdir() if kind == "folder" else path.write_text("x")
    with pytest.raises(UsageError, match=f"{name} is not a"):
        check_images_path(Namespace(output_dir=str(out), images_dir=None))
