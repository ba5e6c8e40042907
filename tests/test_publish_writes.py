"""Issue 27, what publish writes: the Hub login is checked before the folder is built (F1); it writes only into an
empty folder or one its own valid manifest describes (F2), never outside it and through no link it did not make
(F3); a full disk or a kill leaves the earlier release whole, or the next publish finishes the new one (F7); the run
folders it reads are held under their locks while it links their shards (issue 35, N28)."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import re
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pipeline.publish.layout

from pipeline.run import main
from pipeline.tables.folders import PublishError
from pipeline.tables.load import load_table
from tests.conftest import REPO, SAMPLES, one_error_line

CAPTIONS = SAMPLES / "coco" / "captions_sample.json"
MANIFEST = ".hardpos-publish.json"  # as pipeline.tables.folders names it
SHARD = "data/order_eval/test-00000-of-00001.parquet"


@pytest.fixture(scope="module")
def order_runs(tmp_path_factory) -> Path:
    """order_eval on the sample, as 4 shards (--rows_per_shard=10) and as 1: two releases of one table."""
    base = tmp_path_factory.mktemp("order_runs")
    for name, extra in (("four", ["--rows_per_shard=10"]), ("one", [])):
        args = ["--stage=order_eval", f"--coco_captions={CAPTIONS}", f"--output_dir={base / name / 'order'}"]
        assert main([*args, *extra]) == 0
    return base


@pytest.fixture
def four(order_runs, tmp_path) -> Path:
    return Path(shutil.copytree(order_runs / "four", tmp_path / "four"))


@pytest.fixture
def one(order_runs, tmp_path) -> Path:
    return Path(shutil.copytree(order_runs / "one", tmp_path / "one"))


def publish(output_dir: Path, publish_dir: Path, *extra: str) -> list[str]:
    return ["--stage=publish", f"--output_dir={output_dir}", f"--publish_dir={publish_dir}", *extra]


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every entry under folder (None for a folder), but the lock, whose content names the last holder."""
    return {p.relative_to(folder).as_posix(): (None if p.is_dir() else p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.name != ".hardpos.lock"}


def error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def example_ids(folder: Path, tmp_path: Path) -> list[str]:
    return sorted(load_table(str(folder), "order_eval", cache_dir=str(tmp_path / "hf_cache"))["example_id"])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_f1_publish_without_a_hub_login_or_network_is_one_line_and_builds_nothing(one, tmp_path):
    hub = tmp_path / "hub"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf_home"), HF_HUB_DISABLE_TELEMETRY="1",
               HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}")  # nothing listens there: no network
    for token, cause in ((None, "LocalTokenNotFoundError"), ("hf_stand_in", r"Connect\w*Error")):
        done = subprocess.run([sys.executable, "-m", "pipeline.run", *publish(one, hub, "--hub_repo=org/name")],
                              cwd=REPO, env={**env, **({"HF_TOKEN": token} if token else {})}, capture_output=True,
                              text=True, timeout=300)
        line = one_error_line(done, 2)
        assert line.startswith("error: cannot reach the Hub as a logged-in user") and re.search(cause, line), line
        assert "HF_TOKEN" in line
        assert not hub.exists()  # checked before the folder is built


class _CutOffHub:
    """A logged-in huggingface_hub.HfApi whose network goes down as the upload starts."""

    def whoami(self):
        return {"name": "someone"}

    def create_repo(self, **kw):
        pass

    def upload_folder(self, **kw):
        raise ConnectionResetError(104, "Connection reset by peer")

    upload_large_folder = upload_folder


def test_f1_an_upload_cut_off_by_the_network_is_one_line(one, tmp_path, monkeypatch, capsys):
    import huggingface_hub

    hub = tmp_path / "hub"
    monkeypatch.setattr(huggingface_hub, "HfApi", _CutOffHub)
    assert main(publish(one, hub, "--hub_repo=org/name")) == 2
    line = error_line(capsys)
    assert "to org/name failed (ConnectionResetError: [Errno 104] Connection reset by peer)" in line, line
    assert "run publish again to resume" in line
    assert example_ids(hub, tmp_path)  # the folder itself is complete


def test_f2_publish_leaves_a_users_own_hub_dataset_folder_alone(one, tmp_path, capsys):
    mine = tmp_path / "my_dataset"  # a Hub dataset folder of the user's: a card with configs, data/<cfg>/*.parquet
    (mine / "data" / "mycfg").mkdir(parents=True)
    (mine / "README.md").write_text("---\nconfigs:\n- config_name: mycfg\n  data_files: data/mycfg/*.parquet\n---\n"
                                    "# my dataset\n")
    pq.write_table(pa.table({"text": ["mine"]}), mine / "data" / "mycfg" / "train-00000-of-00001.parquet")
    before = snapshot(mine)
    code = main(publish(one, mine))
    assert snapshot(mine) == before
    assert code == 2
    assert error_line(capsys) == (f"error: --publish_dir {mine} holds README.md, and no {MANIFEST} from an earlier "
                                  f"publish: publish writes only into an empty folder or one it published; move that "
                                  f"away or choose another --publish_dir")


