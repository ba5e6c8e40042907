"""Round 14 (probe14, on 7ea6530; the Y and K numbers are the probe's): a path is a URL only with scheme:// at its
start, as Beam decides (Y1, Y9, K1-K4: `<dir>/x://../proc/self/environ` passed every kernel-file check); secrets are
redacted in the forms an error line quotes them and by every command (Y9, Y10, Y3); the checks are commands of one
line (Y11, Y12); the trainer touches only the files it names (Y4, Y5, Y13); damaged shards are one line (Y6); publish
removes only what it left, never into a staging folder (Y7, Y8); an output folder of its own (Y15); a Dask cluster
that does not answer is one line (Y14); corpus figures (Y2)."""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from conftest import run_cli
from pipeline.run import main
from tests.image_fixtures import order_run

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CAPTIONS = ROOT / "samples" / "coco" / "captions_sample.json"


def environ_behind_a_scheme(tmp_path: Path) -> str:
    """A local path that holds '://' and leads to /proc/self/environ: `<tmp>/x:` is a real folder."""
    (tmp_path / "x:").mkdir()
    return str(tmp_path / "x:") + "//" + "/".join([".."] * (len(tmp_path.parts) + 2)) + "/proc/self/environ"


# ------------------------------------------------------------------------------ Y1, K1-K4, Y9: '://' inside a path

def test_y1_a_path_is_a_url_only_with_its_scheme_at_the_start(tmp_path):
    from pipeline.folder_lock import kernel_file
    from pipeline.sources.files import regular_file_problem
    from pipeline.urls import has_scheme

    sneaky = environ_behind_a_scheme(tmp_path)
    assert os.path.realpath(sneaky) == os.path.realpath("/proc/self/environ")
    assert not has_scheme(sneaky) and kernel_file(sneaky) and "a file of the kernel's" in regular_file_problem(sneaky)
    for url in ("gs://bucket/x", "s3://b/k", "http://h/p", " gs://b/x"):
        assert has_scheme(url), url
    for path in ("/data/x://y", "relative/gs://x", "C:/users", "x:/y"):
        assert not has_scheme(path), path


@pytest.mark.parametrize("flag", ["--captions", "--coco_captions", "--reference_captions", "--llm_replay"])
def test_k1_k4_every_reader_refuses_the_environment_behind_a_scheme_like_name(flag, tmp_path):
    sneaky = environ_behind_a_scheme(tmp_path)
    stage = "hard_positives" if flag == "--llm_replay" else "train_negatives"
    args = [f"--stage={stage}", f"--output_dir={tmp_path / 'out'}", "--allow_empty",
            f"--coco_captions={SAMPLE_CAPTIONS}", "--captions_format=jsonl"]
    if flag == "--llm_replay":
        args += ["--llm_engine=replay", "--model=m"]
    if flag in ("--captions", "--coco_captions"):
        args = [a for a in args if not a.startswith("--coco_captions")]
    if flag != "--captions":
        args = [a for a in args if a != "--captions_format=jsonl"]
    done = run_cli(*args, f"{flag}={sneaky}", env={**os.environ, "GH_PAT": "ghp_SECRETROUND14PAT"})
    assert done.returncode == 2 and "a file of the kernel's" in done.stderr, done.stderr[-1500:]
    assert "SECRETROUND14" not in done.stdout + done.stderr and not (tmp_path / "out").exists()


def test_y9_a_substitution_file_behind_a_scheme_like_name_is_refused(tmp_path):
    from pipeline.train.clip import UsageError
    from pipeline.train.replace_views import read_substitution_file

    with pytest.raises(UsageError, match="a file of the kernel's"):
        read_substitution_file(environ_behind_a_scheme(tmp_path))


def test_y9_a_secret_is_redacted_in_the_forms_an_error_line_quotes_it(monkeypatch, capsys):
    from pipeline.urls import redact_output

    monkeypatch.setenv("OPENAI_API_KEY", 'sk-ab\\cd"SECRETROUND14')
    saved = sys.stdout, sys.stderr
    try:
        redact_output()
        line = 'OPENAI_API_KEY=sk-ab\\cd"SECRETROUND14'
        print(f"as is {line}; repr {line!r}; json {json.dumps(line)}", file=sys.stderr)
    finally:
        sys.stdout, sys.stderr = saved
    assert "SECRETROUND14" not in capsys.readouterr().err


# ------------------------------------------------------------------------------------ Y10, Y11: every command

def test_y10_every_command_line_entry_point_redacts_what_it_prints():
    """Each `python -m pipeline...` module, and the `hardpos` script, writes through urls.redact_output."""
    commands = [p for p in (ROOT / "pipeline").rglob("*.py") if '__name__ == "__main__"' in p.read_text()]
    assert len(commands) >= 6
    for path in commands:
        block = path.read_text().split('if __name__ == "__main__":')[-1]
        assert "redact_output()" in block or "cli()" in block, path
    assert '"hardpos=pipeline.run:cli"' in (ROOT / "setup.py").read_text()
    from pipeline.run import cli

    assert "redact_output()" in Path(sys.modules[cli.__module__].__file__).read_text().split("def cli(")[1][:600]


