"""rule_voice (perturb/pos_voice.py) and rule_converse (perturb/pos_relation.py): positives that keep the scene and
change the structure; each offers the other way of saying the caption, and leaves alone the captions where that could
change the scene or break the English (each case below names what it guards against)."""
from __future__ import annotations

import pytest

from pipeline.perturb.generators import PARSER, TAGGER, spacy_pipeline
from pipeline.perturb.pos_relation import same_things
from pipeline.perturb.pos_voice import same_action
from pipeline.perturb.positives import OWN_CHECKS, RulePositives
from pipeline.perturb.wordnet import wordnet_available

pytestmark = pytest.mark.skipif(not wordnet_available(), reason="needs WordNet")


@pytest.fixture(scope="module")
def nlp():
    return spacy_pipeline({TAGGER, PARSER})


@pytest.fixture(scope="module")
def rules():
    return RulePositives.load(["rule_voice", "rule_converse"])


def proposed(nlp, rules, caption: str, kind: str) -> list[str]:
    return [c.text for c in rules.propose(nlp(caption))[kind]]


VOICE = [  # caption, a rewrite it must offer
    ("A man riding a horse.", "A horse ridden by a man."),
    ("A boy is throwing a frisbee", "A frisbee is being thrown by a boy"),
    ("A boy is throwing a frisbee", "A frisbee thrown by a boy"),            # "is" taken out, as often added
    ("A man rides a horse on the beach.", "A horse is ridden by a man on the beach."),
    ("A kite being flown by a child", "A child flying a kite"),
    ("A horse is ridden by a man.", "A man rides a horse."),
    ("A kite is being flown by two boys.", "Two boys are flying a kite."),
    ("A woman in a red dress holding an umbrella.", "An umbrella held by a woman in a red dress."),
    ("Two men carrying a canoe down a hill", "A canoe carried by two men down a hill"),
    ("A man holding a plate of food", "A plate of food held by a man"),
    ("A baseball player in a black jersey swinging a bat.", "A bat swung by a baseball player in a black jersey."),
    ("A little girl standing in a forest holding a black umbrella.",
     "A black umbrella held by a little girl standing in a forest."),
    ("A woman holding a tennis racquet on a tennis court.", "A tennis racquet held by a woman on a tennis court."),
    ("There is a man holding an umbrella.", "There is an umbrella held by a man."),
    ("a person that is flying a kite on a beach", "a kite flown by a person on a beach"),
    ("A girl eating a slice of pizza.", "A slice of pizza being eaten by a girl."),   # "eaten by" reads as done
    ("A group of people flying kites on a beach.", "Kites flown by a group of people on a beach."),
]

NO_VOICE = [  # caption, why it keeps its voice
    ("A man holding his phone.", "a pronoun: 'his phone held by a man' points before its owner"),
    ("A dog catching a frisbee in its mouth", "a pronoun after the act"),
    ("A man playing tennis", "an activity, not a thing: 'tennis played by a man'"),
    ("A man walking the street", "'walk' only of an animal"),
    ("A woman walking a dog on a leash", "a phrase of the object's ('on a leash') would follow the agent"),
    ("A man taking a picture of a woman.", "'take' is no verb of data/structure.json"),
    ("A man is not riding a horse.", "a negation"),
    ("A man riding a horse and a dog runs beside it.", "two clauses"),
    ("Man riding horse.", "a headline: 'Horse ridden by man'"),
    ("A statue of two people flying a kite.", "a statue does nothing"),
    ("A small bathroom with two containers catching plumbing drips.", "a room catches nothing"),
    ("A man sitting next to a woman holding an umbrella.", "the parse says the woman holds it"),
    ("A man riding no a motorcycle down a race track.", "'no' in the object"),
    ("A large red electrical passenger train riding down railroad tracks.", "a path after a particle"),
    ("Many people watch a man and dog herd sheep.", "a verb the parser read as a noun"),
    ("A man wearing a bike helmet standing next to a bicycle.", "a participle read as the object's noun"),
    ("A person in a field flying a kite in the sky.", "'by a person in a field in the sky': whose place?"),
    # from round 8's blind reads (benchmarks/judged/rule_positives_v8_*):
    ("A close up of a man holding a bat.", "the close up would be of the bat"),
    ("A crowd of people flying kites in a blue cloudy sky.", "'by a crowd of people in a blue cloudy sky'"),
    ("A woman riding skis down a snow covered slope.", "'skis ridden by a woman' is no English"),
    ("A snow skier is being pulled by a rope overhead.", "'pulling a snow skier overhead'"),
    ("two children one holding a bear and one holding a cell phone", "one of the two holds it"),
    ("a brown horse carrying people behind on the street", "whose 'behind'"),
    ("A surfer riding the inside of the curve of a wave.", "'the curve of a wave ridden by a surfer'"),
]

