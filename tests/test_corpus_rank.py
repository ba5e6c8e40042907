"""The first pass's corpus model (vocabulary, trigram model) and the rankers that choose among candidates."""
import math
import pickle
import random

import numpy as np
import pytest

from pipeline.perturb.corpus import BOS, CorpusCounts, tokens, word_key
from pipeline.perturb.rank import NgramScorer, choose, drops

CAPTIONS = ["A dog chasing a cat in the park.", "A cat sleeping on a couch.", "Two dogs playing in the grass.",
            "A man riding a horse in a field.", "A woman holding an umbrella on a street.",
            "A dog sleeping on a couch.", "A cat chasing a mouse in the kitchen."]


def model_of(captions):
    counts = CorpusCounts()
    for c in captions:
        counts.add(c)
    return counts.model()


def test_vocabulary_counts_the_captions_words():
    model = model_of(CAPTIONS)
    assert model.count("dog") == 2 and model.count("Dog") == 2 and model.count("dogs") == 1
    assert model.count("scriptorium") == 0
    assert model.bigram("a", "dog") == 2 and model.bigram("dog", "a") == 0
    assert model.captions == len(CAPTIONS)


def test_merging_partial_counts_equals_counting_once():
    """Beam combines per bundle and merges: any split, in any order, gives the same model bytes."""
    whole = model_of(CAPTIONS)
    for seed in range(3):
        order = CAPTIONS[:]
        random.Random(seed).shuffle(order)
        left, right = CorpusCounts(), CorpusCounts()
        for c in order[:3]:
            left.add(c)
        for c in order[3:]:
            right.add(c)
        merged = right.merge(left).model()
        assert merged.fingerprint() == whole.fingerprint()
        assert merged.vocabulary == whole.vocabulary
    assert pickle.loads(pickle.dumps(whole)).fingerprint() == whole.fingerprint()


@pytest.mark.parametrize("spilled", [False, True])
def test_each_caption_gets_the_words_its_photos_captions_name(tmp_path, spilled):
    """The join by photo (stages/captions.join_photo_words), through Beam's shuffle and through spill files: a
    caption gets every word some caption of its photo names (a --reference_captions one too), no word of
    another photo's, and None where its photo is unknown. The corpus model holds no per-photo table."""
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    from pipeline.io import spill
    from pipeline.options import FnApiDirectRunner
    from pipeline.stages.captions import join_photo_words

    records = [{"caption": c, "image_id": k % 3 if k < 6 else None, "example_id": f"e{k}"}
               for k, c in enumerate(CAPTIONS)]
    reference = [{"caption": "A horse in a barn.", "image_id": 1, "example_id": "ref"}]

    def named(*captions):
        return sorted({word_key(w) for c in captions for w in tokens(c) if any(ch.isalpha() for ch in w)})

    c, barn = CAPTIONS, reference[0]["caption"]
    expected = [("e0", named(c[0], c[3])), ("e3", named(c[0], c[3])), ("e1", named(c[1], c[4], barn)),
                ("e4", named(c[1], c[4], barn)), ("e2", named(c[2], c[5])), ("e5", named(c[2], c[5])), ("e6", None)]
    assert word_key("horse") in dict(expected)["e1"] and word_key("horse") not in dict(expected)["e2"]
    with spill.spilling(str(tmp_path / "spill") if spilled else None):
        with beam.Pipeline(runner=FnApiDirectRunner()) as p:
            mine = p | "Records" >> beam.Create(records)
            counted = (mine, p | "Reference" >> beam.Create(reference)) | beam.Flatten()
            found = join_photo_words(mine, counted) | beam.Map(
                lambda pair: (pair[0]["example_id"], None if pair[1] is None else sorted(pair[1])))
            assert_that(found, equal_to(expected))
    assert not hasattr(model_of(CAPTIONS), "image_words")


def test_the_trigram_model_is_a_distribution():
    """P(w | u v), the interpolation CorpusModel.logprobs computes, sums to 1 over every word id (the unknown
    word included), after a seen context and an unseen one."""
    model = model_of(CAPTIONS)
    ids = np.arange(model.size)
    for u, v in ((model.vocabulary["a"], model.vocabulary["dog"]), (model.size - 1, model.size - 1)):
        assert abs(_next_word_probabilities(model, u, v, ids).sum() - 1.0) < 1e-9
    # and it is the distribution logprobs uses: "a dog chasing" scored word by word
    a, dog, chasing = (model.vocabulary[w] for w in ("a", "dog", "chasing"))
    bos = model.vocabulary[BOS]
    expected = sum(math.log(_next_word_probabilities(model, u, v, ids)[w])
                   for u, v, w in ((bos, bos, a), (bos, a, dog), (a, dog, chasing), (dog, chasing,
                                                                                      model.vocabulary["</s>"])))
    assert abs(model.logprobs(["a dog chasing"])[0] - expected) < 1e-9


