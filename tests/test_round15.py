"""Round 15 (probe15, on 6fdc049; the Z numbers are the probe's): the evaluator's outside suites read their folders
as checked local paths (Z1-Z5, Z9, Z11: a `pipe:` folder name ran a command in webdataset, a FIFO hung, a link to
the kernel's environment was quoted into results.json, a sparse file or a shard count was read whole); reports and
cards read with a bound (Z6); a check's error says why (Z7); no tool output inside a run's staging folder (Z8); a
webdataset sample naming its caption twice (Z10); a Dask address Dask cannot use (Z12)."""
from __future__ import annotations

import os
import tarfile
import tracemalloc
import time
from argparse import Namespace
from pathlib import Path

import pytest

from conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CAPTIONS = ROOT / "samples" / "coco" / "captions_sample.json"


# ---------------------------------------------------------------------------- Z1-Z5, Z9, Z11: the outside suites

def test_z1_a_suite_root_reaches_the_libraries_as_its_absolute_real_path(tmp_path, monkeypatch):
    from pipeline.train.suites import root_flag

    monkeypatch.chdir(tmp_path)
    odd = tmp_path / "pipe:touch PWNED;cat x"
    odd.mkdir()
    found = root_flag(Namespace(retrieval_root="pipe:touch PWNED;cat x"), "retrieval_root")
    assert found.is_absolute() and str(found) == os.path.realpath(odd) and not str(found).startswith("pipe:")
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("planted", ["environ", "fifo", "huge_json"])
def test_z2_z4_z11_a_suite_folder_holding_what_no_suite_publishes_is_refused_in_one_line(planted, tmp_path):
    from pipeline.train.clip import UsageError
    from pipeline.train.suites import TEXT_LIMIT, root_flag

    root = tmp_path / "sugarcrepe"
    (root / "test").mkdir(parents=True)
    (root / "add_att.json").write_text("[]")
    if planted == "environ":
        (root / "test" / "nshards.txt").symlink_to("/proc/self/environ")
    elif planted == "fifo":
        os.mkfifo(root / "test" / "classnames.txt")
    else:
        with open(root / "replace_rel.json", "wb") as f:
            f.truncate(TEXT_LIMIT + 1)
    tracemalloc.start()
    try:
        with pytest.raises(UsageError, match="--sugarcrepe_root=") as refused:
            root_flag(Namespace(sugarcrepe_root=str(root)), "sugarcrepe_root")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20 and "OPENAI" not in str(refused.value)


def test_z5_a_shard_count_the_folder_does_not_hold_is_refused(tmp_path):
    from pipeline.train.clip import UsageError
    from pipeline.train.suites.zeroshot import is_wds_folder

    test = tmp_path / "wds_mscoco_captions" / "test"
    test.mkdir(parents=True)
    for k in range(2):
        with tarfile.open(test / f"{k}.tar", "w"):
            pass
    (test / "nshards.txt").write_text("2\n")
    assert is_wds_folder(test.parent)
    for text in ("3000000", "3", "-1", "x", "\uff12"):
        (test / "nshards.txt").write_text(text)
        with pytest.raises(UsageError, match="nshards.txt: says"):
            is_wds_folder(test.parent)


# --------------------------------------------------------------------------------------------- Z6: bounded reads

