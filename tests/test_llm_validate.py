"""Cleaning and validation of LLM rewrites on hand-written outputs: good, chatty, truncated, identical,
meaning-changing, wrongly swapped."""
from __future__ import annotations

import pytest

from pipeline.llm.validate import clean, swapped_around_and, validate

C1 = "A man holding an umbrella on a busy street."
C2 = "A dog and a cat sleeping on the couch"
C3 = "three giraffes and two antelope"
C4 = "a bathroom with a sink, toilet and shower"
C5 = "there is a man wearing glasses and holding a wine bottle"
C6 = "A blue and white plane flying over the ocean."

# (positive type, caption, raw generation, finish reason, expected cleaned text or None, expected reason or "")
CASES = [
    # good REPLACE
    ("replace", C1, "A man grasping an umbrella on a busy street.", "stop",
     "A man grasping an umbrella on a busy street.", ""),
    ("replace", C1, "A man holding an umbrella on a crowded street.", "stop", None, ""),
    ("replace", C1, "A guy holding an umbrella on a busy street.", "stop", None, ""),
    ("replace", C1, "A man holding a parasol on a busy street.", "stop", None, ""),
    ("replace", C1, "A man holding an umbrella on a busy road.", None, None, ""),
    # chatty REPLACE
    ("replace", C1, "Sure! Here is the changed sentence:\n\nA man grasping an umbrella on a busy street.", "stop",
     "A man grasping an umbrella on a busy street.", ""),
    ("replace", C1, "Sure! Here is the changed sentence: A man grasping an umbrella on a busy street.", "stop",
     "A man grasping an umbrella on a busy street.", ""),
    ("replace", C1, '"A man grasping an umbrella on a busy street."', "stop",
     "A man grasping an umbrella on a busy street.", ""),
    ("replace", C1, "Changed sentence: A man grasping an umbrella on a busy street.", "stop",
     "A man grasping an umbrella on a busy street.", ""),
    ("replace", C1, "A man grasping an umbrella on a busy street. (I replaced \"holding\" with \"grasping\".)",
     "stop", "A man grasping an umbrella on a busy street.", ""),
    ("replace", C1, "A man grasping an umbrella on a busy street.\n\nI replaced the word \"holding\" with its synonym.",
     "stop", "A man grasping an umbrella on a busy street.", ""),
    ("replace", C1, "Certainly! \"A man grasping an umbrella on a busy street.\"", "stop",
     "A man grasping an umbrella on a busy street.", ""),
    ("replace", C1, "Output: A man grasping an umbrella on a busy street. Note that the meaning is unchanged.",
     "stop", "A man grasping an umbrella on a busy street.", ""),
    # truncated, empty, identical
    ("replace", C1, "A man grasping an umbrella on a", "length", None, "truncated"),
    ("replace", C1, "A man holding an umbrella on a", "stop", None, "words_deleted"),
    ("replace", C1, "A man grasping an umbrella on a", "stop", None, "more_than_one_span"),
    ("replace", C1, "", "stop", None, "empty"),
    ("replace", C1, "Sure! Here is the changed sentence:", "stop", None, "empty"),
    ("replace", C1, "A man holding an umbrella on a busy street.", "stop", None, "identical"),
    ("replace", C1, "a man holding an umbrella on a busy street", "stop", None, "identical"),
    # SmolLM2 on a real caption: only the article changed; no span is left to compare (an IndexError before)
    ("replace", C1, "A man holding a umbrella on a busy street!", "stop", None, "identical"),
    # not one short span
    ("replace", C1, "A guy grasping an umbrella on a busy street.", "stop", None, "more_than_one_word"),
    ("replace", C1, "A guy with an umbrella on a crowded street.", "stop", None, "more_than_one_span"),
    ("replace", C1, "A man holding an umbrella on a very busy street.", "stop", None, "words_added"),
    ("replace", C1, "A man holding an umbrella on a road full of people and cars.", "stop", None, "span_too_long"),
    ("replace", C1, "A man holding an umbrella.", "stop", None, "words_deleted"),
    ("replace", C1, "Someone who is carrying a big umbrella on a busy street.", "stop", None, "more_than_one_span"),
    ("replace", C1, "A man holding umbrellas on a busy street.", "stop", None, "same_word"),
    # changed meaning
    ("replace", C1, "A woman holding an umbrella on a busy street.", "stop", None, "person_changed"),
    ("replace", C1, "A man holding an umbrella under a busy street.", "stop", None, "contrasting_preposition"),
    ("replace", "Two dogs playing in the park.", "Three dogs playing in the park.", "stop", None, "number_changed"),
    ("replace", "A red car parked by the road.", "A blue car parked by the road.", "stop", None, "colour_changed"),
    ("replace", "A bowl with soup.", "A bowl without soup.", "stop", None, "contrasting_preposition"),
    # good SWAP
    ("swap", C2, "A cat and a dog sleeping on the couch", "stop", None, ""),
    ("swap", C3, "two antelopes and three giraffes", "stop", None, ""),
    ("swap", C4, "a bathroom with a sink, shower and toilet", "stop", None, ""),
    ("swap", C5, "there is a man holding a wine bottle and wearing glasses", "stop", None, ""),
    ("swap", C6, "A white and blue plane flying over the ocean.", "stop", None, ""),
    ("swap", C6, "Output: A white and blue plane flying over the ocean.", "stop",
     "A white and blue plane flying over the ocean.", ""),
    ("swap", C2, "Sure! Here's the swapped sentence:\nA cat and a dog sleeping on the couch", "stop",
     "A cat and a dog sleeping on the couch", ""),
    # bad SWAP
    ("swap", C2, "A dog and a cat sleeping on the couch.", "stop", None, "identical"),
    ("swap", C2, "A cat and a puppy sleeping on the couch", "stop", None, "words_changed"),
    ("swap", C2, "A cat and a dog sleeping on the", "stop", None, "words_changed"),
    ("swap", C2, "A couch and a cat sleeping on the dog", "stop", None, "not_swapped_around_and"),
    ("swap", C5, "there is a wine bottle wearing glasses and holding a man", "stop", None, "not_swapped_around_and"),
    ("swap", C6, "A white and blue plane flying over the", "length", None, "truncated"),
    ("swap", C6, "A blue and white ocean flying over the plane.", "stop", None, "not_swapped_around_and"),
]


