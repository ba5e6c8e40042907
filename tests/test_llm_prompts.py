"""The two hard-positive prompt sets and the chat formats: the released script's templates rendered as the script
renders them, the paper's as before, and both kept apart in rows and cache keys."""
from __future__ import annotations

import hashlib

import pytest

from pipeline.llm.engines import Sampling
from pipeline.llm.prompts import LLM_NEGATIVE_TYPES, POSITIVE_TYPES, completion, load_prompt
from pipeline.resources import resource_dir
from pipeline.stages.llm_rewrites import make_prompts

CAPTION = "A man holding an umbrella on a busy street."
RECORD = {"caption": "three giraffes and two antelope", "example_id": "1", "caption_id": 1, "image_id": 1, "key": "1",
          "file_name": "x.jpg", "image_url": "http://x/1.jpg", "source_file": "c.json", "source": "coco",
          "source_index": 0}


@pytest.mark.parametrize("kind", POSITIVE_TYPES)
def test_released_templates_render_as_the_script_renders_them(kind):
    prompt = load_prompt(kind, "released")
    # generate_hard_positives.py: TEMPLATE.format(example=caption).strip()
    assert prompt.text(CAPTION) == prompt.template.format(example=CAPTION).strip()
    assert prompt.text(CAPTION).endswith("Input: " + CAPTION + "\nOutput:")
    assert prompt.prompt_set == "released" and prompt.max_new_tokens == 20


def test_the_released_replace_prompt_is_the_scripts_wording():
    text = load_prompt("replace", "released").text(CAPTION)
    assert text.startswith("Replace one word in the input sentence with a synonym, without changing the meaning "
                           "of the sentence. Only output the changed sentence.\nInput: ")


@pytest.mark.parametrize("kind", POSITIVE_TYPES)
def test_the_two_sets_are_different_files_with_their_own_sha256(kind):
    paper, released = load_prompt(kind, "paper"), load_prompt(kind, "released")
    assert paper.sha256 != released.sha256 and paper.prompt_set == "paper"
    folder = resource_dir("prompts")
    assert {paper.sha256, released.sha256} <= {hashlib.sha256(p.read_bytes()).hexdigest()
                                               for p in folder.rglob("*.txt")}
    assert paper.text(CAPTION).count(CAPTION) == 1 and "{caption}" not in paper.text(CAPTION)


def test_rows_and_cache_keys_keep_the_sets_and_chat_formats_apart():
    base = Sampling(0)
    made = {(s, f): list(make_prompts(RECORD, ("replace", "swap"), "m", f, s, base))
            for s in ("paper", "released") for f in ("auto", "none", "llama2")}
    keys = [e["key"] for elements in made.values() for e in elements]
    assert len(keys) == len(set(keys)) == 12
    for (prompt_set, _), elements in made.items():
        assert [e["prompt_set"] for e in elements] == [prompt_set] * 2
        assert [e["prompt_sha256"] for e in elements] == [load_prompt(k, prompt_set).sha256 for k in ("replace", "swap")]


def test_the_negatives_are_one_set_whatever_prompt_set_says():
    for kind in LLM_NEGATIVE_TYPES:
        assert load_prompt(kind, "released") == load_prompt(kind, "paper")
        assert load_prompt(kind).prompt_set == "negatives" and "{caption}" in load_prompt(kind).template


def test_completion_formats():
    assert completion("Hi", "none") == "Hi"
    assert completion("Hi", "llama2") == "[INST] Hi [/INST]"


def test_an_unknown_set_is_refused():
    with pytest.raises(ValueError, match="unknown prompt set"):
        load_prompt("replace", "appendix")