def _next_word_probabilities(model, u, v, ids):
    """The same interpolation as CorpusModel.logprobs, for every next word at once."""
    from pipeline.perturb.corpus import DISCOUNT, _lookup

    size = model.size
    p = (model.unigram[ids] + 1) / (model.unigram.sum() + size)
    c2 = _lookup(model.keys2, model.count2, v * size + ids)
    if model.context1[v] > 0:
        p = (np.maximum(c2 - DISCOUNT, 0) + DISCOUNT * model.follow1[v] * p) / model.context1[v]
    key = np.full(len(ids), u * size + v)
    ctx2 = _lookup(model.context_keys2, model.context2, key)[0]
    fol2 = _lookup(model.context_keys2, model.follow2, key)[0]
    c3 = _lookup(model.keys3, model.count3, key * size + ids)
    if ctx2 > 0:
        p = (np.maximum(c3 - DISCOUNT, 0) + DISCOUNT * fol2 * p) / ctx2
    return p


def test_the_trigram_model_prefers_caption_english():
    model = model_of(CAPTIONS * 3)
    good, bad = model.logprobs(["A cat chasing a dog in the park.", "A park chasing a dog in the cat."])
    assert good > bad
    assert tokens("A dog's toy, red.") == ["a", "dog's", "toy", ",", "red", "."]


def test_drops_and_choose():
    assert drops([-10.0, -12.5, -10.0004, -9.0]) == [2.5, 0.0, -1.0]
    items = ["a", "b", "c", "d"]
    scores = [2.0, 0.5, 0.5, 3.0]
    picked = choose(items, scores, random.Random(1), 3)
    assert [s for _, s in picked] == [0.5, 0.5, 2.0]
    assert {i for i, _ in picked[:2]} == {"b", "c"}
    # ties are broken by the record's RNG, so different records may differ, one record never does
    firsts = {choose(items, scores, random.Random(seed), 1)[0][0] for seed in range(20)}
    assert firsts == {"b", "c"}
    assert choose(items, scores, random.Random(5), 2) == choose(items, scores, random.Random(5), 2)
    # no ranker: a draw, every item possible
    drawn = {choose(items, None, random.Random(seed), 1)[0] for seed in range(40)}
    assert drawn == {(i, None) for i in items}


def test_ngram_drops_from_the_changed_trigrams_equal_drops_of_whole_texts():
    """The scorer reads only the trigrams a change touches; that equals scoring both whole texts, also for a
    change inside a word ("close-up" -> "close-down") and at either end."""
    from pipeline.perturb.candidates import make_candidate

    model = model_of(CAPTIONS * 2)
    caption = "A close-up of a dog's toy on a couch."
    negatives = ["A close-down of a dog's toy on a couch.", "A close-up of a cat's toy on a couch.",
                 "The close-up of a dog's toy on a couch.", "A close-up of a dog's toy under a couch.",
                 "A close-up of a dog's toy on a bed!", "A close-up of a couch on a dog's toy."]
    candidates = [make_candidate("x", caption, n) for n in negatives]
    local = NgramScorer(model).drop_groups([(caption, candidates)])[0]
    whole = drops(model.logprobs([caption, *negatives]))
    assert local == whole and len(set(local)) > 1


@pytest.fixture(scope="module")
def lm():
    from pipeline.llm.scoring import LMScorer

    return LMScorer()  # the embedded SmolLM2-135M-Instruct: a real model, on CPU


def test_the_embedded_language_model_scores_plausibility(lm):
    good, swapped, nonsense = lm.logprobs(["A dog chasing a cat in a park.", "A cat chasing a dog in a park.",
                                           "A park chasing a cat in the dog."])
    assert good > nonsense and swapped > nonsense
    assert lm.model_name == "SmolLM2-135M-Instruct"


def test_a_groups_scores_do_not_depend_on_its_batch_mates(lm):
    group = ["A man riding a horse.", "A woman riding a horse.", "A horse riding a man on the beach today."]
    alone = lm.logprob_groups([group])[0]
    together = lm.logprob_groups([["x " * 30], group])[1]
    assert [round(a, 3) for a in alone] == [round(b, 3) for b in together]


def test_relation_counts_hold_about_the_distinct_relations_not_one_key_per_caption():
    """The swap statistics' accumulator (a CombineFn's, on every worker): 600,000 keys of 1,000 distinct
    relations, added and merged in any split, give numpy's unique table, while never holding more than twice
    the distinct keys past the floor."""
    from pipeline.perturb.relations import RelationCounts

    rng = np.random.default_rng(0)
    keys = rng.integers(0, 2**63, size=1_000, dtype=np.uint64)[rng.integers(0, 1_000, size=600_000)]
    parts = [RelationCounts() for _ in range(3)]
    held = 0
    for n, chunk in enumerate(np.array_split(keys, 600)):
        parts[n % 3].add(chunk.tolist())
        held = max(held, *(len(p.keys) for p in parts))
    merged = parts[2].merge(parts[0]).merge(parts[1])
    assert np.array_equal(merged.table(), np.unique(keys))
    assert held <= 2 * RelationCounts.FLOOR + 1_000 and len(merged.keys) <= 2 * RelationCounts.FLOOR + 1_000
