from collections import Counter

import pytest

from pipeline.checks.eval_sets import check_swap_row
from pipeline.perturb.eval_swap import swap_hard_positive
from pipeline.perturb.outcomes import Discard, Reject
from pipeline.perturb.text import words


def swapped(caption, negative, attributes, obj1=None, obj2=None):
    s = swap_hard_positive(caption, negative, attributes, obj1, obj2)
    row = {"caption": caption, "hard_negative": negative, "hard_positive": s.hard_positive,
           "attributes": list(s.attributes), "objects": list(s.objects)}
    assert check_swap_row(row) == []
    assert Counter(words(s.hard_positive)) == Counter(words(caption))
    return s


@pytest.mark.parametrize("caption,negative,attributes,objects,expected", [
    ("the crouched cat and the open door", "the open cat and the crouched door", ("crouched", "open"), (None, None),
     "the open door and the crouched cat"),
    ("the light blue shirt and the dark pants", "the dark shirt and the light blue pants", ("light blue", "dark"),
     (None, None), "the dark pants and the light blue shirt"),
    # "and" inside an attribute
    ("the black and white cat and the red couch", "the red cat and the black and white couch",
     ("black and white", "red"), (None, None), "the red couch and the black and white cat"),
    # "and" inside an object, found without and with object names
    ("the green bread and butter plate and the white mug", "the white bread and butter plate and the green mug",
     ("green", "white"), (None, None), "the white mug and the green bread and butter plate"),
    ("the white salt and pepper shaker and the wooden table", "the wooden salt and pepper shaker and the white table",
     ("white", "wooden"), ("salt and pepper shaker", "table"), "the wooden table and the white salt and pepper shaker"),
    # attributes listed in the other order than the caption's
    ("the white plate and the brown table", "the brown plate and the white table", ("brown", "white"),
     (None, None), "the brown table and the white plate"),
    ("The silver car and the black motorcycle", "The black car and the silver motorcycle", ("silver", "black"),
     (None, None), "The black motorcycle and the silver car"),
    ("a brown bear and a green tree", "a green bear and a brown tree", ("brown", "green"), (None, None),
     "a green tree and a brown bear"),
    ("the half-full glass and the wooden table", "the wooden glass and the half-full table", ("half-full", "wooden"),
     (None, None), "the wooden table and the half-full glass"),
])
def test_swaps(caption, negative, attributes, objects, expected):
    assert swapped(caption, negative, attributes, *objects).hard_positive == expected


def test_reports_pairs_in_caption_order():
    s = swapped("the white plate and the brown table", "x", ("brown", "white"))
    assert s.attributes == ("white", "brown") and s.objects == ("plate", "table")


def test_object_names_disambiguate():
    caption = "the brown bread and the white butter and the white plate"
    with pytest.raises(Reject) as info:
        swap_hard_positive(caption, "x", ("brown", "white"))
    assert info.value.reason == "ambiguous_phrase_split"
    s = swapped(caption, "x", ("brown", "white"), "bread and the white butter", "plate")
    assert s.hard_positive == "the white plate and the brown bread and the white butter"


@pytest.mark.parametrize("caption,attributes,objects", [
    ("the open door and the crouched cat", ("fluffy", "open"), (None, None)),
    ("the white horse next to the brown fence", ("white", "brown"), (None, None)),
    ("the tall man and the short woman", ("tall", "short"), ("boy", "woman")),
    ("the reddish car and the blue house", ("red", "blue"), (None, None)),  # attributes match whole words only
])
def test_unparseable_is_rejected(caption, attributes, objects):
    with pytest.raises(Reject) as info:
        swap_hard_positive(caption, "x", attributes, *objects)
    assert info.value.reason == "caption_does_not_parse"


def test_no_valid_positive_is_discarded():
    with pytest.raises(Discard) as info:
        swap_hard_positive("the red car and the blue car", "the blue car and the red car", ("red", "blue"))
    assert info.value.reason == "positive_equals_negative"
    with pytest.raises(Discard) as info:
        swap_hard_positive("the white cloud and the white kite", "x", ("white", "white"))
    assert info.value.reason == "attributes_identical"
