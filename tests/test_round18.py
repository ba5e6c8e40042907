"""Round 18 of the hostile probes, and what round 9 left (Z9's prefix): a secret cut short by a message's length limit
is still a secret, and is never printed in part."""
from __future__ import annotations

import sys

import pytest

PASSWORD = "Zq7PASSWORDrunsPastTheCut" * 6
KEY = "sk-R18SECRETKEYVALUEabcdef"


def test_a_url_cut_before_its_at_hides_what_it_holds_of_the_password():
    from pipeline.urls import redacted, redact_urls

    assert redacted("http://user:Zq7PASSW") == "http://user:***"
    assert redact_urls("error at http://user:Zq7PASSW... (line 3)") == "error at http://user:*** (line 3)"
    # a port is digits: host:port is left as it is
    assert redacted("http://host:8080/v1?x=1") == "http://host:8080/v1?x=***"
    assert redacted("http://[::1]:8080/v1") == "http://[::1]:8080/v1"


def test_a_url_in_a_message_is_redacted_before_it_is_cut():
    from pipeline.urls import cut, shown

    url = f"ftp://user:{PASSWORD}@host/x.jpg"
    for text in (shown(url), shown(url, 20), cut(f"cannot read {url}", 40)):
        assert "Zq7PASS" not in text and len(text) <= 80, text


def test_the_one_line_errors_cut_after_redacting():
    from pipeline.checks import one_line as check_line
    from pipeline.train.clip import one_line as clip_line

    error = OSError(f"{'x' * 270} http://user:{PASSWORD}@host/file")  # the cut at 300 lands in the password
    for line in (check_line(error), clip_line(error)):
        assert "Zq7" not in line and "PASSW" not in line, line


def test_fetch_refuses_a_url_without_printing_part_of_its_password(tmp_path):
    from pipeline.publish.images import FetchConfig, fetch_bounded

    url = f"ftp://averylongusername:{PASSWORD}@host/x.jpg"  # the first 80 characters end inside the password
    key, body, error = fetch_bounded(("k", url), 1.0, None, [], FetchConfig(images_dir=str(tmp_path)))
    assert body is None and "refused url" in error and "Zq7" not in error and "PASSW" not in error, error


def test_the_last_line_of_defence_hides_a_secret_cut_short_at_either_end(capsys, monkeypatch):
    from pipeline.urls import redact_output

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    saved = sys.stdout, sys.stderr
    try:
        redact_output()
        print(f"bad key {KEY[:12]}... given", file=sys.stderr)  # cut at its end
        print(f"...{KEY[-10:]} was the rest", file=sys.stderr)  # cut at its start
        print(f"whole {KEY} and short {KEY[:7]}", file=sys.stderr)  # fewer than 8 characters say nothing
        print("an ordinary line", file=sys.stderr)
    finally:
        sys.stdout, sys.stderr = saved
    err = capsys.readouterr().err.splitlines()
    assert err == ["bad key ***... given", "...*** was the rest", f"whole *** and short {KEY[:7]}",
                   "an ordinary line"], err


# ------------------------------------------------------------------ probe 19 (K numbers are the probe's)

def _sample():
    from conftest import SAMPLES

    return SAMPLES / "coco" / "captions_sample.json"


