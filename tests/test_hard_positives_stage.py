"""hard_positives and train_set end to end: the transformers engine with a tiny random Llama on real captions
(nonsense outputs the validation must reject), an OpenAI-compatible server on 127.0.0.1, the cache, a run
killed midway and restarted, and the joined training table."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from pipeline.llm.engines import EngineConfig, OpenAIEngine, Sampling
from pipeline.perturb.positives import RULE_POSITIVE_TYPES
from pipeline.run import main
from tests.conftest import REPO, SHARED_DATA, one_error_line, report, rows_of, run_cli, visible_files
from tests.llm_fixtures import SAMPLE_CAPTIONS, CompletionsServer, build_tiny_llama, write_captions_subset

REAL = SHARED_DATA / "coco" / "captions_val2017.json"
needs_real = pytest.mark.skipif(not REAL.exists(), reason="needs ../shared/data/coco/captions_val2017.json")


def dead_rows(out, kind, table) -> list[dict]:
    return [r for f in sorted((out / kind).glob(f"{table}-*.parquet")) for r in pq.read_table(f).to_pylist()]


def swap_selected(caption: str) -> bool:
    """The paper's SWAP rule, written apart from the stage: the word "and", fewer than 15 words."""
    tokens = [t.strip(".,;:!?\"()").lower() for t in caption.split()]
    tokens = [t for t in tokens if t]
    return "and" in tokens and len(tokens) < 15


@pytest.fixture(scope="module")
def captions_300(tmp_path_factory):
    if not REAL.exists():
        pytest.skip("needs the real COCO captions")
    return write_captions_subset(REAL, tmp_path_factory.mktemp("coco") / "captions_300.json", 300)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, captions_300):
    texts = [a["caption"] for a in json.loads(captions_300.read_text())["annotations"]]
    texts += [load.read_text() for load in (REPO / "prompts").glob("*.txt")]
    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"), texts)


def llm_args(captions, out, cache, model, *extra):
    return ["--stage=hard_positives", f"--coco_captions={captions}", f"--output_dir={out}", f"--cache_dir={cache}",
            "--llm_engine=transformers", f"--model={model}", "--llm_device=cpu", "--chat_format=llama2",
            "--positive_types=replace,swap", "--allow_empty", *extra]  # a tiny random model's answers may all fail


@pytest.fixture(scope="module")
def transformers_run(tmp_path_factory, captions_300, tiny_model):
    base = tmp_path_factory.mktemp("hp")
    out, cache = base / "out", base / "cache"
    assert main(llm_args(captions_300, out, cache, tiny_model)) == 0
    first = report(out)
    assert main(llm_args(captions_300, out, cache, tiny_model)) == 0
    return out, cache, first, report(out)


@needs_real
def test_every_prompt_is_accounted_for(transformers_run, captions_300):
    out, _, first, _ = transformers_run
    section = first["tables"]["hard_positives"]
    annotations = json.loads(captions_300.read_text())["annotations"]
    swap_expected = sum(swap_selected(a["caption"]) for a in annotations)
    assert swap_expected > 0
    assert section["positive_types"]["swap"]["prompts"] == swap_expected
    assert section["positive_types"]["replace"]["prompts"] == 300
    assert section["prompts"] == 300 + swap_expected
    rows = rows_of(out, "hard_positives")
    rejected = dead_rows(out, "rejected", "hard_positives")
    assert len(rows) + len(rejected) == section["prompts"] == section["accepted"] + section["rejected_generations"]
    assert section["balanced"] and section["captions"] == 300
    # A random model writes nonsense: nearly all of it must be rejected, each with a reason and the raw text.
    assert len(rejected) >= 0.9 * section["prompts"]
    assert all(r["reason"] and "raw:" in r["detail"] for r in rejected)
    assert len({r["reason"] for r in rejected}) >= 2
    keys = [(r["example_id"], r["positive_type"]) for r in rows] + \
        [(json.loads(r["record"])["example_id"], json.loads(r["record"])["positive_type"]) for r in rejected]
    assert len(keys) == len(set(keys))
    assert section["generation_calls"] > 0 and section["cache_hits"] == 0


