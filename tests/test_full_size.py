"""benchmarks/full_size.py's input (copies with fresh ids and distinct texts) and what the full-size rehearsal
changed in the pipeline: --stage=all runs its stages as pipelines of their own; train_set counts its join."""
import importlib.util
import json

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from conftest import REPO
from pipeline.options import HardposOptions

spec = importlib.util.spec_from_file_location("full_size", REPO / "benchmarks" / "full_size.py")
full_size = importlib.util.module_from_spec(spec)
spec.loader.exec_module(full_size)

SOURCE = {"images": [{"id": i, "file_name": f"{i}.jpg", "coco_url": f"http://x/{i}.jpg"} for i in (1, 2)],
          "annotations": [{"id": 10, "image_id": 1, "caption": "A dog runs on the beach. "},
                          {"id": 11, "image_id": 2, "caption": "Two cats and a dog"},
                          {"id": 12, "image_id": 2, "caption": "a man holding an umbrella"}]}


def test_copies_have_fresh_ids_and_distinct_texts():
    data = full_size.build_captions(SOURCE, 3 * 24 - 1)
    annotations = data["annotations"]
    assert len(annotations) == 71
    assert len({a["id"] for a in annotations}) == 71
    assert len({a["caption"] for a in annotations}) == 71  # no two copies share a text
    assert {i["id"] for i in data["images"]} >= {a["image_id"] for a in annotations}
    assert annotations[0]["caption"] == "A dog runs on the beach."  # copy 0: the caption as read (stripped)
    assert annotations[3]["caption"] == "A photo of a dog runs on the beach."
    assert annotations[3 * 12]["caption"] == "A dog runs on the beach"  # copy 12: the final period toggled


@pytest.fixture(scope="module")
def stage_all(tmp_path_factory):
    """--stage=all on the sample (replay engine): (its arguments, the folder, the folder's report)."""
    from pipeline.run import main

    base = tmp_path_factory.mktemp("all")
    args = ["--stage=all", f"--coco_captions={REPO / 'samples/coco/captions_sample.json'}",
            f"--output_dir={base / 'out'}", "--llm_engine=replay",
            f"--llm_replay={REPO / 'samples/coco/hard_positives_replay.jsonl'}", "--model=m",
            f"--cache_dir={base / 'cache'}", "--progress_seconds=0"]
    assert main(args) == 0
    return args, base, json.loads((base / "out" / "report.json").read_text())


def test_stage_all_runs_its_stages_as_pipelines_of_their_own(stage_all):
    """One graph held all three stages' data in the launcher at once (12.3-12.7 GiB at full size); each table is
    now made and committed by its own stage, train_set reading back what the other two committed."""
    from pipeline.run import main

    args, base, report = stage_all
    assert {name: section["stage"] for name, section in report["tables"].items()} == {
        "train_negatives": "train_negatives", "hard_positives": "hard_positives", "train": "train_set"}
    assert report["tables"]["train"]["inputs"]["hard_positives_dir"] == str(base / "out")
    assert all(section["balanced"] for section in report["tables"].values())
    # train_set's inputs are the chain's own tables: another folder for them is refused before any work
    assert main([*args, f"--hard_positives_dir={base}"]) == 2


def test_a_join_that_receives_fewer_rows_than_were_sent_does_not_balance(stage_all):
    """At 591,753 captions Beam's two-worker DirectRunner lost hard positives between the hard_positives table and
    the join: train still balanced (the captions became no_hard_positive discards). The join's inputs are now
    counted on both sides."""
    from pipeline.stages import train_set

    args, _, report = stage_all
    report = report["tables"]
    join = report["train"]["join"]
    assert join["positive"]["sent"] == join["positive"]["received"] == report["hard_positives"]["rows"] > 0
    assert join["negative"]["sent"] == join["negative"]["received"] == report["train_negatives"]["rows"] > 0
    assert join["caption"]["sent"] == join["caption"]["received"] > 0
    # the same counts with one positive lost on the way
    counts = {("read", "train", "f"): 2, ("rows", "train", "f"): 1, ("dead", "train", "f", "discarded", "x"): 1,
              ("shard", "train", "train/train-00000-of-00001.parquet"): 1,
              ("join_sent", "train", "positive"): 5, ("join_received", "train", "positive"): 4}
    opts = PipelineOptions(args).view_as(HardposOptions)
    assert train_set.report_tables(counts, opts)["train"]["balanced"] is False
    counts[("join_received", "train", "positive")] = 5
    assert train_set.report_tables(counts, opts)["train"]["balanced"] is True