def test_y10_the_patching_command_never_prints_a_password(tmp_path):
    (tmp_path / "finetuned.pt").write_text("not read: the pretrained weights are refused first")
    done = run_cli("--model=hardpos-tiny", "--pretrained=https://u:SECRETPATCH14@127.0.0.1:9/x.pt?sig=QSECRETP14",
                   f"--finetuned={tmp_path / 'finetuned.pt'}", "--alpha=0.5", f"--out={tmp_path / 'p.pt'}",
                   module="pipeline.train.patching")
    assert "--pretrained" in done.stderr, done.stderr[-1500:]
    assert done.returncode != 0 and "SECRETPATCH14" not in done.stdout + done.stderr, done.stderr[-1500:]
    assert "QSECRETP14" not in done.stdout + done.stderr


@pytest.mark.parametrize("case", ["fifo", "another_stage", "kernel_captions"])
def test_y11_the_negatives_check_says_an_unreadable_input_in_one_line(case, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    args = [str(out)]
    if case == "fifo":
        os.mkfifo(out / "report.json")
    else:
        (out / "report.json").write_text(json.dumps({"stage": "hard_positives", "tables": {"hard_positives": {}}}))
        if case == "kernel_captions":
            (out / "report.json").write_text(json.dumps({"tables": {"train_negatives": {
                "read": 1, "rejected": 0, "balanced": True, "negative_types": {}}}}))
            args.append("--coco_captions=/proc/self/environ")
    done = run_cli(*args, module="pipeline.checks.negatives")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-1500:]
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1


