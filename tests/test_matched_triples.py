"""Matched training triples: the exchange negatives (perturb/neg_exchange.py), a caption's negative carried over to
its positive (perturb/transfer.py), and train_set's choice among them (stages/train_set.py): structure first, then
edits admitted by the word balance."""
from __future__ import annotations

from collections import Counter

import pytest

from pipeline.perturb import transfer
from pipeline.perturb.generators import PARSER, TAGGER, spacy_pipeline
from pipeline.perturb.wordnet import wordnet_available
from pipeline.stages.train_set import BALANCED, CAPTION, POSITIVE, STRUCTURE, UNBALANCED, negative_options, \
    pick_negative, reverse_edit


def test_an_exchange_is_found_and_carried_to_the_positive():
    caption, negative = "A man chasing a dog.", "A dog chasing a man."
    assert transfer.exchanged_phrases(caption, negative) == (("man",), ("dog",))
    assert transfer.exchange_in("A dog chased by a man.", ("man",), ("dog",)) == "A man chased by a dog."
    assert transfer.exchange_in("A man is chasing a dog.", ("man",), ("dog",)) == "A dog is chasing a man."
    phrases = transfer.exchanged_phrases("A black dog and a white cat", "A white dog and a black cat")
    assert transfer.exchange_in("A white cat and a black dog", *phrases) == "A black cat and a white dog"
    phrases = transfer.exchanged_phrases("Two dogs chasing a cat", "A cat chasing two dogs")
    assert phrases == (("two", "dogs"), ("a", "cat"))
    assert transfer.exchange_in("A cat chased by two dogs", *phrases) == "Two dogs chased by a cat"


def test_an_exchange_is_not_carried_where_a_phrase_is_not_there_once_or_a_pronoun_points_at_one():
    assert transfer.exchange_in("A dog chased by a man and a man.", ("man",), ("dog",)) is None
    assert transfer.exchange_in("Some lights with a glass in front of them.", ("a", "glass"), ("some", "lights")) \
        is None
    assert transfer.exchange_in("A puppy chased by a man.", ("man",), ("dog",)) is None
    assert transfer.exchanged_phrases("A man chasing a dog.", "A woman chasing a dog.") is None


def test_an_edit_is_carried_beside_the_words_that_decided_it():
    assert transfer.edit_in("A man riding a horse.", "A woman riding a horse.", "A horse ridden by a man.",
                            "object") == "A horse ridden by a woman."
    assert transfer.edit_in("A man riding a horse.", "A man riding an elephant.", "A horse ridden by a man.",
                            "object") == "An elephant ridden by a man."
    assert transfer.edit_in("A black dog on a couch", "A white dog on a couch", "A couch with a black dog on it",
                            "attribute") == "A couch with a white dog on it"
    # a relation is decided by what follows it: "on a couch" is not "on it"
    assert transfer.edit_in("A cat on a couch", "A cat under a couch", "A couch with a cat on it", "relation") is None
    # the same word twice in the positive: which one is not known
    assert transfer.edit_in("A dog near a cat.", "A dog near a bird.", "A cat and a cat.", "object") is None
    # an attribute before another noun
    assert transfer.edit_in("A black dog", "A white dog", "A black cat", "attribute") is None
    assert transfer.edit_key("A horse ridden by a man.", "A horse ridden by a woman.") == "man -> woman"
    assert reverse_edit("man -> woman") == "woman -> man"


def negative(text: str, kind: str = "replace", index: int = 0, atom: str | None = "object") -> dict:
    return {"negative_type": kind, "negative_index": index, "hard_negative": text, "atom": atom,
            "generator": f"{kind}/1", "model": None, "seed": 0}


