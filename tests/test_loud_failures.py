"""Failures a user can cause are loud: an empty table is an error unless --allow_empty, publish will not put an
empty config in the card, and an LLM server that does not answer is one line before any work."""
from __future__ import annotations

import json
import socket
import subprocess
import time

from pipeline.provenance import build_info
from pipeline.run import main
from tests.conftest import REPO, SAMPLES, one_error_line, report, run_cli
from tests.llm_fixtures import CompletionsServer, hard_positives

CAPTIONS = SAMPLES / "coco" / "captions_sample.json"


def empty_captions(path) -> str:
    """A COCO captions file whose every caption is rejected (empty_caption): no row can come of it."""
    data = {"images": [{"id": 1, "coco_url": "http://images.cocodataset.org/val2017/000000000001.jpg"}],
            "annotations": [{"id": 10, "image_id": 1, "caption": ""}, {"id": 11, "image_id": 1, "caption": "  "}]}
    path.write_text(json.dumps(data))
    return str(path)


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]


def test_a_stage_that_writes_no_rows_fails_and_leaves_the_folder_unless_allow_empty(tmp_path, capsys):
    args = ["--stage=order_eval", f"--coco_captions={empty_captions(tmp_path / 'c.json')}",
            f"--output_dir={tmp_path / 'out'}", "--progress_seconds=0"]
    assert main(args) == 1
    [line] = error_lines(capsys)
    assert "table order_eval has 0 rows (2 records read: 0 discarded, 2 rejected" in line and "--allow_empty" in line
    assert not (tmp_path / "out" / "report.json").exists()
    assert main([*args, "--allow_empty"]) == 0
    section = report(tmp_path / "out")["tables"]["order_eval"]
    assert section["rows"] == 0 and section["rejected"] == 2 and section["balanced"]


def test_publish_refuses_an_empty_config_or_leaves_it_out(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["--stage=order_eval", f"--coco_captions={CAPTIONS}", f"--output_dir={out / 'order'}",
                 "--progress_seconds=0"]) == 0
    assert main(["--stage=train_negatives", f"--coco_captions={empty_captions(tmp_path / 'c.json')}",
                 f"--output_dir={out / 'negatives'}", "--progress_seconds=0", "--allow_empty"]) == 0
    capsys.readouterr()
    hub = tmp_path / "hub"
    publish = ["--stage=publish", f"--output_dir={out}", f"--publish_dir={hub}"]
    assert main(publish) == 2
    [line] = error_lines(capsys)
    assert "table train_negatives" in line and "has 0 rows" in line and "--leave_out_empty" in line
    assert not hub.exists()
    assert main([*publish, "--leave_out_empty"]) == 0
    assert "skipped (--leave_out_empty): train_negatives: 0 rows" in capsys.readouterr().out
    card = (hub / "README.md").read_text()
    assert "config_name: order_eval" in card and "train_negatives" not in card
    # the hardpos that made the table and the one that published it, in the report and the card
    made_by = report(out / "order")["hardpos"]
    assert made_by == build_info() and made_by["version"] == "0.1.0"
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert made_by["git_commit"].startswith(commit.strip())
    assert f"`order_eval` by hardpos 0.1.0 ({made_by['git_commit']}); published by hardpos 0.1.0" in card
    assert not (hub / "data" / "train_negatives").exists()

    from datasets import load_dataset

    assert load_dataset(str(hub), "order_eval", split="test").num_rows > 0


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_llm_server_that_is_down_is_one_line_exit_2_before_any_work(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    started = time.monotonic()
    line = one_error_line(run_cli(*hard_positives(tmp_path / "out", f"--llm_base_url={url}")))
    assert f"--llm_base_url={url}: cannot reach the LLM server: GET {url}/models" in line, line
    assert time.monotonic() - started < 30 and not (tmp_path / "out").exists()


def test_a_base_url_that_is_not_the_api_root_says_so(tmp_path, capsys):
    with CompletionsServer() as server:
        root = server.base_url.removesuffix("/v1")
        assert main(hard_positives(tmp_path / "out", f"--llm_base_url={root}")) == 2
        [line] = error_lines(capsys)
        assert f"GET {root}/models: HTTP 404 (is --llm_base_url the API root" in line and server.requests == 0


def test_base_url_and_key_come_from_the_environment_and_the_cache_defaults_into_the_output(tmp_path, monkeypatch):
    out = tmp_path / "out"
    with CompletionsServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-local-test")
        assert main(hard_positives(out)) == 0
        assert server.model_lists == 1 and server.auth == "Bearer sk-local-test" and server.requests > 0
    inputs = report(out)["tables"]["hard_positives"]["inputs"]
    assert inputs["cache_dir"] == str(out / "llm_cache") and list((out / "llm_cache").rglob("*.jsonl"))


def test_the_openai_engine_with_no_url_at_all_names_both_ways_to_give_one(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert main(hard_positives(tmp_path / "out")) == 2
    [line] = error_lines(capsys)
    assert "--llm_engine=openai needs --llm_base_url or OPENAI_BASE_URL" in line
