"""Issue 35, round 3: the trainer and the evaluator against a hostile probe. Each case it found is a test here.

N36 code pickled in a checkpoint never runs (the evaluator's --pretrained and --models, the trainer's --resume): every
checkpoint is read with torch's weights_only. N36b, N7, N8, N9b an empty, random, truncated, weights-only or ill-fitting
checkpoint is one line, exit 2. N5 a suite file cannot name an image outside its images root. N37 a second trainer
into one --out is refused. N11a a non-finite float flag is refused before anything loads; N11b an update that leaves
non-finite weights stops the run (exit 1) with no checkpoint of them. N38 a full disk during a save leaves no
partial file, and the run resumes to the same weights. N41 the evaluator does not write into a pipeline run's folder.
"""
from __future__ import annotations

import errno
import json
import os
import random
import shutil
import threading
from contextlib import nullcontext

import pytest
import torch

from pipeline.train import evaluate, finetune
from tests import eval_suite_data as suite_data
from tests.conftest import write_run_folder
from tests.image_fixtures import jpeg, schema_row
from tests.train_fixtures import log_records, make_train_data, one_thread, run_args, weights  # noqa: F401


def error_line(capsys) -> str:
    """The one line a refused or stopped command printed on stderr."""
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def train_data(tmp_path_factory):
    return make_train_data(tmp_path_factory.mktemp("train_data"))


@pytest.fixture(scope="module")
def reference(train_data, tmp_path_factory):
    """An uninterrupted run of 4 steps with checkpoints at steps 2 and 4."""
    out = tmp_path_factory.mktemp("reference")
    assert finetune.main(run_args(train_data, out, "--max_steps=4", "--save_every=2")) == 0
    return out


def our_checkpoint(path):
    """A checkpoint the tests' own runs wrote, to alter (trusted: weights_only=False reads older layouts too)."""
    return torch.load(path, map_location="cpu", weights_only=False)


@pytest.fixture(scope="module")
def eval_data(tmp_path_factory):
    """(data, images): a REPLACE table of two rows and their images, for the single-model evaluator."""
    root = tmp_path_factory.mktemp("eval_data")
    rows = [schema_row("replace_eval", example_id=f"rep-{i}", source_index=i, image_path=f"VG_100K/{i}.jpg",
                       image_id=None, caption="a dog on a mat", hard_negative="a cat on a mat",
                       hard_positive="a dog on a rug") for i in (1, 2)]
    for i in (1, 2):
        (root / "images" / "VG_100K").mkdir(parents=True, exist_ok=True)
        (root / "images" / "VG_100K" / f"{i}.jpg").write_bytes(jpeg(i, (48, 40)))
    return write_run_folder(root / "data", "replace_eval", rows), root / "images"


def evaluator(case: str, checkpoint, eval_data, out) -> list[str]:
    """The evaluator given `checkpoint` as --pretrained (single-model run) or in --models (multi-suite run)."""
    data, images = eval_data
    common = [f"--data={data}", f"--images={images}", f"--out={out}", "--workers=0", "--bootstrap=0"]
    if case == "--pretrained":
        return ["--model=hardpos-tiny", f"--pretrained={checkpoint}", *common]
    return ["--suites=replace", f"--models=hardpos-tiny:{checkpoint}", *common]


# ------------------------------------------------------------------------------------------ N36: no code from data

