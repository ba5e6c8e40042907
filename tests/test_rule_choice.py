"""How the rule positives choose among a caption's candidates (stages/rule_positives.py): the rarest substitution,
a cap on any one substitution's share, "is" added no more often than taken out, the REPLACE set's substitutions
held out unless asked for; the same rows for any order of the input."""
from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from pipeline.perturb import substitution
from pipeline.run import main
from pipeline.stages.rule_positives import ADDS_BE, CAPTIONS, DROPS_BE, FirstChoice, SecondChoice, allowances, \
    applicability, balanced, threshold
from tests.conftest import report, rows_of

T = "rule_replace"


def option(key: str, flow: int = 0) -> dict:
    return {"text": f"text of {key}", "span": key, "surface": key, "key": key, "flow": flow}


def item(i: int, keys: list[str], flows: dict | None = None) -> dict:
    record = {"example_id": f"ex{i:05d}", "caption_id": i, "image_id": i, "key": str(i), "file_name": None, "image_url": None,
              "source_file": "f.json", "caption": f"caption {i}", "source": "coco", "source_index": i}
    return {"record": record, "options": {T: [option(k, (flows or {}).get(k, 0)) for k in keys]},
            "why": {T: ["no_table_synonym", ""]} if not keys else {}, "held_out": []}


def choose(items: list[dict], share: float, seed: int = 0) -> dict[str, dict]:
    """The two rounds as the stage runs them, in plain Python: example_id -> the row chosen (or None)."""
    counts = Counter()
    for it in items:
        counts.update({k: n for k, n in applicability(it)})
    histogram = Counter()
    for it in items:
        histogram.update({k: n for k, n in threshold(it, counts, seed)})
    allowance = allowances(dict(histogram), share)
    first, round1 = FirstChoice([T], seed), Counter()
    passed = []
    for it in items:
        for out in first.process(json.loads(json.dumps(it)), counts, allowance):
            if isinstance(out, dict):
                passed.append(out)
            else:
                round1.update({out.value[0]: out.value[1]})
    second, rows = SecondChoice([T], seed), {}
    for it in passed:
        rows[it["record"]["example_id"]] = None
        for out in second.process(it, counts, allowance, dict(round1)):
            if isinstance(out, dict):
                rows[out["example_id"]] = out
    return rows


def corpus() -> list[dict]:
    """3,000 captions: "man -> guy" a candidate in 1,500 (alone in 1,000), 200 rarer substitutions spread over
    the rest."""
    rng = random.Random(1)
    items = []
    for i in range(3000):
        keys = [f"rare{rng.randrange(200)}"] if i >= 1000 else []
        if i < 1500:
            keys.append("man -> guy")
        items.append(item(i, keys))
    return items


def test_no_substitution_is_more_than_the_share_of_the_rows():
    rows = choose(corpus(), 0.025)
    chosen = Counter(r["changed_span"] for r in rows.values() if r)
    total = sum(chosen.values())
    assert total > 2000
    assert max(chosen.values()) / total <= 0.03, chosen.most_common(3)
    # without the cap the common one takes every caption it can
    uncapped = Counter(r["changed_span"] for r in choose(corpus(), 1.0).values() if r)
    assert uncapped["man -> guy"] >= 1000


def test_the_rarer_substitution_is_chosen_where_a_caption_has_two():
    rows = choose(corpus(), 1.0)
    both = [f"ex{i:05d}" for i in range(1000, 1500)]
    assert all(rows[e]["changed_span"].startswith("rare") for e in both)


def test_the_order_of_the_input_does_not_change_a_row():
    items = corpus()
    shuffled = list(items)
    random.Random(7).shuffle(shuffled)
    assert choose(items, 0.025) == choose(shuffled, 0.025)
    assert choose(items, 0.025, seed=1) != choose(items, 0.025)


def test_is_is_added_no_more_often_than_taken_out_with_balance_is():
    items = [item(i, ["riding -> is riding"], {"riding -> is riding": 1}) for i in range(600)]
    items += [item(600 + i, ["is sitting -> sits"], {"is sitting -> sits": -1}) for i in range(200)]
    counts = Counter()
    for it in items:
        counts.update({k: n for k, n in applicability(it)})
    assert counts[(T, ADDS_BE)] == 600 and counts[(T, DROPS_BE)] == 200 and counts[(T, CAPTIONS)] == 800
    kept = sum(bool(balanced(it["options"][T], T, it["record"]["example_id"], 0, counts)) for it in items[:600])
    assert 150 <= kept <= 250  # about the 200 captions that take one out
    assert all(balanced(it["options"][T], T, it["record"]["example_id"], 0, counts) for it in items[600:])
    # off (the default since the train table's negatives are made from the positive): every option kept
    assert all(balanced(it["options"][T], T, it["record"]["example_id"], 0, counts, on=False) == it["options"][T]
               for it in items)


def test_the_replace_sets_substitutions_are_keys_either_way_and_inflection_aside():
    keys = substitution.replace_eval_keys()
    for old, new in (("sitting", "seated"), ("sits", "is seated"), ("seated", "sitting"), ("large", "big"),
                     ("big", "large"), ("wearing", "in"), ("under", "beneath"), ("beneath", "under")):
        assert substitution.key(old, new) in keys, (old, new)
    for old, new in (("next to", "beside"), ("man", "guy"), ("under", "underneath"), ("couch", "sofa")):
        assert substitution.key(old, new) not in keys, (old, new)


CAPTIONS_HELD = ["A man wearing a hat.", "A large dog on a bed.", "A man sitting on a bench.",
                 "A cat under a table.", "A cat sitting on a couch.", "A woman wearing a red coat."]


@pytest.fixture(scope="module")
def held_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("held")
    captions = base / "captions.json"
    captions.write_text(json.dumps({
        "images": [{"id": i, "file_name": f"{i:012d}.jpg"} for i in range(len(CAPTIONS_HELD))],
        "annotations": [{"id": 100 + i, "image_id": i, "caption": c} for i, c in enumerate(CAPTIONS_HELD)]}))
    runs = {}
    for name, extra in (("default", []), ("allowed", ["--allow_eval_substitutions"])):
        out = base / name
        assert main(["--stage=hard_positives", f"--coco_captions={captions}", f"--output_dir={out}",
                     "--positive_types=rule_replace", "--runner=DirectRunner", "--progress_seconds=0", *extra]) == 0
        runs[name] = out
    return runs


def test_training_positives_hold_out_the_replace_sets_substitutions(held_runs):
    keys = substitution.replace_eval_keys()
    default = rows_of(held_runs["default"], "hard_positives")
    for row in default:
        old, new = substitution.changed_span(row["caption"], row["hard_positive"])
        assert substitution.key(old, new) not in keys, row
    held = report(held_runs["default"])["tables"]["hard_positives"]["rule_types"][T]["held_out_eval_substitution"]
    assert held["captions_with_one"] >= 4 and held["captions_left_without"] >= 1
    allowed = rows_of(held_runs["allowed"], "hard_positives")
    used = [r for r in allowed if substitution.key(*substitution.changed_span(r["caption"], r["hard_positive"]))
            in keys]
    assert used and len(allowed) > len(default)
    again = report(held_runs["allowed"])["tables"]["hard_positives"]["rule_types"][T]["held_out_eval_substitution"]
    assert again == {"captions_with_one": 0, "captions_left_without": 0}
