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