def test_f3_a_manifest_naming_paths_outside_the_folder_deletes_nothing(four, one, tmp_path, capsys):
    hub = tmp_path / "release" / "hub"
    assert main(publish(four, hub)) == 0
    capsys.readouterr()
    victims = [tmp_path / "victim.txt", tmp_path / "elsewhere" / "victim2.txt"]
    for victim in victims:
        victim.parent.mkdir(exist_ok=True)
        victim.write_text("the user's")
    manifest = json.loads((hub / MANIFEST).read_text())
    for listed in ("../../victim.txt", str(victims[1])):  # relative to hub, and absolute
        manifest["files"][listed] = {"sha256": "0" * 64, "rows": 1}
    (hub / MANIFEST).write_text(json.dumps(manifest))
    before = snapshot(hub)
    code = main(publish(one, hub))  # a release whose files replace every one the manifest lists
    assert [v.read_text() if v.exists() else None for v in victims] == ["the user's"] * 2
    assert snapshot(hub) == before
    assert code == 2
    assert error_line(capsys).startswith(f"error: {hub / MANIFEST}: not a manifest that publish wrote (it lists "
                                         f"'../../victim.txt', not a path publish writes)")


@pytest.mark.parametrize("planted", ["data/order_eval", "README.md"])
def test_f3_publish_follows_no_link_it_did_not_make(one, tmp_path, capsys, planted):
    hub = tmp_path / "hub"
    assert main(publish(one, hub)) == 0
    capsys.readouterr()
    elsewhere = tmp_path / "elsewhere"  # the user's files, where a link planted in the folder points
    elsewhere.mkdir()
    (elsewhere / Path(SHARD).name).write_text("the user's shard")
    (elsewhere / "notes.md").write_text("the user's notes")
    link = hub / planted
    shutil.rmtree(link) if link.is_dir() else link.unlink()
    link.symlink_to(elsewhere if planted.startswith("data") else elsewhere / "notes.md")
    code = main(publish(one, hub))
    assert sorted((p.name, p.read_text(errors="replace")[:16]) for p in elsewhere.iterdir()) == \
        [("notes.md", "the user's notes"), (Path(SHARD).name, "the user's shard")]
    assert link.is_symlink()
    assert code == 2
    assert f"holds {planted}, a symbolic link, which publish never follows or replaces" in error_line(capsys)


def test_f7_a_full_disk_during_publish_leaves_the_earlier_release_whole(four, one, tmp_path, monkeypatch, capsys):
    hub = tmp_path / "hub"
    assert main(publish(four, hub)) == 0
    before, rows_before = snapshot(hub), example_ids(hub, tmp_path)
    assert len(list((hub / "data" / "order_eval").glob("*.parquet"))) == 4
    capsys.readouterr()

    def copy_until_the_disk_is_full(source, out):
        data = source.read()
        out.write(data[:len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), out.name)

    with monkeypatch.context() as m:
        m.setattr(pipeline.publish.layout, "copy_hashed", copy_until_the_disk_is_full)
        assert main(publish(one, hub)) == 2
    line = error_line(capsys)
    assert line.startswith(f"error: {hub}: disk full while building the new release") and \
        line.endswith("the folder is left as it was, nothing was uploaded"), line
    assert snapshot(hub) == before  # nothing replaced, nothing left beside it
    assert example_ids(hub, tmp_path) == rows_before
    assert main(publish(one, hub)) == 0  # with room again
    assert [p.name for p in (hub / "data" / "order_eval").iterdir()] == [Path(SHARD).name]
    assert example_ids(hub, tmp_path) == rows_before


class Killed(BaseException):
    """SIGKILL, as far as the code under test can tell: nothing after it runs."""