@pytest.mark.parametrize("positive_type,caption,raw,finish,cleaned,reason", CASES)
def test_verdicts_on_hand_written_outputs(positive_type, caption, raw, finish, cleaned, reason):
    verdict = validate(positive_type, caption, raw, finish)
    assert verdict.reason == reason, verdict
    assert verdict.ok == (reason == "")
    if cleaned is not None:
        assert verdict.text == cleaned


def test_there_are_at_least_30_cases_with_both_verdicts():
    assert len(CASES) >= 30
    assert sum(1 for c in CASES if c[5] == "") >= 10 and sum(1 for c in CASES if c[5]) >= 15


def test_a_lexicon_check_can_reject_what_the_rules_let_through():
    def is_negative(old, new):
        return "hard_negative_word" if (old, new) == (["umbrella"], ["parasol"]) else None

    assert validate("replace", C1, "A man holding a parasol on a busy street.", "stop", is_negative).reason == \
        "hard_negative_word"
    assert validate("replace", C1, "A man grasping an umbrella on a busy street.", "stop", is_negative).ok


@pytest.mark.parametrize("raw,expected", [
    ("  Here is the rewritten caption:\n'A man grasping an umbrella.'  ", "A man grasping an umbrella."),
    ("[/INST] A man grasping an umbrella.</s>", "A man grasping an umbrella."),
    ("“A man grasping an umbrella.”", "A man grasping an umbrella."),
])
def test_clean(raw, expected):
    assert clean(raw) == expected


def test_swapped_around_and_needs_the_two_sides_exchanged():
    assert swapped_around_and("x a and b y".split(), "x b and a y".split())
    assert not swapped_around_and("x a and b y".split(), "y a and b x".split())
    assert not swapped_around_and("a b c".split(), "c b a".split())


@pytest.mark.parametrize("caption, raw, expected", [
    # What looks like chat wrapping but belongs to the caption stays, so no caption word is dropped ...
    ("A dog on the beach [/INST]", "A dog on the shore [/INST]", "A dog on the shore [/INST]"),
    ("A dog on the beach. (replaced word)", "A dog on the shore. (replaced word)",
     "A dog on the shore. (replaced word)"),
    # ... and answers that only look chatty are accepted whole
    ("Sure, a dog is sitting on a bench.", "Sure, a dog is seated on a bench.", "Sure, a dog is seated on a bench."),
    ("A poster with the caption: enjoy the beach", "A poster with the caption: enjoy the shore",
     "A poster with the caption: enjoy the shore"),
    ("A man holding a sign. This is a protest.", "A man grasping a sign. This is a protest.",
     "A man grasping a sign. This is a protest."),
    # real chatter is still removed
    ("A dog on the beach [/INST]", "Sure! Here is the sentence:\nA dog on the shore [/INST] (I replaced beach)",
     "A dog on the shore [/INST]"),
])
def test_case9_cleaning_never_removes_what_the_caption_contains(caption, raw, expected):
    verdict = validate("replace", caption, raw, "stop")
    assert (verdict.ok, verdict.text) == (True, expected)
    assert clean(raw, caption) == expected



@pytest.mark.parametrize("kind, caption, raw, expected", [
    # a model drops the full stop, adds a comma, changes the capital or the spacing: the accepted positive has the
    # caption's own, so c and c_p differ only in the words changed (issue 26 point 6)
    ("replace", "A man holding an umbrella on a busy street.", "A man, grasping an umbrella on a busy street",
     "A man grasping an umbrella on a busy street."),
    ("replace", "A man  holding an umbrella on a busy street", "A man holding an umbrella on a busy road.",
     "A man  holding an umbrella on a busy road"),
    ("replace", "a man holding an umbrella.", "A man holding a parasol.", "a man holding a parasol."),
    ("swap", "A dog and a cat sleeping on the couch.", "A cat and a dog sleeping on the couch",
     "A cat and a dog sleeping on the couch."),
    ("swap", "a dog  and a cat sleeping on the couch ", "A cat and a dog sleeping on the couch.",
     "a cat  and a dog sleeping on the couch "),
])
def test_an_accepted_positive_keeps_the_captions_punctuation_spacing_and_capital(kind, caption, raw, expected):
    verdict = validate(kind, caption, raw, "stop")
    assert verdict.ok, verdict
    assert verdict.text == expected
