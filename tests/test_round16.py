"""Round 16 (probe17, on 2fc435f; the W numbers are the probe's): what the outside suites hand to clip-benchmark and
webdataset (W1-W9, W19: a root flag as typed, URL syntax in a real path, a member decoded into GBs, samples split by a
nameless member, a damaged image, samples counted by member); folders a tool's output must stay out of (W10, W17)
and the images stage's own (W18); Dask's scheduler from the environment or a file (W11, W30, W31); checks that say
what they found (W12, W13, W42); records naming a field twice in the ranking suites (W14); the host's /proc mounted
elsewhere (W15); one evaluator per --out (W16); template lines (W19); a scores file checked before the scoring (W24);
a local image that is a FIFO (W28); a replace table that is no file (W32)."""
from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import time
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import VL_SAMPLE, run_cli


def _wds(folder: Path, members: dict, sparse: dict | None = None) -> Path:
    """A clip-benchmark WebDataset folder: test/0.tar holding `members` (name -> bytes; None: a member of no name
    webdataset reads, given as its own name) and `sparse` (name -> size of a hole)."""
    test = folder / "test"
    test.mkdir(parents=True)
    (test / "nshards.txt").write_text("1")
    with tarfile.open(test / "0.tar", "w") as tar:
        for name, data in members.items():
            if isinstance(data, int):
                hole = folder / "hole"
                with open(hole, "wb") as f:
                    f.truncate(data)
                tar.add(str(hole), arcname=name)
                hole.unlink()
                continue
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return folder


def _jpeg(size=(8, 8)) -> bytes:
    from PIL import Image

    found = io.BytesIO()
    Image.new("RGB", size).save(found, "JPEG")
    return found.getvalue()


# ------------------------------------------------------------------------- W1-W4: the path the libraries get

def test_w1_w2_imagenet_and_vtab_are_read_from_the_checked_real_path(tmp_path, monkeypatch):
    from pipeline.train.suites import zeroshot

    monkeypatch.chdir(tmp_path)
    odd = Path("pipe:touch PWNED;cat x")
    _wds(odd, {"s0.jpg": _jpeg(), "s0.cls": b"0"})
    _wds(odd / "wds_vtab-cifar10", {"s0.jpg": _jpeg(), "s0.cls": b"0"})
    seen = []
    monkeypatch.setattr(zeroshot, "classify", lambda ctx, folder, dataset: seen.append(str(folder)) or {"acc1": 0.0})
    zeroshot.run("imagenet", None, Namespace(imagenet_root=str(odd)))
    zeroshot.run("vtab", None, Namespace(vtab_root=str(odd)))
    assert seen == [os.path.realpath(odd), os.path.realpath(odd / "wds_vtab-cifar10")]
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("name", ["x::pipe:touch PWNED;cat ", "{ev,r}"])
def test_w3_w4_a_real_path_webdataset_reads_as_url_syntax_is_refused(name, tmp_path):
    from pipeline.train.clip import UsageError
    from pipeline.train.suites import root_flag

    root = tmp_path / name
    root.mkdir()
    with pytest.raises(UsageError, match="which webdataset reads as URL syntax"):
        root_flag(Namespace(retrieval_root=str(root)), "retrieval_root")


# ------------------------------------------------------------------------- W5-W9: what a shard holds

def test_w5_an_image_past_the_bound_is_refused_from_its_header(tmp_path):
    from PIL import Image

    from pipeline.train.suites import bounded_images

    path = tmp_path / "big.png"
    Image.new("RGB", (40, 40)).save(path)
    before = Image.MAX_IMAGE_PIXELS
    with bounded_images(40 * 40 * 3 - 1):
        with pytest.raises(Image.DecompressionBombError):
            Image.open(path)
    with bounded_images(40 * 40 * 3):
        Image.open(path).load()
    assert Image.MAX_IMAGE_PIXELS == before


@pytest.mark.parametrize("member", ["s0.npz", "s0.ten", "s0.msg", "s0.cbor", "s0.meta.pyd"])
def test_w6_members_webdataset_expands_or_builds_objects_from_are_refused(member, tmp_path):
    from pipeline.train.suites import shard_problem

    folder = _wds(tmp_path / "w", {"s0.jpg": _jpeg(), member: b"x" * 100})
    assert f"member {member!r} is a ." in shard_problem(str(folder / "test" / "0.tar"))