def test_f7_a_publish_killed_while_building_leaves_the_earlier_release_whole(four, one, tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    assert main(publish(one, hub)) == 0
    before, rows_before = snapshot(hub), example_ids(hub, tmp_path)
    copy, made = pipeline.publish.layout.copy_hashed, []

    def killed_at_the_second_shard(source, out):
        if made:
            raise Killed()
        made.append(out.name)
        return copy(source, out)

    with monkeypatch.context() as m, pytest.raises(Killed):
        m.setattr(pipeline.publish.layout, "copy_hashed", killed_at_the_second_shard)
        main(publish(four, hub))
    assert {k: v for k, v in snapshot(hub).items() if not k.startswith(".hardpos-")} == \
        {k: v for k, v in before.items() if not k.startswith(".hardpos-")}  # publish's own leftovers aside
    assert example_ids(hub, tmp_path) == rows_before
    assert main(publish(four, hub)) == 0  # and the next publish clears what the killed one left
    assert sorted(p.name for p in hub.iterdir()) == [".hardpos-publish.json", ".hardpos-publish.md", ".hardpos.lock",
                                                     "README.md", "data"]
    assert len(list((hub / "data" / "order_eval").iterdir())) == 4


def test_f7_a_publish_killed_while_switching_is_finished_by_the_next_one(four, one, tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    assert main(publish(four, hub)) == 0
    replace = os.replace

    def killed_at_the_card(src, dst, *args, **kwargs):
        if Path(dst).name == "README.md":
            raise Killed()
        return replace(src, dst, *args, **kwargs)

    with monkeypatch.context() as m, pytest.raises(Killed):
        m.setattr(os, "replace", killed_at_the_card)
        main(publish(one, hub))
    with pytest.raises(PublishError, match="run publish again to finish it"):
        load_table(str(hub), "order_eval", cache_dir=str(tmp_path / "hf_cache"))
    assert main(publish(one, hub)) == 0
    assert [p.name for p in (hub / "data" / "order_eval").iterdir()] == [Path(SHARD).name]
    assert json.loads((hub / MANIFEST).read_text())["files"][SHARD]["rows"] == 34
    assert len(example_ids(hub, tmp_path)) == 34


def _can_mount_a_private_tmpfs() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", "/mnt"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def on_a_small_disk(one: str, four: str, mount: str, size: int, result: str) -> None:
    """Run inside `unshare -rm` (a mount namespace of its own): publishes `one` onto a tmpfs of `size` bytes, then
    `four`, which does not fit; writes what it saw to `result` (the tmpfs goes with the namespace)."""
    import contextlib
    import io

    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mount], check=True)
    hub = Path(mount) / "hub"
    seen = {"first": main(publish(Path(one), hub))}
    before = snapshot(hub)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        seen["second"] = main(publish(Path(four), hub))
    seen.update(stderr=err.getvalue(), unchanged=snapshot(hub) == before,
                rows=len(load_table(str(hub), "order_eval", cache_dir=str(Path(result).parent / "hf_cache"))))
    Path(result).write_text(json.dumps(seen))


@pytest.mark.skipif(not _can_mount_a_private_tmpfs(), reason="needs `unshare -rm` (user and mount namespaces)")
def test_f7_a_really_full_disk_leaves_the_earlier_release_whole(four, one, tmp_path):
    mount, result = tmp_path / "small_disk", tmp_path / "result.json"
    mount.mkdir()
    # Room for the one-shard release and its card, not for the four-shard one beside it (files are copied: the
    # tmpfs is another disk than the runs).
    size = -(-(one / "order" / "order_eval" / Path(SHARD).name).stat().st_size // 4096) * 4096 + 32 * 1024
    assert sum(p.stat().st_size for p in (four / "order" / "order_eval").iterdir()) > 32 * 1024
    args = [str(one), str(four), str(mount), size, str(result)]
    code = f"from tests.test_publish_writes import on_a_small_disk; on_a_small_disk(*{args!r})"
    done = subprocess.run(["unshare", "-rm", sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(result.read_text())
    assert seen["first"] == 0 and seen["second"] == 2
    assert seen["stderr"] == (f"error: {mount / 'hub'}: disk full while building the new release beside the earlier "
                              f"one; the folder is left as it was, nothing was uploaded\n")
    assert seen["unchanged"] and seen["rows"] == 34


def test_n28_a_stage_cannot_commit_into_a_run_folder_while_publish_links_its_shards(one, tmp_path, monkeypatch):
    """An order_eval --seed=1 run into the run folder between publish's checks and its links: 00ef301 published a
    manifest naming the seed-0 shard's sha256 over the seed-1 shard (load_table refused it, datasets read it). Now
    publish holds the run folder's lock: that run is refused, and every published file is the one its manifest
    names."""
    import pipeline.stages.publish

    real_place = pipeline.stages.publish.place
    meanwhile = []

    def place_after_a_commit(src, dest, *checked):
        if not meanwhile:
            meanwhile.append(main(["--stage=order_eval", f"--coco_captions={CAPTIONS}", f"--output_dir={one / 'order'}",
                                   "--seed=1", "--progress_seconds=0"]))
        return real_place(src, dest, *checked)

    monkeypatch.setattr(pipeline.stages.publish, "place", place_after_a_commit)
    assert main(publish(one, tmp_path / "hub")) == 0
    assert meanwhile == [2]
    files = json.loads((tmp_path / "hub" / MANIFEST).read_text())["files"]
    assert {path: hashlib.sha256((tmp_path / "hub" / path).read_bytes()).hexdigest() for path in files} == \
        {path: entry["sha256"] for path, entry in files.items()}
    assert len(example_ids(tmp_path / "hub", tmp_path)) == 34
