"""SWAP hard positives: the two "the <attribute> <object>" phrases of an ARO VG-Attribution caption, reordered.

"the crouched cat and the open door" -> "the open door and the crouched cat". The phrases are found from the
record's attributes (and object names when the release has them), never by a blind split on " and ":
attributes and objects may themselves contain "and" or several words.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.perturb.outcomes import Discard, Reject
from pipeline.perturb.text import words

GENERATOR = "swap_phrases_v2"  # v2: c, c_n and c_p single-spaced alike (the stage; no spacing cue)
_DETERMINER = r"(?:the|a|an)"


@dataclass(frozen=True)
class Swap:
    hard_positive: str
    attributes: tuple[str, str]  # in the caption's order
    objects: tuple[str, str]


def _pattern(text: str) -> str:
    """Regex for a phrase given as words, tolerant of the spacing between them."""
    return r"\s+".join(re.escape(w) for w in text.split())


def _splits(caption: str, first: str, second: str, obj1: str | None, obj2: str | None):
    """Every way to read the caption as '<det> first <obj1> and <det> second <obj2>': (spans, objects)."""
    head = re.match(rf"\s*({_DETERMINER}\s+{_pattern(first)}\s+)", caption, re.I)
    if not head:
        return []
    found = []
    # Each " and <det> second " after the first attribute is one candidate boundary (overlapping search).
    joint = re.compile(rf"(?=(\s+and\s+({_DETERMINER}\s+{_pattern(second)}\s+)))", re.I)
    for m in joint.finditer(caption, head.end()):
        o1 = caption[head.end():m.start()]
        o2_start = m.start() + len(m.group(1))
        o2 = caption[o2_start:].rstrip()
        if not o1.strip() or not o2.strip():
            continue
        if obj1 is not None and words(o1) != words(obj1):
            continue
        if obj2 is not None and words(o2) != words(obj2):
            continue
        spans = ((head.start(1), m.start()), (m.start() + len(m.group(1)) - len(m.group(2)), len(o2) + o2_start))
        found.append((spans, (o1.strip(), o2.strip())))
    return found


def _swap_initial_case(moved_first: str, moved_second: str) -> tuple[str, str]:
    """Keep a capital at the start of the caption, not on the phrase that moved."""
    if moved_second[:1].isupper() and moved_first[:1].islower():
        return moved_first[:1].upper() + moved_first[1:], moved_second[:1].lower() + moved_second[1:]
    return moved_first, moved_second


def swap_hard_positive(
    caption: str,
    hard_negative: str,
    attributes: tuple[str, str],
    obj1: str | None = None,
    obj2: str | None = None,
) -> Swap:
    """The caption with its two attribute-object phrases in the other order; Reject when it does not parse."""
    a, b = (" ".join(x.split()) for x in attributes)
    if words(a) == words(b):
        raise Discard("attributes_identical", a)
    orders = [(a, b, obj1, obj2), (b, a, obj2, obj1)]  # some releases list the attributes the other way round
    for first, second, o1, o2 in orders:
        splits = _splits(caption, first, second, o1, o2)
        if splits:
            break
    else:
        raise Reject("caption_does_not_parse", f"no '<det> {a} <object> and <det> {b} <object>' reading")
    if len(splits) > 1:
        readings = "; ".join(f"{o1!r} / {o2!r}" for _, (o1, o2) in splits)
        raise Reject("ambiguous_phrase_split", readings)
    ((s1, e1), (s2, e2)), objects = splits[0]
    phrase1, joint, phrase2 = caption[s1:e1], caption[e1:s2], caption[s2:e2]
    phrase2, phrase1 = _swap_initial_case(phrase2, phrase1)
    hard_positive = caption[:s1] + phrase2 + joint + phrase1 + caption[e2:]

    if words(phrase1) == words(phrase2):
        raise Discard("phrases_identical", phrase1)
    if words(hard_positive) == words(hard_negative):
        raise Discard("positive_equals_negative", hard_negative)
    return Swap(hard_positive, (first, second), objects)