def test_w7_a_member_webdataset_skips_does_not_end_a_sample(tmp_path):
    from pipeline.train.suites import SAMPLE_LIMIT, shard_problem

    members = {}
    for i in range(3):
        members[f"zz{i}"] = b""  # no dot: webdataset skips it and goes on with the same sample
        members[f"s0.{i}.jpg"] = SAMPLE_LIMIT // 3 + 1
    folder = _wds(tmp_path / "w", members)
    assert "sample 's0' has" in shard_problem(str(folder / "test" / "0.tar"))


def test_w8_a_sample_webdataset_cannot_decode_fails_its_suite_in_one_line():
    from webdataset.autodecode import DecodingError

    from pipeline.train.suites.runner import _one_line, suite_errors

    assert DecodingError in suite_errors()
    try:
        try:
            raise OSError("cannot identify image file")
        except OSError as cause:
            raise DecodingError(key="s0", url="/x/0.tar", k="jpg") from cause
    except DecodingError as e:
        line = _one_line(e)
    assert line == "DecodingError (key s0 url /x/0.tar k jpg): OSError: cannot identify image file"


def test_w9_retrieval_counts_the_samples_the_loader_yields(tmp_path):
    from pipeline.train.suites.retrieval import count

    members = {}
    for k in range(3):
        members.update({f"s{k}.jpg": _jpeg(), f"s{k}.png": b"png", f"s{k}.txt": b"a dog\na cat\n"})
    members["s9.jpg"] = _jpeg()  # no caption: to_tuple never yields it
    assert count(_wds(tmp_path / "w", members)) == (3, 6)


def test_w19_a_template_with_a_format_field_of_its_own_is_refused(tmp_path):
    from pipeline.train.clip import UsageError
    from pipeline.train.suites.zeroshot import TEMPLATES, check_templates

    (tmp_path / TEMPLATES).write_text("a photo of a {c}.\nitap of a {c}.\n")
    check_templates(tmp_path)
    (tmp_path / TEMPLATES).write_text("a photo of a {c}.\na {c:x>30000000}.\n")
    with pytest.raises(UsageError, match="line 2 holds a brace other than"):
        check_templates(tmp_path)


# ------------------------------------------------------------------------- W10, W17, W18: folders of others

def test_w10_w17_no_tool_output_in_a_spill_folder_or_the_images_stages_folder(tmp_path):
    from pipeline.io import spill
    from pipeline.tables.folders import output_folder_problem

    spilled = tmp_path / f"{spill.PREFIX}train_negatives-0123456789ab"
    spilled.mkdir()
    (spilled / spill.MARK).write_text("")
    assert "a run's spill folder" in output_folder_problem("--out", spilled / "ckpt")
    images = tmp_path / "run" / "images"
    for name in ("shards", "index"):
        (images / name).mkdir(parents=True)
    (images / "settings.json").write_text("{}")
    assert "the images stage's folder" in output_folder_problem("--out", images / "shards")
    assert output_folder_problem("--out", tmp_path / "run" / "evaluation") is None


def test_w18_a_stray_file_in_the_images_shards_is_one_line(tmp_path):
    from pipeline.options import UsageError
    from pipeline.stages.images import check_images_path

    shards = tmp_path / "out" / "images" / "shards"
    shards.mkdir(parents=True)
    for name in ("00000.tar", "00000.parquet", "00000_stats.json", "_fetch_list.parquet"):
        (shards / name).write_bytes(b"")
    opts = SimpleNamespace(output_dir=str(tmp_path / "out"), images_dir=None)
    check_images_path(opts)
    (shards / "notes.json").write_text("{}")
    with pytest.raises(UsageError, match="shards/notes.json is not a file the images stage or img2dataset writes"):
        check_images_path(opts)


# ------------------------------------------------------------------------- W11, W30, W31: Dask's scheduler