def test_y12_the_negatives_check_knows_every_default_type(tmp_path):
    """A default train_negatives run of the sample passes the documented checker (exchange included)."""
    assert main(["--stage=train_negatives", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={tmp_path}",
                 "--progress_seconds=0"]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert "exchange" in report["tables"]["train_negatives"]["negative_types"]
    done = run_cli(str(tmp_path), module="pipeline.checks.negatives")
    assert done.returncode == 0 and "unknown_type 0" in done.stdout, done.stdout[-2000:]


# ---------------------------------------------------------------------------------------- Y4, Y5, Y13: trainer

def test_y4_y5_pruning_removes_only_this_runs_numbered_checkpoints(tmp_path):
    from pipeline.train.checkpoint import prune_checkpoints

    names = ["step_1.pt", "step_2.pt", "step_\uff11.pt", "step_99999999999999999999.pt", "step_01.pt"]
    for name in names:
        (tmp_path / name).write_text(name)
    prune_checkpoints(tmp_path, keep=1, step=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for n in names if n != "step_1.pt")


def test_y13_start_up_cleanup_removes_only_the_temporary_names_saves_give(tmp_path):
    from pipeline.train.checkpoint import remove_partial_files

    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    for name in (".step_3.pt.tmp", ".step_notes.pt.tmp", ".step_\uff13.pt.tmp", ".latest.pt.tmp"):
        (checkpoints / name).write_text("x")
    removed = {p.name for p in remove_partial_files(tmp_path)}
    assert removed == {".step_3.pt.tmp", ".latest.pt.tmp"}
    assert sorted(p.name for p in checkpoints.iterdir()) == [".step_notes.pt.tmp", ".step_\uff13.pt.tmp"]


# ------------------------------------------------------------------------------------------- Y6: damaged shards

@pytest.mark.parametrize("damage", ["empty", "sparse", "not_parquet", "no_columns"])
def test_y6_a_damaged_shard_metadata_file_is_one_line(damage, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.publish.images import PlantedEntry, read_attempts

    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "00000_stats.json").write_text("{}")
    meta = shards / "00000.parquet"
    if damage == "empty":
        meta.write_bytes(b"")
    elif damage == "sparse":
        with open(meta, "wb") as f:
            f.truncate(1 << 30)
    elif damage == "not_parquet":
        meta.write_text("key,status\n")
    else:
        pq.write_table(pa.table({"other": [1]}), meta)
    with pytest.raises(PlantedEntry, match="not what img2dataset wrote.*move the shard's files away"):
        read_attempts(str(tmp_path))


def test_y6_a_damaged_shard_tar_is_one_line(tmp_path):
    from pipeline.publish.images import PlantedEntry, _shard_images

    (tmp_path / "00000.tar").write_bytes(b"not a tar" * 100)
    with pytest.raises(PlantedEntry, match="not what img2dataset wrote"):
        list(_shard_images(str(tmp_path), "00000"))


# ------------------------------------------------------------------------------------------ Y7, Y8: publish

@pytest.mark.parametrize("name,kind", [(".hardpos-prev", "folder"), (".hardpos-next", "folder"),
                                       (".hardpos-next", "file")])
def test_y7_publish_removes_only_the_leftovers_it_made(name, kind, tmp_path, capsys):
    out = order_run(tmp_path)
    hub = out / "hub"
    hub.mkdir()
    if kind == "folder":
        (hub / name).mkdir()
        (hub / name / "keep.txt").write_text("the user's")
    else:
        (hub / name).write_text("the user's")
    assert main(["--stage=publish", f"--output_dir={out}"]) == 2
    assert "is not publish's" in capsys.readouterr().err
    kept = hub / name / "keep.txt" if kind == "folder" else hub / name
    assert kept.read_text() == "the user's"


def test_y7_a_publish_cut_off_is_still_finished_by_the_next(tmp_path, monkeypatch):
    """publish's own leftovers (marked) still go: a publish stopped while building, then run again."""
    import pipeline.stages.publish as publish_stage

    out = order_run(tmp_path)
    real = publish_stage.place

    def stop_after_one(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt  # a kill after the first shard was placed in NEXT

    monkeypatch.setattr(publish_stage, "place", stop_after_one)
    with pytest.raises(KeyboardInterrupt):
        main(["--stage=publish", f"--output_dir={out}"])
    monkeypatch.setattr(publish_stage, "place", real)
    assert (out / "hub" / ".hardpos-next").is_dir()
    assert main(["--stage=publish", f"--output_dir={out}"]) == 0
    assert not (out / "hub" / ".hardpos-next").exists() and not (out / "hub" / ".hardpos-prev").exists()


def test_y8_no_release_inside_a_runs_staging_folder(tmp_path, capsys):
    out = order_run(tmp_path)
    staging = out / ".staging-order_eval-0123456789ab"
    staging.mkdir()
    (staging / ".hardpos-staging").write_text("")
    assert main(["--stage=publish", f"--output_dir={out}", f"--publish_dir={staging / 'hub'}",
                 "--allow_partial"]) == 2
    assert "a run's staging folder" in capsys.readouterr().err and not (staging / "hub").exists()


# ---------------------------------------------------------------------------------------- Y15: output folders

def test_y15_the_evaluators_and_trainers_out_is_a_folder_of_its_own(tmp_path, capsys):
    from pipeline.tables.folders import output_folder_problem
    from pipeline.train.evaluate import main as evaluate

    run = tmp_path / "run"
    (run / "replace").mkdir(parents=True)
    (run / "report.json").write_text(json.dumps({"tables": {"replace": {}, "swap": {}}}))
    assert "a folder the stages of the run" in output_folder_problem("--out", run / "replace")
    assert "a folder the stages of the run" in output_folder_problem("--out", run / "replace" / "scores")
    assert output_folder_problem("--out", run / "evaluation") is None
    (tmp_path / "data").mkdir()
    code = evaluate(["--model=hardpos-tiny", f"--data={tmp_path / 'data'}", f"--images={tmp_path}",
                     f"--out={run / 'replace'}"])
    assert code == 2 and "write into a folder of its own" in capsys.readouterr().err
    assert sorted(p.name for p in (run / "replace").iterdir()) == []


# --------------------------------------------------------------------------------------------------- Y3, Y14: Dask

@pytest.mark.parametrize("address,ok", [("tcp://127.0.0.1:9?token=SECRETQ14", False), ("u:SECRETQ14@h:1", False),
                                        ("tcp://h/SECRETQ14", False), ("tcp://127.0.0.1:8786", True),
                                        ("127.0.0.1:8786", True), ("tls://sched.example:8786", True),
                                        ("tcp://[::1]:8786", True)])
def test_y3_a_dask_address_is_host_and_port_only(address, ok):
    from pipeline.run import UsageError, parse

    args = ["--stage=order_eval", "--output_dir=/tmp/unused", f"--coco_captions={SAMPLE_CAPTIONS}",
            "--runner=DaskRunner", f"--dask_client_address={address}"]
    if ok:
        parse(args)
    else:
        with pytest.raises(UsageError) as refused:
            parse(args)
        assert "SECRETQ14" not in str(refused.value)


def test_y14_a_dask_scheduler_that_does_not_answer_is_one_line(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = run_cli("--stage=order_eval", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={tmp_path / 'out'}",
                   "--runner=DaskRunner", f"--dask_client_address=tcp://127.0.0.1:{port}",
                   env={**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert re.search(rf"error: Dask: no cluster to run on \(nothing answered at tcp://127.0.0.1:{port}", done.stderr)


# ------------------------------------------------------------------------------------------------ Y2: figures

def test_y2_an_empty_corpus_has_no_words():
    from pipeline.perturb.corpus import CorpusCounts

    assert CorpusCounts().model().words == 0
    counts = CorpusCounts()
    counts.add("A dog, a dog.")
    assert counts.model().words == 2


def test_a_run_whose_graph_fails_to_build_leaves_no_temporary_folder(tmp_path, monkeypatch, capsys):
    """Beam makes a beam-pipeline-temp* folder with every Pipeline and removes it in run() only: a build that fails
    left one in the temporary folder per run (hundreds on this machine)."""
    import tempfile

    import pipeline.stages.order_eval as order_eval
    from pipeline.options import UsageError

    def refuse(pipeline, opts):
        raise UsageError("refused while building")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(order_eval, "build", refuse)
    assert main(["--stage=order_eval", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={tmp_path / 'out'}"]) == 2
    assert "refused while building" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("beam-pipeline-temp")] == []