class RunsCode:
    """Unpickled, it runs a shell command: what a hostile checkpoint holds."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture
def hostile(reference, tmp_path):
    """(checkpoint, marker): a training checkpoint of ours with a pickled os.system beside its weights; the marker
    file appears if the call runs."""
    marker, path = tmp_path / "code-ran", tmp_path / "hostile.pt"
    torch.save({**our_checkpoint(reference / "checkpoints" / "step_2.pt"), "note": RunsCode(marker)}, path)
    return path, marker


@pytest.mark.parametrize("case", ["evaluate --pretrained", "evaluate --models", "finetune --resume"])
def test_n36_code_pickled_in_a_checkpoint_is_refused_never_run(case, hostile, eval_data, train_data, tmp_path,
                                                                capsys):
    path, marker = hostile
    if case.startswith("evaluate"):
        code = evaluate.main(evaluator(case.split()[1], path, eval_data, tmp_path / "out"))
    else:
        code = finetune.main(run_args(train_data, tmp_path / "out", "--max_steps=4", f"--resume={path}"))
    assert not marker.exists(), "the checkpoint's pickled call ran"
    assert code == 2
    assert f"holds a pickled {os.system.__module__}.system" in error_line(capsys)


@pytest.mark.parametrize("flag", ["--pretrained", "--models"])
@pytest.mark.parametrize("content, says", [(b"", "is empty"),
                                           (random.Random(36).randbytes(4096), "is damaged or not a torch checkpoint")],
                         ids=["empty", "random"])
def test_n36b_an_empty_or_random_checkpoint_is_one_line(flag, content, says, eval_data, tmp_path, capsys):
    path = tmp_path / "bad.pt"
    path.write_bytes(content)
    assert evaluate.main(evaluator(flag, path, eval_data, tmp_path / "out")) == 2
    assert says in error_line(capsys)


# --------------------------------------------------------------------------------- the trainer's --resume (N7-N9b)

def test_n7_a_truncated_latest_checkpoint_is_one_line(train_data, reference, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(reference, out)  # latest.pt, a hard link there, is a file of its own here
    latest = out / "checkpoints" / "latest.pt"
    latest.write_bytes(latest.read_bytes()[:latest.stat().st_size // 2])
    assert finetune.main(run_args(train_data, out, "--max_steps=4", "--resume=latest")) == 2
    line = error_line(capsys)
    assert line.startswith(f"error: --resume: checkpoint {latest} is damaged or not a torch checkpoint"), line


def test_n8_resuming_from_final_pt_says_it_holds_weights_only(train_data, reference, tmp_path, capsys):
    final = reference / "final.pt"
    assert finetune.main(run_args(train_data, tmp_path, "--max_steps=4", f"--resume={final}")) == 2
    line = error_line(capsys)
    assert f"--resume: {final} is not a training checkpoint" in line and f"--pretrained={final}" in line


def other_shape(state: dict) -> dict:
    """As a checkpoint of another config under the same --model name: one tensor is one row longer."""
    old = state["model"]["positional_embedding"]
    return {**state, "model": {**state["model"], "positional_embedding": torch.zeros(old.shape[0] + 1, *old.shape[1:])}}


def other_optimizer(state: dict) -> dict:
    """As the optimizer of another model: its first parameter group is one parameter short."""
    groups = [dict(g) for g in state["optimizer"]["param_groups"]]
    groups[0]["params"] = groups[0]["params"][:-1]
    return {**state, "optimizer": {**state["optimizer"], "param_groups": groups}}


@pytest.mark.parametrize("alter", [other_shape, other_optimizer], ids=["weights", "optimizer"])
def test_n9b_a_checkpoint_of_another_shape_is_one_line(alter, train_data, reference, tmp_path, capsys):
    path = tmp_path / "foreign.pt"
    torch.save(alter(our_checkpoint(reference / "checkpoints" / "step_2.pt")), path)
    assert finetune.main(run_args(train_data, tmp_path / "out", "--max_steps=4", f"--resume={path}")) == 2
    assert f"--resume: checkpoint {path} does not fit this run's model and optimizer" in error_line(capsys)


# ----------------------------------------------------------------------------------- N38: a full disk during a save

def test_n38_a_full_disk_during_a_save_leaves_no_partial_file_and_the_run_resumes_exactly(
        train_data, reference, tmp_path, capsys, monkeypatch):
    save, saves = torch.save, []

    def disk_fills(obj, f, *args, **kwargs):
        saves.append(f)
        if len(saves) < 2:
            return save(obj, f, *args, **kwargs)
        # the step-4 checkpoint: some bytes written, then the disk is full
        with open(f, "ab") if isinstance(f, (str, os.PathLike)) else nullcontext(f) as file:
            file.write(bytes(1000))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    out = tmp_path / "out"
    monkeypatch.setattr(torch, "save", disk_fills)
    assert finetune.main(run_args(train_data, out, "--max_steps=4", "--save_every=2")) == 1
    line = error_line(capsys)
    assert os.strerror(errno.ENOSPC) in line and "--resume=latest" in line, line
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["latest.pt", "step_2.pt"]
    assert not (out / "final.pt").exists()
    monkeypatch.undo()
    # saves killed part-way (SIGKILL) leave their temporary files, and the log a line cut short: the next run
    # removes them before anything else
    (out / "checkpoints" / ".step_4.pt.tmp").write_bytes(bytes(100))
    (out / ".final.pt.tmp").write_bytes(b"")
    with (out / "log.jsonl").open("a") as log:
        log.write('{"step": 5, "ep')
    assert finetune.main(run_args(train_data, out, "--max_steps=4", "--save_every=2", "--resume=latest")) == 0
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["latest.pt", "step_2.pt", "step_4.pt"]
    assert not (out / ".final.pt.tmp").exists()
    expected, got = weights(reference / "final.pt"), weights(out / "final.pt")
    assert all(torch.equal(expected[k], got[k]) for k in expected), "resumed weights differ"
    assert log_records(out) == log_records(reference)


# ------------------------------------------------------------------------------- N37: one trainer per --out folder

def test_n37_a_second_trainer_into_the_same_out_is_refused(train_data, tmp_path, capsys, monkeypatch):
    out, step = tmp_path / "out", finetune.train_step
    in_step, go_on, first = threading.Event(), threading.Event(), []

    def held_in_its_first_step(*args, **kwargs):  # the first trainer waits there, mid-run, until let go
        if threading.current_thread().name == "first":
            in_step.set()
            go_on.wait(120)
        return step(*args, **kwargs)

    monkeypatch.setattr(finetune, "train_step", held_in_its_first_step)
    thread = threading.Thread(name="first", target=lambda: first.append(
        finetune.main(run_args(train_data, out, "--max_steps=3"))))
    thread.start()
    try:
        assert in_step.wait(120)
        second = finetune.main(run_args(train_data, out, "--max_steps=3"))
    finally:
        go_on.set()
        thread.join(120)
    assert second == 2
    line = error_line(capsys)
    assert line.startswith(f"error: --out={out} is being written by another run (stage finetune, pid {os.getpid()}")
    assert first == [0]
    assert [r["step"] for r in log_records(out)] == [1, 2, 3]


# ------------------------------------------------------------------------------------ N11: finite flags and weights

@pytest.mark.parametrize("flag", ["--lr=nan", "--lr=inf", "--lr=1e39", "--hp_weight=inf", "--grad_clip_norm=nan"])
def test_n11a_a_non_finite_float_flag_is_refused_before_anything_loads(flag, train_data, tmp_path, capsys):
    out = tmp_path / "out"
    # --data names nothing: the flag must be refused before the data is looked for
    assert finetune.main([*run_args(train_data, out, "--max_steps=1", flag), f"--data={tmp_path / 'nowhere'}"]) == 2
    assert error_line(capsys).startswith(f"error: {flag.split('=')[0]}: must be a finite number >= 0")
    assert not out.exists()


def test_n11b_an_update_that_makes_the_weights_non_finite_stops_the_run(train_data, tmp_path, capsys):
    # the loss of step 1 is finite (about 3e38), its gradients are not: the update leaves NaN in the weights
    assert finetune.main(run_args(train_data, tmp_path, "--max_steps=1", "--hn_weight=3e38")) == 1
    line = error_line(capsys)
    assert "weight tensors are not finite after step 1" in line and line.endswith("start again with other settings")
    assert not (tmp_path / "final.pt").exists() and list((tmp_path / "checkpoints").iterdir()) == []


# -------------------------------------------------------------------------- N5: paths a suite file names are confined

def test_n5_suite_files_cannot_name_images_outside_their_root(tmp_path):
    images, secret = tmp_path / "images", suite_data.image(tmp_path / "outside" / "secret.jpg", "blue")
    suite_data.image(images / "VG_100K" / "1.jpg", "red")
    options = {"POS": ["a red square"], "NEG": ["a blue square"]}
    vl_root = tmp_path / "vl"
    suite_data.write_json(vl_root / "Attribute" / "vg" / "color.json",
                          [["VG_100K/1.jpg", options], ["../outside/secret.jpg", options], [str(secret), options]])
    sugarcrepe = tmp_path / "sugarcrepe"
    suite_data.write_json(sugarcrepe / "add_att.json", {
        str(k): {"filename": name, "caption": "a red square", "negative_caption": "a blue square"}
        for k, name in enumerate(["VG_100K/1.jpg", "../outside/secret.jpg", str(secret)])})
    out = tmp_path / "out"
    assert evaluate.main(["--suites=vl_checklist,sugarcrepe", "--models=hardpos-tiny:", f"--out={out}",
                          f"--vl_checklist_root={vl_root}", f"--vl_checklist_images={images}",
                          f"--sugarcrepe_root={sugarcrepe}", f"--coco_val_images={images}",
                          "--workers=0", "--bootstrap=0"]) == 0
    suites = json.loads((out / "results.json").read_text())["models"][0]["suites"]
    for name in ("vl_checklist", "sugarcrepe"):
        assert suites[name]["scored"] == 1 and suites[name]["skip_reasons"] == {"path_outside_image_root": 2}, name
        scored = [json.loads(line) for line in (out / "hardpos-tiny_random" / f"{name}_scores.jsonl").open()]
        assert [r["example_id"] for r in scored] == ["Attribute/vg/color:0" if name == "vl_checklist" else "add_att:0"]


# ------------------------------------------------------------------------------ N41: not into a pipeline run folder

def test_n41_the_evaluator_refuses_an_out_folder_holding_a_pipeline_run(train_data, tmp_path, capsys):
    run = shutil.copytree(train_data.data, tmp_path / "run")
    (run / "report.md").write_text("# the pipeline run's report\n")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert evaluate.main(["--suites=vtab", "--models=hardpos-tiny:", f"--out={run}"]) == 2
    assert error_line(capsys).startswith(f"error: --out={run} holds a pipeline run (report.json)")
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