def test_w11_a_local_cluster_is_the_runs_own_whatever_the_environment_names(monkeypatch):
    import dask
    import dask.distributed

    from pipeline.runners import dask_runner

    seen = {}

    class Stop(Exception):
        pass

    def client(**kwargs):
        seen.update(address=dask.config.get("scheduler-address", None), kwargs=kwargs)
        raise Stop

    monkeypatch.setattr(dask.distributed, "Client", client)
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://user:SECRET@127.0.0.1:9")
    dask.config.refresh()
    try:
        import apache_beam as beam
        from apache_beam.options.pipeline_options import PipelineOptions

        with pytest.raises(Stop):
            dask_runner.DaskRunner().run_pipeline(beam.Pipeline(), PipelineOptions(["--dask_workers=1"]))
    finally:
        monkeypatch.delenv("DASK_SCHEDULER_ADDRESS")
        dask.config.refresh()
    assert seen["address"] is None and "address" not in seen["kwargs"]


@pytest.mark.parametrize("kind", ["fifo", "secret", "missing"])
def test_w30_w31_a_scheduler_file_is_checked_before_dask_reads_it(kind, tmp_path):
    from pipeline.options import UsageError
    from pipeline.run import _check_scheduler_file

    path = tmp_path / "sched.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "secret":
        path.write_text(json.dumps({"address": "tcp://probeuser:SECRETSCHED@127.0.0.1:9"}))
    started = time.monotonic()
    with pytest.raises(UsageError, match="--dask_scheduler_file=") as refused:
        _check_scheduler_file(str(path))
    assert time.monotonic() - started < 5 and "SECRETSCHED" not in str(refused.value)
    path.unlink(missing_ok=True)
    path.write_text(json.dumps({"address": "tcp://127.0.0.1:8786"}))
    _check_scheduler_file(str(path))


# ------------------------------------------------------------------------- W12, W13, W42: the checks

