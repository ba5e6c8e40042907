"""Release: --stage=all on the sample with progress, the Hub folder and card, loading it back, the upload calls."""
import re
import shutil
import socket
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from pipeline.checks.separability import separate
from pipeline.publish.upload import UploadError, upload
from pipeline.run import main
from pipeline.tables.folders import PublishError, find_tables
from pipeline.tables.load import load_table
from tests.conftest import PROGRESS_LINE, SAMPLES, eval_sets_args, report, rows_of, run_cli

REPLAY = SAMPLES / "coco" / "hard_positives_replay.jsonl"
CAPTIONS = SAMPLES / "coco" / "captions_sample.json"
EXPECTED_CONFIGS = {"replace_eval", "swap_eval", "order_eval", "train_negatives", "hard_positives", "train"}


def all_stage_args(out, *extra):
    return ["--stage=all", f"--coco_captions={CAPTIONS}", "--negative_types=all", "--llm_engine=replay",
            f"--llm_replay={REPLAY}", "--model=hand-written-sample", f"--cache_dir={out / 'llm_cache'}",
            f"--output_dir={out / 'all'}", *extra]


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """A full fixture run, as `make sample` does it: eval_sets, order_eval and --stage=all in one folder each."""
    out = tmp_path_factory.mktemp("release")
    assert main(eval_sets_args(out / "eval_sets")) == 0
    assert main(["--stage=order_eval", f"--coco_captions={CAPTIONS}", f"--output_dir={out / 'order_eval'}"]) == 0
    done = run_cli(*all_stage_args(out, "--progress_seconds=0.5"))
    assert done.returncode == 0, done.stderr
    return out, done


def parquet_rows(folder: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in folder.glob("*.parquet"))


def written_tables(out: Path) -> dict[str, int]:
    """config -> rows, counted from the run folders' Parquet files without the publish code."""
    counts = {}
    for path in out.glob("*/*/*.parquet"):
        if path.parent.name in ("rejected", "discarded") or "hub" in path.parts:
            continue
        config = pq.read_schema(path).metadata[b"hardpos.table"].decode()
        counts[config] = counts.get(config, 0) + pq.ParquetFile(path).metadata.num_rows
    return counts


def test_stage_all_on_the_sample_prints_progress_then_the_summary(release):
    out, done = release
    progress = [line for line in done.stderr.splitlines() if PROGRESS_LINE.match(line)]
    assert progress, done.stderr
    counted = [line for line in progress
               if re.search(r"\b(train_negatives|hard_positives|train) [\d,]+(/[\d,]+)? ", line)]
    assert counted, progress
    summary = done.stdout
    for table in ("train_negatives", "hard_positives", "train"):
        assert re.search(rf"^{table}\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+yes$", summary, re.M), summary
    assert "done in" in summary
    markdown = (out / "all" / "report.md").read_text()
    assert "| train | 41 |" in markdown and "no_hard_positive" in markdown
    # the LLM is asked only about the captions no rule covers (4 of the 37 good ones); the sample's hand-written
    # answers to those are all accepted
    hp = report(out / "all")["tables"]["hard_positives"]
    assert hp["accepted"] == hp["prompts"] == 4 and hp["rejected_generations"] == 0 and hp["balanced"]
    assert hp["llm_prompts"] == "uncovered" and hp["prompts_saved"] == 40
    rule_rows = {t: v["rows"] for t, v in hp["rule_types"].items()}
    assert hp["rows"] == 4 + sum(rule_rows.values()) and all(n > 0 for n in rule_rows.values())
    assert set(rule_rows) == {"rule_swap", "rule_converse", "rule_voice", "rule_clause", "rule_replace"}
    # the LLM's positive where it was accepted, else a rule's: most good captions make a training triple
    train = report(out / "all")["tables"]["train"]
    assert train["rows"] >= 0.6 * (train["read"] - train["rejected"])


def test_the_train_report_says_how_well_a_text_only_model_separates_its_texts(release):
    out, done = release
    train = report(out / "all")["tables"]["train"]
    figures = train["separability"]
    rows = rows_of(out / "all", "train")
    types = {"by_positive_type": {r["positive_type"] for r in rows},
             "by_negative_type": {r["negative_type"] for r in rows}}
    for name in ("p_vs_n", "c_vs_p", "c_vs_n"):
        assert figures[name]["pairs"] == train["rows"] == len(rows)
        for by, seen in types.items():
            assert set(figures[name][by]) == seen and sum(f["pairs"] for f in figures[name][by].values()) == len(rows)
    assert figures["classifier"]["folds"] == 5 and figures["classifier"]["seed"] == 0
    # the stage's combine and side input give what the module gives on the rows as written
    assert figures == separate(rows, 0)
    line = next(line for line in done.stdout.splitlines() if "text-only separability" in line)
    assert re.fullmatch(r"  train text-only separability \(chance 50%\): P vs N [\d.]+%, C vs P [\d.]+%, "
                        r"C vs N [\d.]+%", line), line
    markdown = (out / "all" / "report.md").read_text()
    assert "**train, text-only separability**" in markdown
    assert f"| all | {len(rows):,} | {figures['p_vs_n']['accuracy']:.1%} | " in markdown