def _tamper(table, how: str) -> None:
    """Changes a chain's parse table between its two stages, as a process writing into the staging folder could."""
    import base64
    import json
    from pathlib import Path

    listing = Path(table.folder) / "files.json"
    files = json.loads(listing.read_text())["files"]
    path = Path(files[0][0])
    lines = path.read_bytes().splitlines(keepends=True)
    first = json.loads(lines[0])
    if how == "captions":  # K1: same ids, other captions
        first["records"] = [{**r, "caption": "TAMPERED " + r["caption"]} for r in first["records"]]
        lines[0] = (json.dumps(first) + "\n").encode()
    elif how == "records_swapped":  # K2: a record for another (a listing that still names the file)
        first["records"] = first["records"][1:] + first["records"][:1]
        lines[0] = (json.dumps(first) + "\n").encode()
    elif how == "docs_reversed":  # K7: the docs in another order, same count
        from spacy.tokens import DocBin
        import spacy

        vocab = spacy.blank("en").vocab
        docs = list(DocBin().from_bytes(base64.b64decode(first["docs"])).get_docs(vocab))
        again = DocBin(attrs=["ORTH", "SPACY", "TAG", "DEP", "HEAD", "SENT_START"])
        for doc in reversed(docs):
            again.add(doc)
        first["docs"] = base64.b64encode(again.to_bytes()).decode()
        lines[0] = (json.dumps(first) + "\n").encode()
    elif how == "grown":  # K5: the file made far longer than the listing says (a sparse file, no newline)
        with open(path, "r+b") as f:
            f.truncate(1 << 30)
        return
    elif how == "relisted":  # K16: a listing rewritten to name another file
        listing.write_text(json.dumps({"files": [[str(Path(table.folder) / "parses-\x00.jsonl"), "0" * 64, 1]],
                                       "hmac": "0" * 64}))
        return
    path.write_bytes(b"".join(lines))
    if how == "records_swapped":  # and the listing resealed without the key: still refused
        files[0][1] = __import__("hashlib").sha256(path.read_bytes()).hexdigest()
        files[0][2] = path.stat().st_size
        listing.write_text(json.dumps({"files": files, "hmac": "f" * 64}))


@pytest.mark.parametrize("how", ["captions", "records_swapped", "docs_reversed", "grown", "relisted"])
def test_k1_k2_k5_k7_k16_a_parse_table_changed_between_the_stages_fails_the_run_before_commit(how, tmp_path,
                                                                                               monkeypatch, capsys):
    """The table is sealed: the listing's HMAC under the chain's key (held by the launcher and the DoFns only), each
    file's size read before a line of it and its sha256 at its end. Before, K1's and K7's tampered tables were
    committed (exit 0), K2's lost two captions, K5 read 3 GiB whole and K16 gave a traceback."""
    from pipeline.io import parses
    from pipeline.run import main

    original = parses.read_batches

    def tampering(pipeline, table):
        _tamper(table, how)
        return original(pipeline, table)

    monkeypatch.setattr(parses, "read_batches", tampering)
    out = tmp_path / "out"
    code = main(["--runner=DirectRunner", "--progress_seconds=0", "--stage=all", f"--coco_captions={_sample()}",
                 f"--output_dir={out}"])
    err = capsys.readouterr().err
    assert code == 2 and "changed since the run began" in err and "Traceback" not in err, err[-2000:]
    assert not (out / "hard_positives").exists() and not (out / "train").exists()
    if how == "grown":  # refused by its size before a line is read (a process's peak depends on what ran before)
        assert "has 1,073,741,824 bytes, not the" in err


def test_k6_k7_a_batch_whose_parses_are_not_its_captions_is_refused():
    import spacy

    from pipeline.io import parses

    nlp = spacy.blank("en")
    records = [{"caption": "a dog runs"}, {"caption": "two cats sleep"}]
    data = parses.to_bytes([nlp(r["caption"]) for r in records])
    assert [d.text for d in parses.from_bytes(data, nlp.vocab, records)] == ["a dog runs", "two cats sleep"]
    for other in (records[::-1], records[:1], records + records[:1]):
        with pytest.raises(parses.ParseTableMismatch, match="changed since the run began"):
            parses.from_bytes(data, nlp.vocab, other)


def test_k16_a_name_no_file_can_have_is_one_line():
    from pipeline.io import parses

    with pytest.raises(parses.ParseTableMismatch, match="cannot be read"):
        parses._open("/tmp/parses-\x00.jsonl")


def test_the_table_key_is_never_shown():
    from pipeline.io import parses

    table = parses.Table("/x", "ab" * 32)
    assert "abab" not in repr(table) and "abab" not in str(table)