def test_w12_w42_the_eval_sets_check_names_what_it_found(sample_output, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    run = tmp_path / "run"
    shutil.copytree(sample_output, run)
    vl = tmp_path / "vl"
    shutil.copytree(VL_SAMPLE, vl)
    spatial = vl / "Relation" / "vg" / "spatial.json"
    spatial.write_text(json.dumps(json.loads(spatial.read_text())[:1]))
    done = run_cli(str(run), f"--vl_checklist_root={vl}", module="pipeline.checks.eval_sets")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "no such record in --vl_checklist_root (the file holds 1)" in done.stdout + done.stderr
    pq.write_table(pa.table({"note": ["hello"]}), run / "replace" / "notes.parquet")
    done = run_cli(str(run), module="pipeline.checks.eval_sets")
    assert "replace: notes.parquet has no source_file column: not one of the table's shards" in \
        done.stdout + done.stderr and "Traceback" not in done.stderr


def test_w13_a_yield_target_names_a_type_and_a_fraction(tmp_path):
    import argparse

    from pipeline.checks.negatives import _fraction, _min_yield

    assert _min_yield("swap=0.5") == ("swap", 0.5)
    for bad in ("swpa=0.99", "replace=nan", "=0.5", "replace=1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            _min_yield(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        _fraction("nan")


def test_w13_a_target_for_a_type_the_run_did_not_make_is_not_met(tmp_path):
    from pipeline.run import main

    out = tmp_path / "out"
    assert main(["--stage=train_negatives", f"--coco_captions={VL_SAMPLE.parent / 'coco' / 'captions_sample.json'}",
                 "--negative_types=replace", f"--output_dir={out}", "--progress_seconds=0"]) == 0
    done = run_cli(str(out), "--min_yield=negclip=0.01", module="pipeline.checks.negatives")
    assert done.returncode == 1 and "negclip: a yield of 1% was asked, and the run made no negclip negatives" in \
        done.stdout


# ------------------------------------------------------------------------- W14: a field named twice

def test_w14_a_ranking_record_naming_a_field_twice_is_skipped_as_repeated_field(tmp_path):
    from pipeline.train.suites.ranking import sugarcrepe_rows, vl_checklist_rows

    vl = tmp_path / "vl" / "Attribute" / "vg"
    vl.mkdir(parents=True)
    (vl / "color.json").write_text('[["a.jpg", {"POS": ["a white ball"], "NEG": ["a red ball"], '
                                   '"POS": ["a red ball on grass"]}], ["b.jpg", {"POS": ["a cat"], "NEG": ["a dog"]}]]')
    rows, bad = vl_checklist_rows(tmp_path / "vl")
    assert [r["options"] for r in rows] == [["a cat", "a dog"]] and bad == {"repeated_field": 1}
    sugar = tmp_path / "sugar"
    sugar.mkdir()
    entry = '{"filename": "x.jpg", "caption": "a cat", "negative_caption": "a dog"}'
    (sugar / "add_att.json").write_text(f'{{"100": {entry}, "101": {entry}, "100": {entry}}}')
    rows, missing, bad = sugarcrepe_rows(sugar)
    assert [r["example_id"] for r in rows] == ["add_att:101"] and bad == {"repeated_field": 1}


# ------------------------------------------------------------------------- W15: the host's /proc elsewhere

def test_w15_a_kernel_file_system_mounted_anywhere_is_the_kernels():
    from pipeline.folder_lock import kernel_mounts

    mountinfo = ("36 35 98:0 / /host/my\\040proc rw,noatime master:1 - proc proc rw\n"
                 "37 35 98:0 / /data rw - ext4 /dev/sda1 rw\n"
                 "38 35 0:5 / /mnt/sys rw - sysfs sysfs rw\n")
    mounts = kernel_mounts(mountinfo)
    assert "/host/my proc/" in mounts and "/mnt/sys/" in mounts and "/proc/" in mounts
    assert not any(m.startswith("/data") for m in mounts)


# ------------------------------------------------------------------------- W16, W24: the evaluator's --out

def test_w16_a_second_evaluator_into_one_out_is_refused(tmp_path, capsys):
    from pipeline.folder_lock import holder_record, lock_local
    from pipeline.train.evaluate import main as evaluate

    out = tmp_path / "ev"
    fd = lock_local(str(out), holder_record("evaluate"), "--out")
    try:
        code = evaluate(["--models=hardpos-tiny:", f"--out={out}", "--suites=replace", "--workers=0",
                         f"--data={tmp_path}", f"--images={tmp_path}"])
    finally:
        os.close(fd)
    assert code == 2 and "--out" in capsys.readouterr().err


def test_w24_a_scores_file_that_cannot_be_written_fails_the_suite_before_its_scoring(tmp_path, monkeypatch):
    from pipeline.train.suites import ranking

    out = tmp_path / "ev" / "model"
    (out / "sugarcrepe_scores.jsonl").mkdir(parents=True)
    monkeypatch.setattr(ranking, "run_sugarcrepe", lambda *a: pytest.fail("scored before the check"))
    with pytest.raises(ValueError, match="sugarcrepe_scores.jsonl"):
        ranking.run("sugarcrepe", SimpleNamespace(out=out, slug="model"), Namespace())


# ------------------------------------------------------------------------- W28, W32: files that are no files

def test_w28_a_local_image_that_is_a_fifo_is_refused_not_opened(tmp_path):
    from pipeline.publish.images import REFUSED_URL_ERROR, FetchConfig, fetch_bounded

    os.mkfifo(tmp_path / "a.jpg")
    config = FetchConfig(images_dir=str(tmp_path / "images"), file_root=str(tmp_path), deadline=2)
    started = time.monotonic()
    key, body, error = fetch_bounded(("k", (tmp_path / "a.jpg").as_uri()), 2, None, [], config)
    assert body is None and error.startswith(REFUSED_URL_ERROR) and "not a regular file" in error
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/proc/self/environ"])
def test_w32_a_replace_table_that_is_no_file_is_one_line(kind, tmp_path):
    from pipeline.perturb.eval_replace import ReplaceTable

    path = tmp_path / "table.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path = Path(kind)
    started = time.monotonic()
    with pytest.raises(ValueError) as refused:
        ReplaceTable.load(path)
    assert time.monotonic() - started < 5 and "\n" not in str(refused.value)
