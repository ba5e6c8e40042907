"""The hard-positive stage with a real instruct model: the embedded SmolLM2-135M-Instruct (the default
--llm_engine=transformers --model), on the CPU, in its own chat template, on 12 real COCO captions.

A 135M model accepts few prompts; what is checked is what a real model exercises: every prompt accounted for,
the chat template around the prompt, a second run answered from the cache, and verdicts a weak model earns.
"""
import json

import pyarrow.parquet as pq
import pytest
from conftest import SAMPLES, SHARED_DATA, report

from pipeline.run import main

REAL_CAPTIONS = SHARED_DATA / "coco" / "captions_val2017.json"
# What a weak model's answers are rejected for: none of these is a failure of the pipeline.
WEAK_MODEL_REASONS = {"empty", "truncated", "identical", "prompt_echoed", "more_than_one_span", "words_added",
                      "words_deleted", "span_too_long", "more_than_one_word", "same_word", "words_changed",
                      "same_order", "not_swapped_around_and", "not_a_synonym", "hard_negative_word", "number_changed",
                      "colour_changed", "person_changed", "contrasting_preposition"}


@pytest.fixture(scope="module")
def captions(tmp_path_factory):
    """12 real captions: val2017's first 12 when ../shared/data is there, else the sample file's."""
    source = REAL_CAPTIONS if REAL_CAPTIONS.is_file() else SAMPLES / "coco" / "captions_sample.json"
    data = json.loads(source.read_text())
    annotations = [a for a in data["annotations"] if isinstance(a, dict) and isinstance(a.get("caption"), str)
                   and a["caption"].strip()][:12]
    images = {a["image_id"] for a in annotations}
    path = tmp_path_factory.mktemp("real12") / "captions.json"
    path.write_text(json.dumps({"images": [i for i in data["images"] if isinstance(i, dict) and i.get("id") in images],
                                "annotations": annotations}))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory, captions):
    base = tmp_path_factory.mktemp("smollm2")
    args = ["--stage=hard_positives", f"--coco_captions={captions}", f"--cache_dir={base / 'cache'}",
            "--llm_engine=transformers", "--positive_types=replace,swap", "--llm_device=cpu", "--progress_seconds=0",
            "--allow_empty"]  # a 135M model may accept nothing: the accounting is what is checked
    assert main([*args, f"--output_dir={base / 'first'}"]) == 0
    assert main([*args, f"--output_dir={base / 'again'}"]) == 0
    return base / "first", base / "again"


def test_every_prompt_is_accounted_for(runs):
    section = report(runs[0])["tables"]["hard_positives"]
    assert section["model"] == "SmolLM2-135M-Instruct" and section["llm_engine"] == "transformers"
    assert section["chat_format"] == "auto" and section["prompt_set"] == "paper"
    assert section["prompts"] >= 12 and section["prompts_balanced"] and section["balanced"]
    assert section["prompts"] == section["accepted"] + section["rejected_generations"]
    assert section["generation_calls"] == section["prompts"] - section["shared_prompts"]


def test_the_answers_are_accepted_or_rejected_for_what_a_weak_model_does(runs):
    section = report(runs[0])["tables"]["hard_positives"]
    reasons = {r for r in section["reject_reasons"]}
    assert section["accepted"] >= 1 or reasons <= WEAK_MODEL_REASONS, reasons
    assert reasons <= WEAK_MODEL_REASONS | {"request_failed"} and "request_failed" not in reasons, reasons


def test_a_second_run_is_answered_from_the_cache_with_the_same_verdicts(runs):
    first, again = (report(r)["tables"]["hard_positives"] for r in runs)
    assert again["generation_calls"] == 0 and again["cache_hits"] == first["prompts"]
    rows = [pq.read_table(p).to_pylist() for p in (sorted((r / "hard_positives").glob("*.parquet"))[0] for r in runs)]
    assert rows[0] == rows[1]
    assert first["reject_reasons"] == again["reject_reasons"]


def test_the_prompt_reaches_the_model_in_its_chat_template():
    from pipeline.llm.engines import EngineConfig, TransformersEngine
    from pipeline.llm.prompts import load_prompt

    engine = TransformersEngine(EngineConfig("transformers", None, device="cpu", chat_format="auto"))
    prompt = load_prompt("replace").text("A cat on a mat.")
    rendered = engine.render(prompt)
    assert rendered.startswith("<|im_start|>") and "<|im_start|>user\n" + prompt in rendered
    assert rendered.endswith("<|im_start|>assistant\n")  # the generation prompt: the model answers next
    engine.chat_format = "none"  # the same tokenizer, no template: the prompt as it is
    raw = engine.render(prompt)
    assert raw == prompt