@pytest.mark.parametrize("stage", [["evaluate"], {"a": 1}, 7, None])
def test_k17_a_lock_record_of_any_shape_names_no_tool_and_gives_no_traceback(stage, tmp_path):
    import json

    from pipeline.folder_lock import LOCK_FILE, tool_folder

    (tmp_path / LOCK_FILE).write_text(json.dumps({"stage": stage, "pid": 12345}))
    assert tool_folder(str(tmp_path)) is None


def test_k13_a_bare_query_value_is_hidden_wherever_it_stands():
    from pipeline.urls import redacted

    assert redacted("http://127.0.0.1:9/v1?api-version=1&QBARE13") == "http://127.0.0.1:9/v1?api-version=***&***"
    assert redacted("http://h/v1?QBARE13&api-version=1") == "http://h/v1?***&api-version=***"
    assert redacted("http://h/v1?QBARE13") == "http://h/v1?***"


@pytest.mark.parametrize("url", ["http://u:PWPART28?rest@127.0.0.1:9/v1", "http://u:PWPART28#x@127.0.0.1:9/v1",
                                 "http://h:PWPART28/v1"])
def test_k28_k30_a_url_whose_port_is_no_number_is_refused_unshown(url, sample_output, tmp_path, capsys):
    """A password holding '?' or '#' makes parsers read its first part as the host's port, which their messages
    quote: such a URL is refused whole, as --llm_base_url and as --image_root (K30 wrote the part into the images
    report and index)."""
    import shutil

    from pipeline.llm.openai_client import url_problem
    from pipeline.run import main

    assert url_problem(url) and "PWPART28" not in url_problem(url)
    out = tmp_path / "out"
    shutil.copytree(sample_output, out)
    code = main(["--stage=images", f"--output_dir={out}", f"--image_root={url}", "--progress_seconds=0"])
    err = capsys.readouterr().err
    assert code == 2 and "PWPART28" not in err and "(not shown here)" in err, err[-1500:]
    assert not (out / "images").exists()


def test_k21_an_empty_positive_types_names_no_type(tmp_path, capsys):
    from pipeline.run import main

    code = main(["--stage=hard_positives", f"--coco_captions={_sample()}", "--positive_types=",
                 f"--output_dir={tmp_path / 'out'}", "--progress_seconds=0"])
    assert code == 2 and "--positive_types: unknown type (none)" in capsys.readouterr().err
    assert not (tmp_path / "out" / "hard_positives").exists()


def test_k37_threads_as_many_as_the_cores_are_threads_too(tmp_path, capsys, monkeypatch):
    import os

    from pipeline.run import main

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    code = main(["--stage=train_negatives", f"--coco_captions={_sample()}", f"--output_dir={tmp_path / 'out'}",
                 "--direct_num_workers=0", "--direct_running_mode=multi_threading"])
    assert code == 2 and "not safe across threads" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_k32_the_images_stage_never_writes_into_a_tools_output_folder(tmp_path, capsys):
    import os

    from pipeline.folder_lock import holder_record, lock_local
    from pipeline.run import main

    ev = tmp_path / "ev"
    os.close(lock_local(str(ev), holder_record("evaluate"), "--out"))
    (ev / "report.md").write_text("# Evaluation report")
    code = main(["--stage=images", f"--output_dir={tmp_path / 'run'}", f"--images_dir={ev}",
                 f"--image_root={tmp_path}", "--progress_seconds=0"])
    assert code == 2 and "the evaluator's output folder" in capsys.readouterr().err
    assert (ev / "report.md").read_text() == "# Evaluation report" and not (ev / "shards").exists()


def test_k39_no_stage_commits_into_the_images_stages_folder(tmp_path, capsys):
    from pipeline.run import main

    images = tmp_path / "run" / "images"
    for name in ("shards", "index"):
        (images / name).mkdir(parents=True)
    (images / "settings.json").write_text("{}")
    (images / "report.json").write_text('{"images": "the stage\'s own"}')
    code = main(["--stage=order_eval", f"--coco_captions={_sample()}", f"--output_dir={images}",
                 "--progress_seconds=0"])
    assert code == 2 and "the images stage's folder" in capsys.readouterr().err
    assert (images / "report.json").read_text() == '{"images": "the stage\'s own"}'


