"""LLM hard negatives (llm_replace_obj, llm_swap_obj, ...): recorded answers through the replay engine, the
validation they get (one span or the same words, the meaning changed), the cache, and train_set taking an
LLM negative first and falling back to a rule-based one."""
from __future__ import annotations

import json

import pytest

from pipeline.llm.validate import Validator, validate_negative
from pipeline.run import main
from tests.conftest import report, rows_of

CAPTIONS = [
    "A man riding a horse on a sandy beach.",
    "A dog and a cat sleeping on the couch",
    "A woman holding an umbrella next to a dog.",
    "Two birds sitting on a wooden fence.",
    "A man riding a bicycle down a busy street.",
]
# (type, caption index, answer, reason or "" when it must be kept)
NEGATIVE_ANSWERS = [
    ("llm_replace_obj", 0, "A man riding a camel on a sandy beach.", ""),
    ("llm_swap_obj", 0, "A horse riding a man on a sandy beach.", ""),
    ("llm_replace_obj", 1, "A dog and a cat sleeping on the sofa", "synonym"),
    ("llm_swap_obj", 1, "A cat and a dog sleeping on the couch", "conjunct_swap"),
    ("llm_replace_obj", 2, "A woman holding an umbrella next to a dog.", "identical"),
    ("llm_swap_obj", 2, "A dog holding an umbrella next to a woman.", ""),
    ("llm_replace_obj", 3, "Two birds sitting on a metal fence.", "wrong_kind"),
    ("llm_swap_obj", 3, "Output: Two birds are making pizzas.", "prompt_echoed"),
    ("llm_replace_obj", 4, "A man riding a bicycle down a quiet street.", "wrong_kind"),
    ("llm_swap_obj", 4, "A bicycle riding a man down a busy street.", ""),
]
POSITIVE_ANSWERS = [
    ("replace", 0, "A man riding a horse on a sandy shore."),
    ("replace", 1, "A dog and a cat sleeping on the sofa"),
    ("swap", 1, "A cat and a dog sleeping on the couch"),
    ("replace", 2, "A woman grasping an umbrella next to a dog."),
    ("replace", 3, "Two birds perched on a wooden fence."),
    ("replace", 4, "A man riding a bike down a busy street."),
]


def write_inputs(folder):
    images = [{"id": 100 + i, "file_name": f"{100 + i:012d}.jpg", "coco_url": f"http://x/{100 + i}.jpg"}
              for i in range(len(CAPTIONS))]
    annotations = [{"id": 1000 + i, "image_id": 100 + i, "caption": c} for i, c in enumerate(CAPTIONS)]
    captions = folder / "captions.json"
    captions.write_text(json.dumps({"images": images, "annotations": annotations}))
    replay = folder / "replay.jsonl"
    lines = [{"type": t, "caption": CAPTIONS[i], "text": text} for t, i, text, _ in NEGATIVE_ANSWERS]
    lines += [{"type": t, "caption": CAPTIONS[i], "text": text} for t, i, text in POSITIVE_ANSWERS]
    replay.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return captions, replay


