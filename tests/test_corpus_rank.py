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


def test_the_words_of_each_image_are_kept_whatever_the_split():
    """Which words the captions of one photo use: any split of the captions, merged in any order, gives the
    same table; a word of another photo is not this one's."""
    images = [(c, k % 3) for k, c in enumerate(CAPTIONS)]
    whole = CorpusCounts()
    for c, image in images:
        whole.add(c, image)
    whole = whole.model()
    for seed in range(3):
        order = images[:]
        random.Random(seed).shuffle(order)
        left, right = CorpusCounts(), CorpusCounts()
        for c, image in order[:4]:
            left.add(c, image)
        for c, image in order[4:]:
            right.add(c, image)
        merged = right.merge(left).model()
        assert merged.fingerprint() == whole.fingerprint()
    # image 0: captions 0, 3, 6 (dog chasing cat; man riding horse; cat chasing mouse)
    def names(model, image, word):
        return word_key(word) in model.image_words_of(image)

    assert names(whole, 0, "horse") and names(whole, 0, "Mouse")
    assert not names(whole, 1, "horse") and not names(whole, 0, "umbrella")
    assert not names(whole, None, "horse") and not names(model_of(CAPTIONS), 0, "horse")
    assert names(pickle.loads(pickle.dumps(whole)), 0, "horse")


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