def test_k10_the_local_runners_worker_processes_print_no_secret(tmp_path):
    """multi_processing workers are fresh interpreters writing to the terminal: they run redacted (a DoFn's own
    print, a library's log line) and are handed the options with URLs' secrets as ***."""
    import subprocess

    from conftest import REPO

    code = (
        "import logging, sys\n"
        "from pipeline.urls import redact_output; redact_output()  # as every entry point does\n"
        "import apache_beam as beam\n"
        "from apache_beam.options.pipeline_options import PipelineOptions\n"
        "from pipeline.options import FnApiDirectRunner\n"
        "def shout(x):\n"
        "    print('worker fetched http://u:PWK10@h/v1?key=QK10', file=sys.stderr, flush=True)\n"
        "    logging.getLogger('httpx').warning('POST http://u:PWK10@h/x')\n"
        "    return x\n"
        "opts = PipelineOptions(['--direct_num_workers=2', '--direct_running_mode=multi_processing',\n"
        "                        '--llm_base_url=http://u:PWK10@h/v1?key=QK10'])\n"
        "with beam.Pipeline(runner=FnApiDirectRunner(), options=opts) as p:\n"
        "    p | beam.Create([1, 2, 3]) | beam.Map(shout)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "worker fetched http://***@h/v1?key=***" in done.stderr
    assert "PWK10" not in done.stdout + done.stderr and "QK10" not in done.stdout + done.stderr


def test_a_secret_that_names_a_file_is_hidden_whole_and_its_runs_are_other_paths(capsys, monkeypatch, tmp_path):
    from pipeline.urls import redact_output

    credentials = tmp_path / "service-account.json"
    credentials.write_text("{}")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(credentials))
    saved = sys.stdout, sys.stderr
    try:
        redact_output()
        print(f"using {credentials}; report in {tmp_path / 'out'}", file=sys.stderr)
    finally:
        sys.stdout, sys.stderr = saved
    assert capsys.readouterr().err.strip() == f"using ***; report in {tmp_path / 'out'}"


# ------------------------------------------------------------------ probe 20 (J numbers are the probe's)

def test_j2_a_bare_query_component_starting_with_a_star_is_a_value():
    from pipeline.urls import redacted

    assert redacted("https://h/c.jsonl?*SECRETSIG") == "https://h/c.jsonl?***"
    assert redacted("https://h/c?a=1&*SECRETSIG") == "https://h/c?a=***&***"
    assert redacted(redacted("https://h/c?x&b=2")) == "https://h/c?***&b=***"  # redacting twice changes nothing


@pytest.mark.parametrize("flag", ["captions", "reference_captions", "cache_dir", "llm_replay"])
@pytest.mark.parametrize("url", ["http://u:p#SECRETw28@127.0.0.1:9/x.jsonl", "http://u:p/SECRETw28@127.0.0.1:9/x"])
def test_j28_a_path_flags_url_whose_password_cannot_be_told_apart_is_not_shown(flag, url, tmp_path, capsys):
    from pipeline.run import main

    extra = [] if flag == "captions" else [f"--coco_captions={_sample()}"]
    code = main(["--stage=train_negatives", f"--{flag}={url}", *extra, f"--output_dir={tmp_path / 'out'}"])
    err = capsys.readouterr().err
    assert code == 2 and "SECRETw28" not in err and "not shown here" in err, err[-1000:]


def test_j12_an_image_entry_of_the_wrong_shape_is_named_not_unknown():
    from pipeline.perturb.outcomes import Reject
    from pipeline.sources.coco import image_index, normalise

    images = image_index([{"id": 1, "file_name": 12345}, {"id": 2, "file_name": "b.jpg", "coco_url": {"x": 1}},
                          {"id": 3, "file_name": "c.jpg"}])
    for image_id, why in ((1, "its file_name is a JSON int"), (2, "its coco_url is a JSON object")):
        with pytest.raises(Reject) as found:
            normalise({"id": 10 + image_id, "image_id": image_id, "caption": "a dog"}, "f.json", images)
        assert found.value.reason == "bad_image_entry" and why in found.value.detail
    assert normalise({"id": 13, "image_id": 3, "caption": "a dog"}, "f.json", images)["image_url"] is None


