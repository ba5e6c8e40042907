"""Round 6 (probe6): no reader of a published folder follows a link (R49-R52), publish writes through no link at its
own folder (R55), and --llm_replay naming a FIFO or a device is one line, exit 2, before anything opens it (R42,
R57)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.publish.layout import write_run_folder
from pipeline.run import main
from pipeline.tables.folders import MANIFEST, PublishError
from pipeline.tables.load import load_table
from tests.image_fixtures import order_rows

ROOT = Path(__file__).resolve().parent.parent


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.fixture
def published(tmp_path, capsys) -> Path:
    """A published folder, built by publish from a run folder."""
    out = tmp_path / "out"
    write_run_folder(out / "run", "order_eval", order_rows(3, "own"))
    assert main(["--stage=publish", f"--output_dir={out}"]) == 0
    capsys.readouterr()
    assert len(load_table(str(out / "hub"), "order_eval")) == 3
    return out / "hub"


def _move_out_and_link(path: Path, outside: Path) -> None:
    """path moved to outside (same bytes, so every sha256 still matches) and a symbolic link to it left in place."""
    shutil.move(str(path), str(outside))
    path.symlink_to(outside)


def _refused_as_link(folder: Path, link: Path) -> None:
    with pytest.raises(PublishError) as e:
        load_table(str(folder), "order_eval")
    assert str(e.value).startswith(f"{link}: a symbolic link (to ") and "\n" not in str(e.value)


def test_r49_a_published_folder_whose_data_is_a_link_is_refused(published, tmp_path):
    _move_out_and_link(published / "data", tmp_path / "victim_data")
    _refused_as_link(published, published / "data")


def test_r50_a_published_table_folder_that_is_a_link_is_refused(published, tmp_path):
    _move_out_and_link(published / "data" / "order_eval", tmp_path / "victim_table")
    _refused_as_link(published, published / "data" / "order_eval")


def test_r51_a_published_shard_that_is_a_link_is_refused(published, tmp_path):
    shard = next((published / "data" / "order_eval").glob("*.parquet"))
    _move_out_and_link(shard, tmp_path / "victim.parquet")
    _refused_as_link(published, shard)


def test_r52_a_published_card_or_manifest_that_is_a_link_is_refused(published, tmp_path):
    _move_out_and_link(published / "README.md", tmp_path / "victim_README.md")
    _refused_as_link(published, published / "README.md")
    (published / "README.md").unlink()
    shutil.move(str(tmp_path / "victim_README.md"), str(published / "README.md"))
    _move_out_and_link(published / MANIFEST, tmp_path / "victim_manifest.json")
    _refused_as_link(published, published / MANIFEST)


def test_r55_publish_refuses_a_publish_folder_that_is_a_link_writing_nothing(tmp_path, capsys):
    out, victim = tmp_path / "out", tmp_path / "victim"
    write_run_folder(out / "run", "order_eval", order_rows(3, "own"))
    victim.mkdir()
    (out / "hub").symlink_to(victim)
    assert main(["--stage=publish", f"--output_dir={out}"]) == 2
    lines = error_lines(capsys)
    assert lines == [f"error: --publish_dir {out / 'hub'} is a symbolic link (to {victim}), which publish never "
                     f"follows or writes through; remove the link or choose another --publish_dir"], lines
    assert list(victim.iterdir()) == []
    # --publish_dir named explicitly: the same.
    assert main(["--stage=publish", f"--output_dir={out}", f"--publish_dir={out / 'hub'}"]) == 2
    assert len(error_lines(capsys)) == 1 and list(victim.iterdir()) == []


def _python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """code run in a fresh interpreter, killed after timeout seconds: what blocked or spun fails, never hangs."""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(params=["fifo", "device"])
def replay(request, tmp_path) -> str:
    if request.param == "device":
        return "/dev/zero"
    fifo = tmp_path / "replay.fifo"
    os.mkfifo(fifo)
    return str(fifo)


def test_r42_r57_read_replay_refuses_a_fifo_or_a_device_unopened(replay):
    done = _python("from pipeline.llm.engines import ReplayError, read_replay\n"
                   f"try:\n    list(read_replay({replay!r}))\nexcept ReplayError as e:\n    print(e)\n", timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith(f"{replay}: a ") and "not a regular file" in done.stdout


def test_r42_r57_the_launcher_refuses_a_replay_fifo_or_device_before_any_work(replay, tmp_path):
    captions = tmp_path / "captions.jsonl"
    captions.write_text('{"caption_id": 1, "caption": "a dog on a red sofa"}\n')
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "pipeline.run", "--runner=DirectRunner", "--stage=hard_positives",
                           "--llm_engine=replay", "--model=m", "--positive_types=replace", "--allow_empty",
                           f"--captions={captions}", f"--llm_replay={replay}", f"--output_dir={out}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith(f"error: --llm_replay: {replay}: a ") and "not a regular file" in lines[0]
    assert not out.exists()