def llm(captions, replay, cache):
    return [f"--coco_captions={captions}", f"--cache_dir={cache}", "--llm_engine=replay", f"--llm_replay={replay}",
            "--model=m", "--progress_seconds=0"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two pipelines on one cache: train_negatives with two LLM types and the rule-based replace, then --stage=all
    taking llm_replace_obj first and replace as the fall-back (its LLM answers all come from the cache)."""
    base = tmp_path_factory.mktemp("llm_negatives")
    captions, replay = write_inputs(base)
    cache, out, everything = base / "cache", base / "out", base / "all"
    negatives = "--negative_types=llm_replace_obj,llm_swap_obj,replace"
    assert main(["--stage=train_negatives", negatives, f"--output_dir={out}", *llm(captions, replay, cache)]) == 0
    train_types = "--negative_types=llm_replace_obj,replace"
    assert main(["--stage=all", train_types, "--llm_prompts=all", f"--output_dir={everything}",
                 *llm(captions, replay, cache)]) == 0
    return out, report(out), everything


def test_every_answer_is_kept_or_rejected_for_its_reason(runs):
    out, first, _ = runs
    section = first["tables"]["llm_negatives"]
    assert section["prompts"] == 10 == section["accepted"] + section["rejected_generations"]
    assert section["balanced"] and section["prompt_set"] == "negatives" and section["llm_engine"] == "replay"
    assert section["generation_calls"] == 10 and section["cache_hits"] == 0
    kept = {(r["negative_type"], r["caption"], r["hard_negative"]) for r in rows_of(out, "llm_negatives")}
    assert kept == {(t, CAPTIONS[i], text) for t, i, text, reason in NEGATIVE_ANSWERS if not reason}
    assert reasons_of(out) == {(t, CAPTIONS[i]): reason for t, i, _, reason in NEGATIVE_ANSWERS if reason}
    # the rule-based table is written beside it, in the same run
    assert first["tables"]["train_negatives"]["rows"] > 0


def reasons_of(out) -> dict:
    import pyarrow.parquet as pq

    found = {}
    for f in sorted((out / "rejected").glob("llm_negatives-*.parquet")):
        for row in pq.read_table(f).to_pylist():
            record = json.loads(row["record"])
            found[(record["negative_type"], record["caption"])] = row["reason"]
    return found


def test_rows_name_the_prompt_and_the_change(runs):
    from pipeline.llm.prompts import load_prompt

    for row in rows_of(runs[0], "llm_negatives"):
        assert row["prompt_sha256"] == load_prompt(row["negative_type"]).sha256 and row["prompt_set"] == "negatives"
        assert row["max_new_tokens"] == 40 and row["model"] == "m" and row["chat_format"] == "auto"
        if row["negative_type"] == "llm_replace_obj":
            assert row["changed_span"] == "'horse' -> 'camel'"
        else:
            assert row["changed_span"] is None


def test_a_second_run_is_answered_from_the_cache(runs):
    out, _, everything = runs
    section = report(everything)["tables"]["llm_negatives"]
    assert section["generation_calls"] == 0 and section["cache_hits"] == 5 == section["prompts"]
    # each table keeps its answers in its own cache folder
    cache = out.parent / "cache"
    negatives = [json.loads(line)["key"] for f in (cache / "llm_negatives").glob("*.jsonl") for line in f.open()]
    positives = [json.loads(line)["key"] for f in (cache / "hard_positives").glob("*.jsonl") for line in f.open()]
    assert len(negatives) == 10 and len(positives) == 6 and not set(negatives) & set(positives)
    assert rows_of(everything, "llm_negatives") == \
        [r for r in rows_of(out, "llm_negatives") if r["negative_type"] == "llm_replace_obj"]


def test_train_set_takes_the_llm_negative_first_and_falls_back_to_the_rule_based_one(runs):
    everything = runs[2]
    train = {r["caption"]: r for r in rows_of(everything, "train")}
    rule = {}
    for r in rows_of(everything, "train_negatives"):
        if r["negative_type"] == "replace":
            rule.setdefault(r["caption"], set()).add(r["hard_negative"])
    assert train[CAPTIONS[0]]["hard_negative"] == "A man riding a camel on a sandy beach."
    assert train[CAPTIONS[0]]["negative_type"] == "llm_replace_obj"
    assert train[CAPTIONS[0]]["negative_generator"] == "llm_replace_obj/m"
    fallbacks = [c for c in CAPTIONS[1:] if c in rule]
    assert fallbacks, "the rule-based generator found no replace negative for the captions without an LLM one"
    for caption in fallbacks:  # one of the caption's replace negatives, as written or carried to its positive
        row = train[caption]
        assert row["negative_type"] == "replace" and row["negative_source"] in ("caption", "hard_positive")
        assert row["hard_negative"] in rule[caption] if row["negative_source"] == "caption" else \
            row["hard_negative"] != row["hard_positive"]
    section = report(everything)["tables"]["train"]
    assert section["rows"] == len(train) and section["balanced"]
    assert set(report(everything)["tables"]) == {"train_negatives", "llm_negatives", "hard_positives", "train"}


@pytest.mark.parametrize("negative_type,caption,raw,reason", [
    ("llm_replace_att", "A red bus parked on the street.", "A blue bus parked on the street.", ""),
    ("llm_replace_att", "A large dog on a couch.", "A big dog on a couch.", "synonym"),
    ("llm_replace_rel", "A cat sitting on a table.", "A cat sitting under a table.", ""),
    ("llm_replace_rel", "A man holding a surfboard.", "A man grasping a surfboard.", "synonym"),
    ("llm_swap_att", "A white cat and a black dog.", "A black cat and a white dog.", ""),
    ("llm_swap_att", "A white cat and a black dog.", "A black dog and a white cat.", "conjunct_swap"),
    ("llm_swap_obj", "A cat on top of a dog.", "A cat on top of a dog.", "identical"),
    ("llm_replace_obj", "A cat on a mat.", "A cat on a mat next to a big dog.", "words_added"),
    # SmolLM2's answers on real captions
    ("llm_replace_obj", "A man in a wetsuit that is riding on a surfboard.",
     "A woman in a wetsuit that is riding on a surfboard.", ""),
    ("llm_replace_obj", "An adult sheep is getting shorn by a male farmer.",
     "A woman is getting shorn by a male farmer.", ""),
    ("llm_replace_rel", "The cabinet has a various assortment of decorations on it.",
     "The cabinet has a variety of decorations on it.", "synonym"),
    ("llm_replace_rel", "An old and run down bathroom with dark red accent colors.",
     "An old and run down bathroom with dark red accents.", "same_word"),
    ("llm_replace_rel", "The little baby is reaching up with his hand.", "The little baby reaches up with his hand.",
     "same_word"),
    ("llm_replace_rel", "The young is enjoying his cake so much its all over him.",
     "The young is enjoying his cake so much that it's all over him.", "no_content_word"),
    ("llm_replace_att", "A big red ball on the grass.", "A small red ball on the grass.", ""),
])
def test_negative_verdicts(negative_type, caption, raw, reason):
    verdict = Validator(wordnet=True)({"kind": negative_type, "caption": caption},
                                      {"text": raw, "finish_reason": "stop"})
    assert (verdict.reason or "") == reason, verdict
    assert verdict.ok == (not reason)
    # without WordNet only the lexicon-free rules reject
    assert validate_negative(negative_type, caption, raw, "stop").ok == (reason in ("", "synonym", "same_word"))