def test_options_put_structure_first_then_the_first_types_edits_then_the_caption_as_written():
    caption, positive = "A man chasing a dog.", "A dog chased by a man."
    negatives = [negative("A woman chasing a dog.", index=0), negative("A boy chasing a dog.", index=1),
                 negative("A dog chasing a man.", "exchange", atom=None)]
    options = negative_options(caption, positive, negatives, ["replace", "exchange"], True)
    assert [(o["text"], o["source"], o["edit"]) for o in options] == [
        ("A man chased by a dog.", POSITIVE, None),
        ("A dog chased by a woman.", POSITIVE, "man -> woman"),
        ("A dog chased by a boy.", POSITIVE, "man -> boy"),
        ("A woman chasing a dog.", CAPTION, None)]
    assert pick_negative(options, "ex1", 0, {})[1] == STRUCTURE
    assert negative_options(caption, positive, negatives, ["replace", "exchange"], False) == [options[-1]]
    # a later type is a fallback, never carried over ahead of the first type's own negative
    llm = [negative("A man chasing a cat.", "llm_replace_obj", atom=None), *negatives[:2]]
    assert [o["source"] for o in negative_options(caption, positive, llm, ["llm_replace_obj", "replace"], True)] \
        == [CAPTION]


def test_the_word_balance_admits_an_edit_in_as_many_triples_as_could_take_it_back():
    options = [{"negative": {}, "text": "A dog chased by a woman.", "source": POSITIVE, "edit": "man -> woman"},
               {"negative": {}, "text": "A dog chased by a boy.", "source": POSITIVE, "edit": "man -> boy"},
               {"negative": {}, "text": "A woman chasing a dog.", "source": CAPTION, "edit": None}]
    # 1,000 triples could take man -> woman, 250 woman -> man: about a quarter of the first are admitted
    edits = {"man -> woman": 1000, "woman -> man": 250, "man -> boy": 10, "boy -> man": 10}
    picks = Counter(pick_negative(options[:1] + options[2:], f"ex{i}", 0, edits)[1] for i in range(1000))
    assert 200 <= picks[BALANCED] <= 300 and picks[BALANCED] + picks[UNBALANCED] == 1000
    # the next edit is tried where the first loses its draw
    picks = Counter(pick_negative(options, f"ex{i}", 0, edits)[0]["edit"] for i in range(1000))
    assert picks["man -> boy"] >= 700
    # the same caption and seed always pick the same
    assert pick_negative(options, "ex7", 0, edits) == pick_negative(options, "ex7", 0, edits)


@pytest.fixture(scope="module")
def exchanges():
    if not wordnet_available():
        pytest.skip("needs WordNet")
    from pipeline.perturb.generators import Generators

    nlp = spacy_pipeline({TAGGER, PARSER})
    generators = Generators.load(["exchange"])
    return lambda caption: [c.text for c, _ in generators.propose(nlp(caption))["exchange"]]


@pytest.mark.parametrize("caption,expected", [
    ("A dog chasing a cat.", "A cat chasing a dog."),
    ("A man pushing a woman.", "A woman pushing a man."),
    ("A dog chasing a man.", "A man chasing a dog."),              # a chase, either way
    ("A car behind a bus.", "A bus behind a car."),
    ("A white dog and a black cat.", "A black dog and a white cat."),
])
def test_exchange_negatives(exchanges, caption, expected):
    assert expected in exchanges(caption)


@pytest.mark.parametrize("caption,why", [
    ("A man riding a horse.", "a horse riding a man is no scene a photo shows"),
    ("A man hugging a woman.", "a hug is mutual"),
    ("A man watching a woman.", "two may watch each other"),
    ("A man lifting a child.", "a child lifting a man"),
    ("A woman feeding a baby.", "a baby feeding a woman"),
    ("A colorful umbrella outside a pink building.", "a pink umbrella may be called colorful"),
    ("A cat next to a dog.", "an order-free relation: the same scene"),
    ("A cat sitting on a white bed.", "no colour moved to a thing with none"),
    ("A man holding his dog.", "a pronoun"),
])
def test_exchange_leaves_alone(exchanges, caption, why):
    assert exchanges(caption) == [], why
