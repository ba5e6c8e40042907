"""rule_clause (perturb/pos_clause.py): each way of saying a caption's clause, both directions, and the captions it
must leave alone (a second clause, "going to", a pronoun, a number English leaves open, a parse it cannot trust)."""
from __future__ import annotations

import pytest

from pipeline.perturb.generators import PARSER, TAGGER, spacy_pipeline
from pipeline.perturb.pos_clause import same_content
from pipeline.perturb.positives import RulePositives
from pipeline.perturb.wordnet import wordnet_available

pytestmark = pytest.mark.skipif(not wordnet_available(), reason="needs WordNet")


@pytest.fixture(scope="module")
def nlp():
    return spacy_pipeline({TAGGER, PARSER})


@pytest.fixture(scope="module")
def rules():
    return RulePositives.load(["rule_clause"])


def proposed(nlp, rules, caption: str) -> list[str]:
    return [c.text for c in rules.propose(nlp(caption))["rule_clause"]]


CLAUSES = [  # caption, a rewrite it must offer
    ("A man is riding a horse.", "A man rides a horse."),
    ("A man is riding a horse.", "A man riding a horse."),
    ("A man rides a horse.", "A man is riding a horse."),
    ("A man riding a horse.", "A man is riding a horse."),
    ("Two dogs playing in the snow.", "Two dogs are playing in the snow."),
    ("A man and a woman are riding bikes.", "A man and a woman ride bikes."),
    ("A bus parked on the street.", "A bus is parked on the street."),
    ("A bus is parked on the street.", "A bus parked on the street."),
    ("A laptop sits on a desk.", "A laptop is sitting on a desk."),       # a verb of position, any subject
    ("A group of people standing on a beach.", "A group of people are standing on a beach."),
    ("A cat on a couch.", "A cat is on a couch."),
    ("A cat is on a couch.", "A cat on a couch."),
    ("There are two dogs playing in the snow.", "Two dogs are playing in the snow."),
    ("Two dogs are playing in the snow.", "There are two dogs playing in the snow."),
    ("a table that has bananas on it", "a table with bananas on it"),
    ("A bathroom with a green shower curtain.", "A bathroom that has a green shower curtain."),
    ("A bus that is parked on the street.", "A bus parked on the street."),
    ("a brown bear shaking the water off", "a brown bear is shaking the water off"),  # a participle parsed as root
    ("A BOY TAKING A PICTURE WITH HIS PHONE", "A BOY IS TAKING A PICTURE WITH HIS PHONE"),  # shouted stays shouted
]

NO_CLAUSE = [  # caption, why it keeps its clause
    ("A man is riding a horse and a dog runs beside it.", "two clauses"),
    ("The batter is going to hit the ball.", "'going to' is a future"),
    ("We are looking at a plate of salad.", "a pronoun subject: 'we look at' (round 7)"),
    ("It is raining on the street.", "'it rains' is a habit"),
    ("A bowl contains fruit.", "a stative verb: 'is containing'"),
    ("A sign reads stop.", "'is reading' says something else"),
    ("A picture showing a cat.", "a photo frame"),
    ("A man with a dog on a beach.", "'with' of a person: he may be walking it"),
    ("A young kid in elbow and knee pads riding a skateboard.", "the parser's conjunct is the pads: 'are'"),
    ("A zebra grazes on tall grass.", "a verb the parser read as a plural noun"),
    ("A man is not riding a horse.", "a negation"),
    ("Girl trying out a game.", "a bare singular: 'Girl is trying'"),
    ("A woman on a court, holding a racket.", "a comma before the participle"),
    ("A pair of shoes sitting on a rug.", "the number English leaves open"),
]


@pytest.mark.parametrize("caption,expected", CLAUSES)
def test_clause_offers_the_other_form(nlp, rules, caption, expected):
    assert expected in proposed(nlp, rules, caption)


@pytest.mark.parametrize("caption,why", NO_CLAUSE)
def test_clause_leaves_alone(nlp, rules, caption, why):
    assert proposed(nlp, rules, caption) == [], why


def test_every_clause_rewrite_keeps_the_captions_words(nlp, rules):
    for caption, _ in CLAUSES:
        for text in proposed(nlp, rules, caption):
            assert same_content(caption, text) and text != caption, (caption, text)


def test_the_check_refuses_a_changed_word():
    assert same_content("A man riding a horse.", "A man is riding a horse.")
    assert not same_content("A man riding a horse.", "A woman is riding a horse.")
    assert not same_content("A man riding a horse.", "A man is riding.")


FRAMED = [  # a caption that opens with a photo frame, a rewrite inside the frame it must offer
    ("A photo of a man riding a horse.", "A photo of a man who is riding a horse."),
    ("A picture of a cat on a couch", "A picture of a cat that is on a couch"),
    ("A black and white photo of two men on a bench", "A black and white photo of two men who are on a bench"),
    ("An image showing a bus parked on the street.", "An image showing a bus that is parked on the street."),
    ("This is a picture of a table that has bananas on it", "This is a picture of a table with bananas on it"),
]

FRAMED_NOT = [  # a framed caption, a rewrite it must not offer, why
    ("A photo of a man riding a horse.", "A photo of a man is riding a horse.", "a sentence inside the frame"),
    ("A picture of a cat on a couch", "A picture of a cat is on a couch", "a sentence inside the frame"),
    ("A photo of a man is riding a horse", "A photo of a man rides a horse", "no noun phrase after the frame"),
    ("A close up of a man riding a horse", "A close up of a man who is riding a horse", ("a close shot is no frame "
                                                                                         "of the whole scene")),
    ("A man taking a picture of a dog sitting on a bench", ("A man taking a picture of a dog that is sitting on a "
                                                            "bench"), "the photo is a thing in the scene"),
]


@pytest.mark.parametrize("caption,expected", FRAMED)
def test_a_framed_caption_has_its_scene_said_another_way(nlp, rules, caption, expected):
    offered = proposed(nlp, rules, caption)
    assert expected in offered, offered
    assert all(same_content(caption, text) for text in offered)


@pytest.mark.parametrize("caption,forbidden,why", FRAMED_NOT)
def test_a_framed_caption_stays_a_noun_phrase(nlp, rules, caption, forbidden, why):
    assert forbidden not in proposed(nlp, rules, caption), why


def test_the_scene_of_a_frame(nlp):
    from pipeline.perturb.frames import framed_scene
    framed = framed_scene(nlp("A black and white photo of two men on a bench."))
    assert framed.prefix == "A black and white photo of "
    assert [(t.text, t.dep_) for t in framed.scene if t.dep_ in ("ROOT", "prep")] == [("men", "ROOT"), ("on", "prep")]
    assert framed_scene(nlp("A close up of a pizza on a table")) is None
    assert framed_scene(nlp("A dog next to a picture of a cat")) is None