@needs_real
def test_a_second_run_asks_the_model_nothing(transformers_run):
    out, _, first, second = transformers_run
    a, b = first["tables"]["hard_positives"], second["tables"]["hard_positives"]
    assert b["generation_calls"] == 0
    assert b["cache_hits"] == a["prompts"] == b["prompts"]
    assert b["accepted"] == a["accepted"] and b["reject_reasons"] == a["reject_reasons"]


@needs_real
def test_a_killed_run_resumes_without_duplicates_or_gaps(tmp_path, captions_300):
    texts = [a["caption"] for a in json.loads(captions_300.read_text())["annotations"]]
    texts += [p.read_text() for p in (REPO / "prompts").glob("*.txt")]
    model = build_tiny_llama(tmp_path / "slower_llama", texts, hidden=256, layers=4)
    out, cache = tmp_path / "out", tmp_path / "cache"
    # 100 of the captions: enough batches of 8 to kill the run after 3 and leave more to generate
    captions = write_captions_subset(captions_300, tmp_path / "captions_100.json", 100)
    args = llm_args(captions, out, cache, model, "--llm_batch_size=8")
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.run", *args], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    cache_files = cache / "hard_positives"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if cache_files.is_dir() and len(list(cache_files.glob("*.jsonl"))) >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed midway"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = sum(len(f.read_text().splitlines()) for f in cache_files.glob("*.jsonl"))
    assert not (out / "report.json").exists()

    assert main(args) == 0
    section = report(out)["tables"]["hard_positives"]
    assert 0 < section["generation_calls"] < section["prompts"]
    assert section["cache_hits"] >= done_before
    rows = rows_of(out, "hard_positives")
    rejected = dead_rows(out, "rejected", "hard_positives")
    keys = [(r["example_id"], r["positive_type"]) for r in rows] + \
        [(json.loads(r["record"])["example_id"], json.loads(r["record"])["positive_type"]) for r in rejected]
    assert len(keys) == len(set(keys)) == section["prompts"]