def test_j14_an_llm_answer_holding_the_api_key_is_refused_not_kept(monkeypatch):
    import json

    from pipeline.llm import openai_client

    monkeypatch.setenv("OPENAI_API_KEY", "sk-J14SECRETKEYabcdef")
    monkeypatch.setattr(openai_client, "_SECRETS", None)
    for text in ("A dog with sk-J14SECRETKEYabcdef runs.", "A dog with J14SECRETKE runs."):
        reply = json.dumps({"choices": [{"message": {"content": text}}]}).encode()
        with pytest.raises(openai_client.RequestFailed, match="holds a secret of this environment") as found:
            openai_client.parse_reply(reply, chat=True)
        assert "J14SECRET" not in str(found.value)
    reply = json.dumps({"choices": [{"message": {"content": "A dog runs."}}]}).encode()
    assert openai_client.parse_reply(reply, chat=True).text == "A dog runs."


@pytest.mark.parametrize("mode", ["in_memory", None])
def test_j22_in_memory_bundles_on_several_threads_are_refused(mode, tmp_path, capsys):
    from pipeline.run import main

    flags = [f"--direct_running_mode={mode}"] if mode else []
    code = main(["--stage=train_negatives", f"--coco_captions={_sample()}", f"--output_dir={tmp_path / 'out'}",
                 "--direct_num_workers=4", *flags])
    assert code == 2 and "not safe across threads" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_j6_a_recorded_type_no_longer_known_names_the_report_not_a_flag(tmp_path):
    from pipeline.io.recorded import RecordedTable
    from pipeline.options import HardposOptions, PipelineOptions, UsageError
    from pipeline.stages.train_set import _recorded_positive_types

    opts = PipelineOptions([]).view_as(HardposOptions)
    report = str(tmp_path / "report.json")
    with pytest.raises(UsageError, match=r"table hard_positives of .*report.json: positive_types_asked: unknown type "
                                         r"llm_paraphrase.*give --positive_types"):
        _recorded_positive_types(opts, RecordedTable(report, {"positive_types_asked": ["llm_paraphrase"]}, {}))
    assert opts.positive_types is None
    _recorded_positive_types(opts, RecordedTable(report, {"positive_types_asked": ["rule_replace", "rule_swap"]}, {}))
    assert opts.positive_types == "rule_replace,rule_swap"


@pytest.mark.parametrize("url", ["http://u:p#SECRETev29@127.0.0.1:9/r", "http:/u:p#SECRETft31@127.0.0.1:9/run",
                                 "http://u:p/SECRETx@h/x", "https://u:p?SECRETq@h/x"])
def test_j29_j31_a_password_holding_a_separator_is_hidden_up_to_the_last_at(url):
    """The evaluator's skipped-suite line (and results.json, report.md) and the trainer's --data error quoted the
    tail of such a password: every message that redacts a URL now hides it."""
    from pipeline.urls import redact_urls, redacted

    assert "SECRET" not in redacted(url) and redacted(url).endswith(url[url.rfind("@"):])
    assert "SECRET" not in redact_urls(f"--data: no data file at /tmp/x/{url}.")


def test_j32_the_negatives_checks_help_prints():
    from conftest import run_cli

    done = run_cli("--help", module="pipeline.checks.negatives")
    assert done.returncode == 0 and "95%" in done.stdout and "Traceback" not in done.stderr, done.stderr[-500:]


def test_j40_a_fragments_values_are_hidden_as_a_querys_are():
    from pipeline.urls import redacted

    assert redacted("https://h/cb#access_token=TOKEN40&state=x") == "https://h/cb#access_token=***&state=***"
    assert redacted("https://h/page#section") == "https://h/page#section"