CONVERSE = [  # caption, a rewrite it must offer
    ("A cat next to a dog.", "A dog next to a cat."),
    ("A red stop sign next to a blue street sign.", "A blue street sign next to a red stop sign."),
    ("A cat is next to a dog.", "A dog is next to a cat."),
    ("A car behind a bus.", "A bus in front of a car."),
    ("A clock above a door.", "A door below a clock."),
    ("A cat on a couch.", "A couch with a cat on it."),
    ("A cat sitting on a couch.", "A couch with a cat sitting on it."),
    ("A cat is sitting on a couch.", "A couch with a cat sitting on it."),
    ("A cat sits on a couch.", "A couch with a cat sitting on it."),
    ("There is a cat sitting on a couch.", "A couch with a cat sitting on it."),
    ("A man standing next to a bus.", "A bus with a man standing next to it."),
    ("A man sitting in front of a plate of food.", "A plate of food with a man sitting in front of it."),
    ("A dog laying down on a fluffy carpet", "A fluffy carpet with a dog laying down on it"),
    ("A cat sitting on a couch in the living room.", "A couch with a cat sitting on it in the living room."),
    ("Two dogs on a bed.", "A bed with two dogs on it."),
    ("A couch with a cat on it.", "A cat on a couch."),
    ("A tall clock tower with a statue on top.", "A statue on top of a tall clock tower."),
    ("A kitchen with a stove and a refrigerator.", "A stove and a refrigerator in a kitchen."),
    ("A plate with a sandwich and fries", "A sandwich and fries on a plate"),
]

NO_CONVERSE = [  # caption, a rewrite it must not offer (None: none at all), why
    ("A man sitting next to a woman.", "A woman sitting next to a man.", "her posture is not known"),
    ("A building next to a man.", None, "a building beside a man reads the wrong way round"),
    ("A man on a laptop in a coffee shop.", None, "a man 'on a laptop' is using it"),
    ("A man in a suit.", None, "what is worn holds no one"),
    ("A boat in the water.", None, "a substance is no holder"),
    ("A cat next to its owner.", None, "a pronoun"),
    ("A dog with a man.", None, "'with' of an animal: the dog may be walking with him"),
    ("A kitchen with a lot of space.", None, "space is no thing in the kitchen"),
    ("A restaurant with red stools next to a bar.", None, "the stools, not the restaurant, may be by the bar"),
    ("A person behind a table in front of many dishes.", None, "which of the three is in front is not known"),
    ("A baby and a young elephant walk in front of the herd.", None, "the verb read as a noun"),
    ("A bear looks toward the camera.", None, "the camera is the photographer's"),
    # from round 8's blind reads (benchmarks/judged/rule_positives_v8_*):
    ("A photo of a cat on a couch", None, "the photo would be of the couch"),
    ("Two sloppy joe sandwiches on two separate plates", None, "two on each plate?"),
    ("Four persons are skating on the skate board on snow.", None, "each on a board of one's own"),
    ("A toilet with some toilet paper and a plunger", None, "not in the toilet"),
    ("A foreign airline status board with a clock.", None, "not on the board"),
    ("Various kites near the ground in a field.", None, "'the ground with kites near it'"),
    ("Three birds walking around a dry grass field.", None, "'walking around it' circles the field"),
    ("A painted white kitchen with a refrigerator and a dish washer next to an oven.", None,
     "which of the two is next to the oven"),
]


@pytest.mark.parametrize("caption,expected", VOICE)
def test_voice_offers_the_other_voice(nlp, rules, caption, expected):
    assert expected in proposed(nlp, rules, caption, "rule_voice")


@pytest.mark.parametrize("caption,why", NO_VOICE)
def test_voice_leaves_alone(nlp, rules, caption, why):
    assert proposed(nlp, rules, caption, "rule_voice") == [], why


@pytest.mark.parametrize("caption,expected", CONVERSE)
def test_converse_offers_the_relation_the_other_way_round(nlp, rules, caption, expected):
    assert expected in proposed(nlp, rules, caption, "rule_converse")


@pytest.mark.parametrize("caption,forbidden,why", NO_CONVERSE)
def test_converse_leaves_alone(nlp, rules, caption, forbidden, why):
    offered = proposed(nlp, rules, caption, "rule_converse")
    assert (forbidden not in offered) if forbidden else offered == [], why


def test_every_rewrite_passes_its_types_own_check(nlp, rules):
    for kind, cases in (("rule_voice", VOICE), ("rule_converse", CONVERSE)):
        for caption, _ in cases:
            for text in proposed(nlp, rules, caption, kind):
                assert OWN_CHECKS[kind](caption, text), (caption, text)


def test_the_checks_refuse_a_rewrite_that_changes_a_thing():
    assert same_action("A man riding a horse.", "A horse ridden by a man.")
    assert not same_action("A man riding a horse.", "A horse ridden by a woman.")
    assert not same_action("A man riding a horse.", "A man riding a horse fast.")
    assert same_things("A cat on a couch.", "A couch with a cat on it.")
    assert not same_things("A cat on a couch.", "A couch with a dog on it.")
    assert not same_things("A cat next to a dog.", "A dog next to a cat and a bird.")
