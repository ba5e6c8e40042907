"""benchmarks/full_size.py's input (copies with fresh ids and distinct texts) and what the full-size rehearsal
changed in the pipeline: --stage=all parses the captions file once for its three tables."""
import importlib.util
import json

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from conftest import REPO
from pipeline.options import HardposOptions
from pipeline.stages import all_stages

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


def _labels(opts_args: list[str]) -> list[str]:
    options = PipelineOptions(opts_args)
    pipeline = beam.Pipeline(options=options)
    all_stages.build(pipeline, options.view_as(HardposOptions))
    labels = []

    class Visitor(beam.pipeline.PipelineVisitor):
        def enter_composite_transform(self, node):
            labels.append(node.full_label)

        def visit_transform(self, node):
            labels.append(node.full_label)

    pipeline.visit(Visitor())
    return labels


def test_stage_all_parses_the_captions_file_once(tmp_path):
    replay = tmp_path / "replay.jsonl"
    replay.write_text(json.dumps({"type": "replace", "caption": "c", "text": "t"}) + "\n")
    labels = _labels(["--stage=all", f"--coco_captions={REPO / 'samples/coco/captions_sample.json'}",
                      f"--output_dir={tmp_path}", "--llm_engine=replay", f"--llm_replay={replay}", "--model=m",
                      f"--cache_dir={tmp_path / 'cache'}"])
    parses = [label for label in labels if label.endswith("/ParseCaptions")]
    assert len(parses) == 1, parses
    # each of the three tables still labels the file's rejected records as its own dead letters
    assert sum(label.endswith(("RejectedCaptionsOftrain_negatives", "RejectedCaptionsOfhard_positives",
                                "RejectedCaptionsOftrain")) for label in labels) == 3


def test_a_join_that_receives_fewer_rows_than_were_sent_does_not_balance(tmp_path):
    """At 591,753 captions Beam's two-worker DirectRunner lost hard positives between the hard_positives table and
    the join: train still balanced (the captions became no_hard_positive discards). The join's inputs are now
    counted on both sides."""
    from pipeline.run import main
    from pipeline.stages import train_set

    args = ["--stage=all", f"--coco_captions={REPO / 'samples/coco/captions_sample.json'}",
            f"--output_dir={tmp_path / 'out'}", "--llm_engine=replay",
            f"--llm_replay={REPO / 'samples/coco/hard_positives_replay.jsonl'}", "--model=m",
            f"--cache_dir={tmp_path / 'cache'}", "--progress_seconds=0"]
    assert main(args) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())["tables"]
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
