"""`python -m pipeline.run --stage=eval_sets` end to end on the embedded samples."""
import glob
import json
import shutil

import pyarrow.parquet as pq
import pytest
from conftest import (
    ARO_SAMPLE,
    PROGRESS_LINE,
    REPO,
    VL_SAMPLE,
    as_main,
    eval_sets_args,
    one_error_line,
    run_cli,
    run_without_pipeline,
)

from pipeline.checks.eval_sets import check_output
from pipeline.io.schema import load_schema
from pipeline.run import main


def report(out):
    return json.loads((out / "report.json").read_text())


def parquet_files(out):
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


def test_sample_run_counts_add_up(sample_output):
    tables = report(sample_output)["tables"]
    assert (tables["replace"]["read"], tables["swap"]["read"]) == (61, 40)
    for name, t in tables.items():
        assert t["balanced"], name
        assert t["read"] == t["rows"] + t["discarded"] + t["rejected"] > 0
        assert t["written"] == t["rows"]
        for stats in t["files"].values():
            assert stats["read"] == stats["rows"] + stats["discarded"] + stats["rejected"]
    replace = tables["replace"]
    assert replace["categories"]["attribute/material"] == 0
    assert replace["files"]["Attribute/vg/material.json"]["discarded"] == 3
    assert replace["pairs"]["relation/spatial"]["in -> within"] == 2
    assert sum(replace["subsets"].values()) == replace["rows"]
    assert replace["reject_reasons"] == {"empty_caption": 1, "bad_captions": 1, "bad_image_path": 1, "not_a_pair": 1}
    assert tables["swap"]["reject_reasons"]["caption_does_not_parse"] == 3


def test_sample_output_passes_the_release_checks(sample_output):
    checked, problems = check_output(str(sample_output), str(VL_SAMPLE))
    assert problems == []
    assert checked == {"replace": 38, "swap": 27}


def test_every_parseable_swap_record_gives_a_row_and_the_rest_say_why(sample_output):
    records = json.loads(ARO_SAMPLE.read_text())
    rows = pq.read_table(sample_output / "swap").to_pylist()
    dead = [*pq.read_table(sample_output / "rejected" / "swap-00000-of-00001.parquet").to_pylist(),
            *pq.read_table(sample_output / "discarded" / "swap-00000-of-00001.parquet").to_pylist()]
    assert sorted([r["source_index"] for r in rows] + [d["source_index"] for d in dead]) == list(range(len(records)))
    assert all(d["reason"] and d["detail"] for d in dead)


def test_outputs_load_with_datasets_and_match_the_schema_files(sample_output, tmp_path):
    import datasets

    for table, schema_name in (("replace", "replace_eval"), ("swap", "swap_eval")):
        files = sorted(glob.glob(str(sample_output / table / "test-*.parquet")))
        ds = datasets.load_dataset("parquet", data_files={"test": files}, cache_dir=str(tmp_path / "hf"))["test"]
        expected = load_schema(schema_name)
        assert ds.column_names == expected.column_names
        assert ds.num_rows == report(sample_output)["tables"][table]["rows"]
        on_disk = pq.read_schema(files[0])
        assert on_disk.equals(expected.arrow(), check_metadata=False)
        assert on_disk.metadata[b"hardpos.schema_sha256"].decode() == expected.sha256
    for kind in ("rejected", "discarded"):
        for path in glob.glob(str(sample_output / kind / "*.parquet")):
            assert pq.read_schema(path).equals(load_schema("dead_letters").arrow(), check_metadata=False)


def test_worker_count_and_sharding_do_not_change_the_rows(sample_output, tmp_path):
    out = tmp_path / "two_workers"
    assert main(eval_sets_args(out, VL_SAMPLE, ARO_SAMPLE,
                               "--direct_num_workers=2", "--direct_running_mode=multi_processing")) == 0
    assert parquet_files(out) == parquet_files(sample_output)  # byte-identical, not just the same rows
    assert report(out)["tables"] == report(sample_output)["tables"]

    resharded = tmp_path / "resharded"
    assert main(eval_sets_args(resharded, VL_SAMPLE, ARO_SAMPLE, "--rows_per_shard=10")) == 0
    for table in ("replace", "swap"):
        shards = sorted((resharded / table).glob("test-*.parquet"))
        assert len(shards) > 1 and all(s.name.endswith(f"-of-{len(shards):05d}.parquet") for s in shards)
        rows = sorted((r for s in shards for r in pq.read_table(s).to_pylist()), key=lambda r: r["example_id"])
        assert rows == sorted(pq.read_table(sample_output / table).to_pylist(), key=lambda r: r["example_id"])

    # a re-run with fewer shards into the same folder leaves no stale shard behind
    assert main(eval_sets_args(resharded, VL_SAMPLE, ARO_SAMPLE)) == 0
    assert parquet_files(resharded) == parquet_files(sample_output)