def test_progress_lines_come_while_rows_are_still_arriving(release):
    _, done = release
    totals = [sum(int(n.replace(",", "")) for n in re.findall(r"(\d[\d,]*) rows", line))
              for line in done.stderr.splitlines() if PROGRESS_LINE.match(line)]
    assert totals and totals[0] < totals[-1], totals


@pytest.fixture(scope="module")
def published(release):
    out, _ = release
    args = ["--stage=publish", f"--output_dir={out}", "--hub_repo=hardpos-test/sample", "--dry_run"]
    return out, args


def test_dry_run_prints_plan_and_a_card_whose_yaml_covers_every_table(published, capsys, monkeypatch):
    out, args = published

    def no_network(*a, **k):
        raise AssertionError("the dry run opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    assert main(args) == 0
    printed = capsys.readouterr().out
    card = printed.split("--- README.md ---\n", 1)[1].split("--- end of README.md", 1)[0]
    front = card.split("---\n")[1]
    meta = yaml.safe_load(front)
    written = written_tables(out)
    assert set(written) == EXPECTED_CONFIGS
    assert {c["config_name"] for c in meta["configs"]} == set(written)
    info = {i["config_name"]: i for i in meta["dataset_info"]}
    hub = out / "hub"
    for config, rows in written.items():
        assert info[config]["splits"][0]["num_examples"] == rows
        assert parquet_rows(hub / "data" / config) == rows
        pattern = next(c for c in meta["configs"] if c["config_name"] == config)["data_files"][0]["path"]
        assert sorted(hub.glob(pattern)) == sorted((hub / "data" / config).glob("*.parquet"))
        assert f"data/{config}/" in printed  # the plan names each file
    assert (hub / "README.md").read_text() == card
    assert "license: other" in front and "@inproceedings{kamath2024hard" in card
    assert "hand-written-sample" in card and "prompt <code>replace</code>" in card
    figures = report(out / "all")["tables"]["train"]["separability"]
    assert (f"- text-only separability ({figures['p_vs_n']['pairs']:,} rows): P vs N "
            f"{figures['p_vs_n']['accuracy']:.1%}, C vs P {figures['c_vs_p']['accuracy']:.1%}") in card
    assert card.count("text-only separability") == 1 and "Chance is 50%" in card
    # the rule positives' diversity, and what was held out of the REPLACE set (issue 33)
    rules = report(out / "all")["tables"]["hard_positives"]["rule_types"]
    for kind, stats in rules.items():
        assert f"- `{kind}`: {stats['rows']:,} rows using {stats['distinct_substitutions']:,} distinct" in card
    assert "were held out of the rule positives" in card and "sitting <-> seated" in card
    assert "SWAP evaluation set: `rule_swap` exchanges" in card
    assert "nothing uploaded" in printed


def test_the_published_folder_loads_every_config_with_datasets(published, tmp_path):
    import datasets

    out, args = published
    assert main(args) == 0
    written = written_tables(out)
    for config, rows in written.items():
        # the card's row counts are checked by datasets itself (NonMatchingSplitsSizesError otherwise)
        loaded = datasets.load_dataset(str(out / "hub"), config, cache_dir=str(tmp_path / "cache"))
        assert sum(split.num_rows for split in loaded.values()) == rows
    swap = datasets.load_dataset(str(out / "hub"), "swap_eval", split="test", cache_dir=str(tmp_path / "cache"))
    assert all(len(r["attributes"]) == 2 for r in swap)


def test_load_table_reads_run_folders_and_published_folders_alike(published, tmp_path):
    out, args = published
    assert main(args) == 0
    for config in ("replace", "swap_eval", "train"):
        from_run = load_table(str(out), config, cache_dir=str(tmp_path / "a"))
        from_hub = load_table(str(out / "hub"), config, cache_dir=str(tmp_path / "b"))
        assert sorted(from_run["example_id"]) == sorted(from_hub["example_id"])
        assert from_run.num_rows > 0
    with pytest.raises(PublishError, match="no table"):
        load_table(str(out), "nonexistent")


def test_publish_refuses_a_folder_whose_files_disagree_with_its_report(release, tmp_path, capsys):
    out, _ = release
    copy = tmp_path / "copy"
    shutil.copytree(out / "eval_sets", copy / "eval_sets")
    extra = copy / "eval_sets" / "replace" / "test-00000-of-00002.parquet"
    shutil.copy(copy / "eval_sets" / "replace" / "test-00000-of-00001.parquet", extra)
    assert main(["--stage=publish", f"--output_dir={copy}"]) == 2
    assert "not in the report" in capsys.readouterr().err
    extra.unlink()
    shutil.copytree(out / "eval_sets", copy / "eval_sets_again")
    with pytest.raises(PublishError, match="written by two runs"):
        find_tables(copy)


def test_republishing_fewer_shards_leaves_no_stale_file(release, tmp_path):
    out, _ = release
    work = tmp_path / "work"
    assert main([*eval_sets_args(work / "eval_sets"), "--rows_per_shard=10"]) == 0
    assert main(["--stage=publish", f"--output_dir={work}"]) == 0
    assert len(list((work / "hub" / "data" / "replace_eval").glob("*.parquet"))) == 4
    assert main(eval_sets_args(work / "eval_sets")) == 0
    assert main(["--stage=publish", f"--output_dir={work}"]) == 0
    assert [p.name for p in (work / "hub" / "data" / "replace_eval").glob("*.parquet")] == \
        ["test-00000-of-00001.parquet"]


class FakeHub:
    """Records the calls the upload makes; has the huggingface_hub 2.x surface (upload_folder)."""

    def __init__(self, logged_in=True, remote=()):
        self.calls, self.logged_in, self.remote = [], logged_in, list(remote)

    def whoami(self):
        if not self.logged_in:
            raise OSError("401 no token")
        return {"name": "someone"}

    def create_repo(self, **kw):
        self.calls.append(("create_repo", kw))

    def upload_folder(self, **kw):
        self.calls.append(("upload_folder", kw))

    def list_repo_files(self, **kw):
        return self.remote

    def create_commit(self, **kw):
        self.calls.append(("create_commit", kw))


def test_upload_creates_a_dataset_repo_uploads_the_folder_and_removes_stale_shards(tmp_path):
    folder = tmp_path / "hub"
    (folder / "data" / "train").mkdir(parents=True)
    (folder / "data" / "train" / "train-00000-of-00001.parquet").write_bytes(b"x")
    (folder / "README.md").write_text("card")
    hub = FakeHub(remote=["README.md", "data/train/train-00000-of-00001.parquet",
                          "data/train/train-00000-of-00002.parquet", ".gitattributes"])
    url = upload(folder, "org/name", private=True, api=hub)
    assert url == "https://huggingface.co/datasets/org/name"
    names = [c[0] for c in hub.calls]
    assert names == ["create_repo", "upload_folder", "create_commit"]
    assert hub.calls[0][1] == {"repo_id": "org/name", "repo_type": "dataset", "private": True, "exist_ok": True}
    assert hub.calls[1][1]["folder_path"] == str(folder) and hub.calls[1][1]["repo_type"] == "dataset"
    deleted = [op.path_in_repo for op in hub.calls[2][1]["operations"]]
    assert deleted == ["data/train/train-00000-of-00002.parquet"]
    assert all("token" not in kw for _, kw in hub.calls)  # the token is huggingface_hub's business


def test_upload_without_a_login_says_how_to_log_in(tmp_path):
    with pytest.raises(UploadError, match="HF_TOKEN"):
        upload(tmp_path, "org/name", api=FakeHub(logged_in=False))


def test_publish_uploads_only_without_dry_run(published, monkeypatch):
    out, args = published
    sent = []
    monkeypatch.setattr("pipeline.stages.publish.hub_login", lambda: "logged-in api")
    monkeypatch.setattr("pipeline.stages.publish.upload",
                        lambda folder, repo, private, api: sent.append((repo, api)) or "url")
    assert main(args) == 0
    assert sent == []
    assert main([a for a in args if a != "--dry_run"]) == 0
    assert sent == [("hardpos-test/sample", "logged-in api")]


def test_bad_hub_repo_fails_fast(release, capsys):
    out, _ = release
    assert main(["--stage=publish", f"--output_dir={out}", "--hub_repo=not a repo"]) == 2
    assert "--hub_repo must look like ORG/NAME" in capsys.readouterr().err


def test_n20_a_captions_run_publishes_and_loads_with_datasets(tmp_path, capsys):
    """An img2dataset corpus (its parquet shards, a failed download among them) through --stage=all, then
    --stage=publish: 46709a5's card took report.json's `inputs.captions`, a list, for a path and publish ended in
    a traceback. Now the folder publishes and every config loads with datasets, row for row."""
    import datasets
    import pyarrow as pa

    from tests.test_corpus import records

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for number in range(2):
        pq.write_table(pa.Table.from_pylist(records(10, 10 * number, failed={4})), corpus / f"{number:05d}.parquet")
    out = tmp_path / "out"
    assert main(["--stage=all", f"--captions={corpus}/*.parquet", f"--output_dir={out}", "--progress_seconds=0"]) == 0
    assert report(out)["tables"]["train"]["discard_reasons"]["image_not_downloaded"] == 2
    capsys.readouterr()
    assert main(["--stage=publish", f"--output_dir={out}"]) == 0
    card = (out / "hub" / "README.md").read_text()
    assert "inputs: captions=*.parquet" in card
    for config in ("train_negatives", "hard_positives", "train"):
        loaded = datasets.load_dataset(str(out / "hub"), config, split="train", cache_dir=str(tmp_path / "cache"))
        written = rows_of(out, config)
        assert written and sorted(loaded["example_id"]) == sorted(r["example_id"] for r in written)
        assert {r["key"] for r in written} <= {f"k{i:05d}" for i in range(20)} - {"k00004", "k00014"}