def test_openai_engine_retries_busy_servers_and_reports_dead_ones():
    with CompletionsServer(fail_first=2) as server:
        engine = OpenAIEngine(EngineConfig("openai", "stub", base_url=server.base_url, request_retries=3))
        [gen] = engine.generate(["[INST] Replace one word.\nA man sitting. [/INST]"], [Sampling(30)])
        assert gen.finish_reason == "stop" and "guy sitting" in gen.text
        assert server.requests == 3
    with CompletionsServer(fail_first=100) as server:
        engine = OpenAIEngine(EngineConfig("openai", "stub", base_url=server.base_url, request_retries=1))
        [gen] = engine.generate(["x\ny [/INST]"], [Sampling(30)])
        assert gen.finish_reason == "error" and "503" in gen.error and server.requests == 2


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """train_negatives, hard_positives (openai engine) and train_set run one by one, then --stage=all."""
    base = tmp_path_factory.mktemp("chain")
    out, cache = base / "out", base / "cache"
    with CompletionsServer(fail_first=1) as server:
        llm = [f"--coco_captions={SAMPLE_CAPTIONS}", f"--cache_dir={cache}", "--llm_engine=openai", "--model=stub",
               f"--llm_base_url={server.base_url}"]
        assert main(["--stage=train_negatives", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={out}"]) == 0
        assert main(["--stage=hard_positives", f"--output_dir={out}", *llm]) == 0
        positives = report(out)
        assert main(["--stage=train_set", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={out}"]) == 0
        train = report(out)
        all_out = base / "all"
        assert main(["--stage=all", f"--output_dir={all_out}", *llm]) == 0
        requests = server.requests
    return out, all_out, positives, train, report(all_out), requests


def test_train_set_has_a_row_for_every_caption_not_accounted_as_failed(chain):
    out, _, positives, train, _, _ = chain
    section = train["tables"]["train"]
    records = json.loads(SAMPLE_CAPTIONS.read_text())["annotations"]
    rows = rows_of(out, "train")
    discarded = dead_rows(out, "discarded", "train")
    rejected = dead_rows(out, "rejected", "train")
    assert section["read"] == len(records)
    assert len(rows) == section["read"] - len(discarded) - len(rejected) == section["rows"] > 0
    assert len(discarded) > 0 and {r["reason"] for r in discarded} <= {
        "no_hard_positive", "no_hard_negative", "no_hard_positive_or_negative"}
    assert section["balanced"] and section["texts"] == 3 * len(rows)
    accepted = positives["tables"]["hard_positives"]["accepted"]
    assert 0 < accepted < positives["tables"]["hard_positives"]["prompts"]
    for row in rows:
        assert row["hard_positive"] != row["caption"] and row["hard_negative"] != row["caption"]
        assert row["positive_type"] in ("replace", "swap", *RULE_POSITIVE_TYPES)
        assert row["negative_type"] in ("replace", "exchange")
    assert len({r["example_id"] for r in rows}) == len(rows)


def test_train_negatives_are_made_from_the_positive_and_the_report_counts_how(chain):
    from pipeline.perturb.transfer import changed_region

    section = chain[3]["tables"]["train"]
    rows = rows_of(chain[0], "train")
    negatives = {}
    for r in rows_of(chain[0], "train_negatives"):
        negatives.setdefault(r["example_id"], set()).add(r["hard_negative"])
    carried = [r for r in rows if r["negative_source"] == "hard_positive"]
    assert carried and all(r["negative_source"] in ("hard_positive", "caption") for r in rows)
    for row in rows:
        if row["negative_source"] == "caption":
            assert row["hard_negative"] in negatives[row["example_id"]]
        else:  # the positive with one change: a few words replaced, or two phrases exchanged
            i, j, k, m = changed_region(row["hard_positive"], row["hard_negative"])
            assert j - i <= 8 and m - k <= 8, row
    triples = section["triples"]
    assert triples["negative_from_positive"] == len(carried)
    assert sum(triples["picked"].values()) == len(rows) == section["rows"]


def test_train_set_loads_with_datasets(chain):
    import datasets

    out = chain[0]
    loaded = datasets.load_dataset(str(out / "train"))
    assert loaded["train"].num_rows == chain[3]["tables"]["train"]["rows"]
    assert {"caption", "hard_positive", "hard_negative", "positive_type"} <= set(loaded["train"].column_names)


def test_stage_all_gives_the_same_tables_and_asks_nothing_again(chain):
    out, all_out, positives, train, all_report, _ = chain
    assert all_report["tables"]["hard_positives"]["generation_calls"] == 0
    assert set(all_report["tables"]) == {"train_negatives", "hard_positives", "train"}
    for table in ("train", "hard_positives", "train_negatives"):
        assert rows_of(all_out, table) == rows_of(out, table)


def test_hard_positive_rows_record_the_prompt_and_sampling(chain):
    rows = rows_of(chain[0], "hard_positives")
    prompt_sha = {t: __import__("hashlib").sha256((REPO / "prompts" / f"{t}.txt").read_bytes()).hexdigest()
                  for t in ("replace", "swap")}
    llm = [r for r in rows if r["positive_type"] in ("replace", "swap")]
    for row in llm:
        assert row["prompt_sha256"] == prompt_sha[row["positive_type"]] and row["generator"] is None
        assert row["temperature"] == 0.0 and row["attempt"] == 0 and row["model"] == "stub"
        assert row["max_new_tokens"] == (30 if row["positive_type"] == "replace" else 20)
    assert llm and {r["positive_type"] for r in llm} <= {"replace", "swap"}
    assert all(not re.match(r"(?i)sure", r["hard_positive"]) for r in rows)
    # with an engine named, the rules run beside it: their rows name the rule and nothing of a model
    rules = [r for r in rows if r not in llm]
    assert "rule_replace" in {r["positive_type"] for r in rules} <= set(RULE_POSITIVE_TYPES)
    for row in rules:
        assert re.fullmatch(r"rule_(replace|swap|clause|converse|voice)/\d+", row["generator"]) and \
            row["generator"].startswith(row["positive_type"])
        assert all(row[c] is None for c in ("model", "llm_engine", "prompt_sha256", "chat_format", "temperature",
                                            "attempt", "output_tokens"))


def test_the_llm_is_asked_only_about_captions_no_rule_covers_and_the_prompts_saved_are_counted(tmp_path):
    from pipeline.llm.prompts import wants

    replay = REPO / "samples" / "coco" / "hard_positives_replay.jsonl"
    sections, rows = {}, {}
    for mode in ("uncovered", "all"):
        out = tmp_path / mode
        assert main(["--stage=hard_positives", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={out}",
                     "--llm_engine=replay", f"--llm_replay={replay}", "--model=meta-llama/Llama-2-70b-chat-hf",
                     "--chat_format=llama2", f"--llm_prompts={mode}",
                     "--runner=DirectRunner", "--progress_seconds=0"]) == 0
        sections[mode], rows[mode] = report(out)["tables"]["hard_positives"], rows_of(out, "hard_positives")
    covered = {r["example_id"]: r["caption"] for r in rows["uncovered"] if r["positive_type"].startswith("rule_")}
    llm = {r["example_id"] for r in rows["uncovered"] if not r["positive_type"].startswith("rule_")}
    assert covered and llm and not set(covered) & llm
    saved = sum(wants(kind, caption) for caption in covered.values() for kind in ("replace", "swap"))
    assert sections["uncovered"]["llm_prompts"] == "uncovered" and sections["uncovered"]["prompts_saved"] == saved
    assert sections["uncovered"]["prompts"] + saved == sections["all"]["prompts"]
    assert sections["all"]["llm_prompts"] == "all" and sections["all"]["prompts_saved"] == 0
    assert all(s["balanced"] for s in sections.values())
    # the same rule rows either way: the LLM's prompts do not change the rules
    assert [r for r in rows["uncovered"] if r["positive_type"].startswith("rule_")] == \
        [r for r in rows["all"] if r["positive_type"].startswith("rule_")]


def test_train_prefers_the_llm_positive_and_falls_back_to_a_rule(chain):
    out, _, _, train, _, _ = chain
    positives = {}
    for row in rows_of(out, "hard_positives"):
        positives.setdefault(row["example_id"], {})[row["positive_type"]] = row
    # not given to train_set alone: the types the hard_positives table was made with (an engine named: the LLM's
    # replace and swap, then the rules), as its report records them
    assert train["tables"]["train"]["positive_types"] == ["replace", "swap", *RULE_POSITIVE_TYPES]
    order = train["tables"]["train"]["positive_types"]
    kinds = set()
    for row in rows_of(out, "train"):
        offered = positives[row["example_id"]]
        first = next(t for t in order if t in offered)
        assert row["positive_type"] == first and row["hard_positive"] == offered[first]["hard_positive"]
        assert (row["positive_generator"] is None) == (row["positive_model"] is not None)
        kinds.add("llm" if row["positive_model"] else "rule")
    assert kinds == {"llm", "rule"}


def test_missing_llm_flags_fail_fast_with_one_line(tmp_path, capsys):
    assert main(["--stage=hard_positives", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={tmp_path}",
                 "--llm_engine=openai", "--model=x", f"--cache_dir={tmp_path / 'c'}"]) == 2
    assert "--llm_base_url" in capsys.readouterr().err
    assert main(["--stage=train_set", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={tmp_path}"]) == 2
    assert "run --stage=hard_positives first" in capsys.readouterr().err
    base = ["--stage=hard_positives", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={tmp_path}",
            "--llm_engine=replay", "--model=x", f"--cache_dir={tmp_path / 'c'}"]
    assert main(base) == 2
    assert "--llm_engine=replay needs --llm_replay" in capsys.readouterr().err
    assert main([*base, f"--llm_replay={tmp_path / 'missing.jsonl'}"]) == 2
    assert "--llm_replay: cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n")
    assert main([*base, f"--llm_replay={bad}"]) == 2
    assert "bad.jsonl:1: needs string fields" in capsys.readouterr().err


REPLAY = SAMPLE_CAPTIONS.parent / "hard_positives_replay.jsonl"


def replay_args(out, cache, replay, *extra):
    return ["--stage=hard_positives", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={out}",
            f"--cache_dir={cache}", "--llm_engine=replay", f"--llm_replay={replay}", "--model=m",
            "--positive_checks=rules", "--positive_types=replace,swap", "--progress_seconds=0", *extra]


def test_case6_an_empty_or_conflicting_replay_file_is_refused_naming_file_and_line(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert main(replay_args(tmp_path / "out", tmp_path / "cache", empty)) == 2
    assert f"--llm_replay: {empty}: no answers" in capsys.readouterr().err
    lines = REPLAY.read_text().splitlines()
    first = json.loads(lines[0])
    conflicting = tmp_path / "conflicting.jsonl"
    conflicting.write_text("\n".join([*lines, json.dumps({**first, "text": first["text"] + " Another."})]) + "\n")
    assert main(replay_args(tmp_path / "out", tmp_path / "cache", conflicting)) == 2
    err = capsys.readouterr().err
    assert f"{conflicting}:{len(lines) + 1}: a second, different answer" in err and "first is on line 1" in err
    assert not (tmp_path / "out").exists()


def test_case6_a_run_whose_llm_requests_mostly_fail_exits_non_zero_and_commits_nothing(tmp_path, capsys):
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main(replay_args(out, cache, REPLAY)) == 0
    before = visible_files(out)
    elsewhere = tmp_path / "other_captions.jsonl"  # answers, but to none of these captions: every request fails
    elsewhere.write_text(json.dumps({"positive_type": "replace", "caption": "A cat.", "text": "A kitten."}) + "\n")
    assert main(replay_args(out, tmp_path / "empty_cache", elsewhere)) == 1
    err = capsys.readouterr().err
    assert re.search(r"44 of the 44 LLM prompts of hard_positives failed as requests \(request_failed\), more "
                     r"than --max_failed_fraction=0.5; nothing was written", err), err
    assert visible_files(out) == before  # the earlier result stays
    assert main(replay_args(out, tmp_path / "empty_cache", elsewhere, "--max_failed_fraction=1")) == 1
    assert "table hard_positives has 0 rows" in capsys.readouterr().err  # and its own reason to fail
    assert main(replay_args(out, tmp_path / "empty_cache", elsewhere, "--max_failed_fraction=1",
                            "--allow_empty")) == 0


def test_case14_a_replay_file_that_is_not_utf8_is_one_line(tmp_path):
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(REPLAY.read_bytes() + b'{"positive_type": "replace", "caption": "caf\xe9", "text": "x"}\n')
    line = one_error_line(run_cli(*replay_args(tmp_path / "out", tmp_path / "cache", bad)))
    assert line == f"error: --llm_replay: {bad}:{len(REPLAY.read_bytes().splitlines()) + 1}: not UTF-8 " \
                   f"(byte 0xe9 at column 45)"


def test_case14_a_cache_file_that_is_not_utf8_is_a_cache_miss(tmp_path):
    cache = tmp_path / "cache"
    assert main(replay_args(tmp_path / "first", cache, REPLAY)) == 0
    damaged = next((cache / "hard_positives").glob("*.jsonl"))
    damaged.write_bytes(damaged.read_bytes()[:40] + b"\xff\xfe" + damaged.read_bytes()[40:])
    out = tmp_path / "second"
    assert main(replay_args(out, cache, REPLAY)) == 0
    section = report(out)["tables"]["hard_positives"]
    assert section["generation_calls"] >= 1 and section["balanced"]  # the damaged entry was asked again


@pytest.fixture(scope="module")
def rules_run(tmp_path_factory):
    """--stage=hard_positives with no LLM flag (the rules only), with transformers and torch made unimportable:
    a stage that only needs rule types never loads a model; and again with other batches and two workers."""
    base = tmp_path_factory.mktemp("rules")
    blocked = base / "blocked"
    for name in ("transformers", "torch", "vllm"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} must not be loaded')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked), str(REPO)])}
    runs = []
    for name, extra in (("first", []), ("again", ["--nlp_batch_size=7", "--direct_num_workers=2",
                                                  "--direct_running_mode=multi_processing"])):
        out = base / name
        done = subprocess.run([sys.executable, "-m", "pipeline.run", "--stage=hard_positives",
                               f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={out}", "--progress_seconds=0",
                               "--runner=DirectRunner", *extra], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(out)
    return runs


def test_rule_positives_are_made_without_a_model_and_every_caption_is_accounted_for(rules_run):
    out = rules_run[0]
    section = report(out)["tables"]["hard_positives"]
    records = json.loads(SAMPLE_CAPTIONS.read_text())["annotations"]
    malformed = sum(section["reject_reasons"].values())
    good = len(records) - malformed
    # read = captions (each emitted with its rule rows, or one discarded letter) + malformed records
    assert section["read"] == len(records) and section["balanced"]
    assert section["emitted"] + section["discarded"] + section["rejected"] == section["read"]
    assert set(section["discard_reasons"]) == {"no_rule_positive"}
    assert "model" not in section and "prompts" not in section
    for kind, stats in section["rule_types"].items():
        assert stats["captions"] == good and 0 < stats["rows"] < good
        assert re.fullmatch(rf"{kind}/\d+", stats["generator"])
        assert len(stats["data_sha256"]) == 64 if kind != "rule_clause" else stats["data_sha256"] is None
    rows = rows_of(out, "hard_positives")
    assert len(rows) == section["rows"] == sum(s["rows"] for s in section["rule_types"].values())
    assert len({r["example_id"] for r in rows}) == section["emitted"]
    for row in rows:
        assert row["generator"].startswith(row["positive_type"] + "/") and row["model"] is None
        assert row["hard_positive"] != row["caption"]
    letters = dead_rows(out, "discarded", "hard_positives")
    for letter in letters:  # why, per type
        assert all(f"{t}: " in letter["detail"] for t in ("rule_replace", "rule_swap", "rule_clause"))
    ids = [r["example_id"] for r in rows] + [json.loads(r["record"])["example_id"] for r in letters]
    assert len(set(ids)) == good and not {r["example_id"] for r in rows} & {
        json.loads(r["record"])["example_id"] for r in letters}


def test_rule_positives_are_the_same_bytes_whatever_the_batches_and_workers(rules_run):
    first, again = rules_run
    assert visible_files(first).keys() == visible_files(again).keys()
    for name, data in visible_files(first).items():
        if name.endswith(".parquet"):
            assert data == visible_files(again)[name], name


def test_prompt_batches_come_from_the_prompts_not_from_their_order():
    from pipeline.stages.llm_rewrites import bucket_of, in_batches

    prompts = [{"key": f"k{i:03d}", "prompt": f"p{i}"} for i in range(23)]
    batches = list(in_batches((0, prompts), 5))
    assert [len(b) for b in batches] == [5, 5, 5, 5, 3]
    assert list(in_batches((0, list(reversed(prompts))), 5)) == batches
    assert {bucket_of(p["key"], 7) for p in prompts} <= set(range(7)) and bucket_of("k001", 7) == bucket_of("k001", 7)


@needs_real
def test_one_or_two_workers_write_the_same_bytes_and_cache(tmp_path, captions_300, tiny_model):
    """The LLM stage's batches are made from the prompts (not by RunInference's timing), so the model sees the
    same batches, with the same padding, whatever the worker count or the machine's load."""
    captions = write_captions_subset(captions_300, tmp_path / "captions_24.json", 24)
    outputs = {}
    for workers in ("1", "2"):
        out, cache = tmp_path / f"out{workers}", tmp_path / f"cache{workers}"
        extra = ["--llm_batch_size=4", f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing",
                 "--progress_seconds=0"]
        done = run_cli(*llm_args(captions, out, cache, tiny_model, *extra))
        assert done.returncode == 0, done.stderr[-3000:]
        # a cache file per batch, named by its prompts' keys: the same names are the same batches
        cached = sorted((f.name.split("-")[0], f.read_text()) for f in cache.rglob("*.jsonl"))
        outputs[workers] = ({n: d for n, d in visible_files(out).items() if n.endswith(".parquet")}, cached)
    assert outputs["1"] == outputs["2"]
    assert outputs["1"][1] and any(n.startswith("hard_positives/") for n in outputs["1"][0])