def test_one_source_builds_one_set(tmp_path):
    assert main(eval_sets_args(tmp_path, None, ARO_SAMPLE)) == 0
    assert list(report(tmp_path)["tables"]) == ["swap"]
    assert not (tmp_path / "replace").exists()


def copy_samples(tmp_path):
    root = tmp_path / "vl"
    shutil.copytree(VL_SAMPLE, root)
    return root


def test_record_level_problems_become_dead_letters(tmp_path):
    root = copy_samples(tmp_path)
    color = root / "Attribute/vg/color.json"
    records = color.read_bytes().rstrip().rstrip(b"]")
    color.write_bytes(records + b',\n["VG_100K/9.jpg", {"POS": ["caf\xe9 red table"], "NEG": ["caf\xe9 tan table"]}],'
                      b'\n{"not": "a pair"},\n["VG_100K/10.jpg", {"POS": [""], "NEG": ["x"]}]\n]\n')
    out = tmp_path / "out"
    assert main(eval_sets_args(out, root, None)) == 0
    t = report(out)["tables"]["replace"]
    assert t["balanced"] and t["files"]["Attribute/vg/color.json"]["read"] == 15
    assert t["reject_reasons"]["invalid_utf8"] == 1
    assert t["reject_reasons"]["not_a_pair"] == 2 and t["reject_reasons"]["empty_caption"] == 2
    rejected = pq.read_table(out / "rejected").to_pylist()
    bad = [r for r in rejected if r["reason"] == "invalid_utf8"][0]
    assert bad["record_key"] == "Attribute/vg/color.json:12" and "\\udce9" in bad["record"]


@pytest.mark.parametrize("args,expected", [
    (["--output_dir=o", "--vl_checklist_root=samples/vl_checklist"], "--stage is required"),
    (["--stage=eval_sets", "--vl_checklist_root=samples/vl_checklist"], "--output_dir is required"),
    (["--stage=eval_sets", "--output_dir=o"], "needs --vl_checklist_root"),
    (["--stage=eval_sets", "--output_dir=o", "--vl_checklist_rot=samples/vl_checklist"],
     "unknown flag --vl_checklist_rot"),
    (["--stage=eval_sets", "--output_dir=o", "--vl_checklist_root=no/such/dir"], "no/such/dir: no such directory"),
    (["--stage=eval_sets", "--output_dir=o", "--aro_vga=no/such.json"], "no/such.json: no such file"),
    (["--stage=eval_sets", "--output_dir=o", "--aro_vga=setup.py"], "setup.py: not valid JSON"),
])
def test_bad_flags_and_paths_fail_fast_with_one_line(args, expected):
    line = one_error_line(run_cli(*args))
    assert line.startswith("error: ") and expected in line


@pytest.mark.parametrize("flag", ["--positive_types=nonsense", "--negative_types=nonsense"])
def test_train_set_checks_its_type_flags_before_it_takes_the_folder(tmp_path, flag):
    out = tmp_path / "out"
    line = one_error_line(run_cli("--stage=train_set", f"--output_dir={out}",
                                  "--coco_captions=samples/coco/captions_sample.json", flag))
    assert flag.split("=")[0] in line and "nonsense" in line
    assert not out.exists()  # refused before the lock, the recovery and the table checks


def test_truncated_file_fails_fast_with_one_line(tmp_path):
    root = copy_samples(tmp_path)
    spatial = root / "Relation/vg/spatial.json"
    spatial.write_bytes(spatial.read_bytes()[:300])
    line = one_error_line(run_cli(*eval_sets_args(tmp_path / "out", root, None)))
    assert "Relation/vg/spatial.json: not valid JSON" in line and "truncated" in line
    assert not (tmp_path / "out").exists()  # nothing ran


@pytest.mark.parametrize("code", [as_main("pipeline.run"), "from pipeline.run import main"],
                         ids=["python -m pipeline.run", "the hardpos script"])
def test_without_the_pipeline_extra_one_line_names_it(code, tmp_path):
    line = one_error_line(run_without_pipeline(code, *eval_sets_args(tmp_path / "out")))
    assert line == ("error: the pipeline needs apache-beam, spacy, nltk, not installed here: "
                    "pip install -e '.[pipeline]'")
    assert not (tmp_path / "out").exists()


def test_cli_as_a_user_runs_it(tmp_path):
    result = run_cli(*eval_sets_args(tmp_path, VL_SAMPLE, ARO_SAMPLE))
    assert result.returncode == 0, result.stderr
    assert "replace" in result.stdout and "balanced" in result.stdout
    # nothing on stderr but progress lines (a run slower than --progress_seconds, on a busy machine, prints them)
    assert [line for line in result.stderr.splitlines() if line.strip() and not PROGRESS_LINE.match(line)] == []
    assert (REPO / "samples").is_dir()