def test_z6_a_huge_report_or_card_is_never_read_whole(tmp_path):
    from pipeline.tables.folders import REPORT_LIMIT, PublishError, is_published_folder, read_report

    with open(tmp_path / "report.json", "wb") as f:
        f.truncate(REPORT_LIMIT + 1)
    (tmp_path / "data").mkdir()
    with open(tmp_path / "README.md", "wb") as f:
        f.write(b"---\nconfigs:\n- config_name: x\n---\n")
        f.truncate(1 << 30)
    tracemalloc.start()
    try:
        with pytest.raises(PublishError, match="more than hardpos writes"):
            read_report(tmp_path / "report.json")
        assert is_published_folder(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


# ----------------------------------------------------------------------------------------- Z7, Z8, Z10, Z12

def test_z7_a_check_says_why_a_file_cannot_be_read():
    from pipeline.checks import one_line

    assert "cannot be read as a file" in one_line(FileNotFoundError("/out/replace/zz.parquet"))
    assert one_line(FileNotFoundError(2, "No such file or directory", "/x")).endswith("No such file or directory: '/x'")


def test_z8_no_tool_output_inside_a_runs_staging_folder(tmp_path):
    from pipeline.tables.folders import output_folder_problem

    marked = tmp_path / "run" / ".staging-hard_positives-0123456789ab"
    marked.mkdir(parents=True)
    (marked / ".hardpos-staging").write_text("")
    assert "a run's staging folder" in output_folder_problem("--out", marked / "ckpt")
    mine = tmp_path / "run" / ".staging-mine"  # a user's folder named so, unmarked: recovery never touches it
    mine.mkdir()
    assert output_folder_problem("--out", mine / "ckpt") is None


def test_z8_the_multi_suite_evaluator_refuses_a_staging_folder_before_making_its_out(tmp_path, capsys):
    from pipeline.train.evaluate import main as evaluate

    marked = tmp_path / ".staging-order_eval-0123456789ab"
    marked.mkdir()
    (marked / ".hardpos-staging").write_text("")
    code = evaluate(["--models=hardpos-tiny:", f"--out={marked / 'ev'}", "--suites=replace", "--workers=0",
                     f"--data={tmp_path}", f"--images={tmp_path}"])
    assert code == 2 and "a run's staging folder" in capsys.readouterr().err and not (marked / "ev").exists()


def test_z10_a_webdataset_sample_naming_its_caption_twice_is_rejected(tmp_path):
    import io

    from pipeline.run import main

    def add(tar, name, data: bytes):
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(tmp_path / "00000.tar", "w") as tar:
        add(tar, "k1.jpg", b"\xff\xd8\xff")
        add(tar, "k1.txt", b"a dog runs on the grass")
        add(tar, "k1.txt", b"a cat sleeps on the sofa")
        add(tar, "k2.jpg", b"\xff\xd8\xff")
        add(tar, "k2.txt", b"a man rides a horse on the beach")
    assert main(["--stage=train_negatives", f"--captions={tmp_path}/*.tar", "--captions_format=webdataset",
                 f"--output_dir={tmp_path / 'out'}", "--allow_empty", "--progress_seconds=0"]) in (0, 1)
    import json

    section = json.loads((tmp_path / "out" / "report.json").read_text())["tables"]["train_negatives"]
    assert section["read"] == 2 and section["reject_reasons"].get("repeated_field") == 1 and section["balanced"]


def test_z12_a_dask_address_dask_cannot_use_is_one_line(tmp_path):
    done = run_cli("--stage=order_eval", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={tmp_path / 'out'}",
                   "--runner=DaskRunner", "--dask_client_address=tls://127.0.0.1:9")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "error: Dask: no cluster to run on" in done.stderr


# ----------------------------------------------------------------------- probe16 (on 6c3f4d7): fixed at once

def test_v5_v6_a_staging_folder_reached_through_a_link_is_still_one(tmp_path):
    from pipeline.tables.folders import output_folder_problem, staging_folder_holding

    marked = tmp_path / "run" / ".staging-hard_positives-0123456789ab"
    marked.mkdir(parents=True)
    (marked / ".hardpos-staging").write_text("")
    (tmp_path / "alias").symlink_to(marked)
    assert staging_folder_holding(tmp_path / "alias" / "pub") == marked
    assert "a run's staging folder" in output_folder_problem("--out", tmp_path / "alias" / "ev")


def test_v1_links_branching_to_the_same_folders_are_walked_once(tmp_path):
    import time

    from pipeline.train.suites import suite_root_problem

    for level in range(40):  # 2^40 paths if every link were followed as a path of its own
        here = tmp_path / f"d{level}"
        here.mkdir()
        if level:
            for name in ("a", "b"):
                (tmp_path / f"d{level - 1}" / name).symlink_to(here)
    (tmp_path / "d39" / "x.json").write_text("{}")
    started = time.process_time()
    assert suite_root_problem(str(tmp_path / "d0")) is None
    assert time.process_time() - started < 5


def test_v3_v4_a_shard_that_is_no_tar_fails_its_suite_not_the_run():
    import tarfile

    from pipeline.train.suites.runner import SUITE_ERRORS

    assert issubclass(tarfile.ReadError, SUITE_ERRORS)


def test_v8_a_captions_file_named_to_the_check_is_never_dropped_silently(tmp_path):
    import json

    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text(json.dumps({"tables": {"train_negatives": {
        "read": 1, "rejected": 0, "balanced": True, "negative_types": {}}}}))
    done = run_cli(str(out), f"--coco_captions={tmp_path / 'missing.json'}", module="pipeline.checks.negatives")
    assert done.returncode == 2 and "--coco_captions=" in done.stderr and "no such file" in done.stderr


# ---------------------------------------------------------------------------- V2, V7 and after: inside a suite's shard

def _shard(folder: Path, members: dict, mode: str = "w", sparse: dict | None = None) -> Path:
    """test/0.tar of a clip-benchmark retrieval folder holding `members` (name -> bytes) and `sparse` (name -> a
    size whose bytes are a hole)."""
    import io

    test = folder / "test"
    test.mkdir(parents=True)
    (test / "nshards.txt").write_text("1")
    (folder / "dataset_type.txt").write_text("retrieval")
    with tarfile.open(test / "0.tar", mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, size in (sparse or {}).items():
            hole = folder / "hole"
            with open(hole, "wb") as f:
                f.truncate(size)
            with open(hole, "rb") as f:
                info = tar.gettarinfo(str(hole), arcname=name)
                tar.addfile(info, f)
            hole.unlink()
    return folder


@pytest.mark.parametrize("case", ["gzip_caption", "sparse_caption", "one_big_sample", "pickle", "torch", "gz_member"])
def test_v2_v7_a_shard_member_past_its_bound_or_decoded_by_running_code_is_refused(case, tmp_path):
    import pickle

    from pipeline.train.clip import UsageError
    from pipeline.train.suites import MEMBER_TEXT_LIMIT, SAMPLE_LIMIT, root_flag

    root = tmp_path / "retrieval"
    folder = root / "wds_mscoco_captions"
    image = b"\xff\xd8" + b"x" * 100
    if case == "gzip_caption":  # V2: a few KB on disk, 64 MiB of caption lines once read
        _shard(folder, {"s0.jpg": image, "s0.txt": b"a cat\n" * (MEMBER_TEXT_LIMIT // 6 + 1)}, mode="w:gz")
        assert (folder / "test" / "0.tar").stat().st_size < 1 << 20
    elif case == "sparse_caption":  # V7
        _shard(folder, {"s0.jpg": image}, sparse={"s0.txt": 512 << 20})
    elif case == "one_big_sample":  # small members under one key, together past a sample
        _shard(folder, {"s0.jpg": image}, sparse={f"s0.x{k}": SAMPLE_LIMIT // 4 for k in range(5)})
    elif case == "pickle":
        _shard(folder, {"s0.jpg": image, "s0.txt": b"a cat", "s0.pyd": pickle.dumps({"x": 1})})
    elif case == "torch":
        _shard(folder, {"s0.jpg": image, "s0.txt": b"a cat", "s0.meta.PTH": b"x"})
    else:
        _shard(folder, {"s0.jpg": image, "s0.txt.gz": b"x"})
    started = time.process_time()
    tracemalloc.start()
    try:
        with pytest.raises(UsageError, match="--retrieval_root=.*0.tar: (member|sample) ") as refused:
            root_flag(Namespace(retrieval_root=str(root)), "retrieval_root")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20 and time.process_time() - started < 20, (peak, str(refused.value))
    assert "\n" not in str(refused.value)


def test_a_published_shaped_shard_passes_the_walk(tmp_path):
    from pipeline.train.suites import suite_root_problem

    root = tmp_path / "retrieval"
    _shard(root / "wds_flickr30k", {f"s{k}.{ext}": data for k in range(3)
                                    for ext, data in (("webp", b"RIFF" + b"x" * 4000), ("txt", b"a dog\na cat\n"),
                                                      ("json", b"{}"))})
    assert suite_root_problem(str(root)) is None


class _RunsCode:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_a_pickled_member_never_runs_when_the_evaluator_is_pointed_at_its_shard(tmp_path, capsys):
    """On 8784b04 webdataset unpickled s0.pyd while clip-benchmark read the sample: the file named ran."""
    import pickle

    from pipeline.train.evaluate import main as evaluate

    import io

    from PIL import Image

    marker, jpeg = tmp_path / "PWNED", io.BytesIO()
    Image.new("RGB", (8, 8)).save(jpeg, "JPEG")
    _shard(tmp_path / "ret" / "wds_mscoco_captions",
           {"s0.jpg": jpeg.getvalue(), "s0.txt": b"a cat", "s0.pyd": pickle.dumps(_RunsCode(str(marker)))})
    code = evaluate(["--models=hardpos-tiny:", f"--out={tmp_path / 'ev'}", "--suites=coco_retrieval",
                     f"--retrieval_root={tmp_path / 'ret'}", "--workers=0"])
    err = capsys.readouterr().err
    assert code == 2 and "s0.pyd" in err and "running the code" in err and not marker.exists()
