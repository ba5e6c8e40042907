"""Hard negatives that keep the caption's words and change their roles.

- `swap` (CREPE/SugarCrepe SWAP): exchange two attributes of different objects ("a white dog and a black
  cat" -> "a black dog and a white cat") or two objects of the same number ("a cat on a table" ->
  "a table on a cat").
- `negclip` (NegCLIP): exchange two nouns, adjectives, adverbs, verb phrases or noun phrases of 3+ tokens.

Never exchanged, because the result keeps the meaning (a hard *positive*, the paper's point) or is only
a surface change: the conjuncts of one coordination ("a dog and a cat", "black and white", "wearing glasses
and holding a bottle"), two words of one compound ("cell phone"), or two words with the same text.
"""
from __future__ import annotations

import random

from pipeline.perturb.candidates import Candidate, coarse_pos, make_candidate
from pipeline.perturb.text import words
from pipeline.perturb.units import Unit, render, swap_ranges, unit_index, units

SWAP, NEGCLIP = "swap", "negclip"
NOUN_TAGS = ("NN", "NNS")


def _coordinated(a, b) -> bool:
    """a and b are conjuncts of one coordination: exchanging them keeps the meaning."""
    return a in b.conjuncts or b in a.conjuncts


def _compound_pair(a, b) -> bool:
    return (a.dep_ == "compound" and a.head == b) or (b.dep_ == "compound" and b.head == a)


def _token_pairs(doc, keep) -> list[tuple]:
    tokens = [t for t in doc if keep(t)]
    pairs = []
    for i, a in enumerate(tokens):
        for b in tokens[i + 1:]:
            # Neighbours are never exchanged: "red double decker" -> "double red decker" is the same bus.
            if a.lower_ != b.lower_ and abs(a.i - b.i) > 1 and not _compound_pair(a, b) and not _coordinated(a, b):
                pairs.append((a, b))
    return pairs


def _swap_token_units(doc, us: list[Unit], a, b) -> str | None:
    ka, kb = unit_index(us, a.i), unit_index(us, b.i)
    if ka == kb or us[ka].end - us[ka].start != 1 or us[kb].end - us[kb].start != 1:
        return None  # part of a multi-token word ("t-shirt"): moving it would split the word
    return render(us, swap_ranges(len(us), (ka, ka + 1), (kb, kb + 1)), fix_articles=True)


def _swap_spans(us: list[Unit], a: tuple[int, int], b: tuple[int, int]) -> str | None:
    """a, b: token ranges; None where they overlap or cut through a unit."""
    (s1, e1), (s2, e2) = sorted([a, b])
    if e1 > s2:
        return None
    try:
        k1, k2 = unit_index(us, s1), unit_index(us, s2)
        k1e, k2e = unit_index(us, e1 - 1) + 1, unit_index(us, e2 - 1) + 1
    except IndexError:
        return None
    if us[k1].start != s1 or us[k2].start != s2 or us[k1e - 1].end != e1 or us[k2e - 1].end != e2:
        return None
    return render(us, swap_ranges(len(us), (k1, k1e), (k2, k2e)), fix_articles=True)


def _keeps_words(caption: str, text: str) -> bool:
    return sorted(words(caption)) == sorted(words(text))


def _pick(negative_type: str, caption: str, texts: list[str], rng: random.Random, n: int) -> list[Candidate]:
    seen, found = set(), []
    for text in texts:
        if text is None or text in seen or not _keeps_words(caption, text):
            continue
        seen.add(text)
        candidate = make_candidate(negative_type, caption, text)
        if candidate is not None:
            found.append(candidate)
    rng.shuffle(found)
    return found[:n]


def swap_negatives(doc, rng: random.Random, n: int = 1) -> list[Candidate]:
    caption, us = doc.text.strip(), units(doc)
    attributes = _token_pairs(doc, lambda t: _pos(t) == "ADJ" and t.dep_ == "amod" and _pos(t.head) == "NOUN")
    attributes = [(a, b) for a, b in attributes if a.head != b.head]
    objects = _token_pairs(doc, lambda t: t.tag_ in NOUN_TAGS and t.dep_ != "compound")
    objects = [(a, b) for a, b in objects if a.tag_ == b.tag_]
    texts = [_swap_token_units(doc, us, a, b) for a, b in attributes + objects]
    return _pick(SWAP, caption, texts, rng, n)


def _pos(token) -> str:
    return coarse_pos(token.tag_)


NP_MODIFIERS = frozenset({"det", "amod", "compound", "nummod", "poss", "nmod", "advmod", "case"})


def _noun_phrases(doc):
    """(root, token range) of each noun phrase: a noun with its contiguous left modifiers ("a big red bus").
    Computed from the parse here: spaCy's noun_chunks needs the attribute_ruler we do not run."""
    for token in doc:
        if token.tag_ not in NOUN_TAGS or token.dep_ == "compound":
            continue
        start = token.i
        for child in sorted(token.lefts, key=lambda t: -t.i):
            if child.dep_ in NP_MODIFIERS and child.right_edge.i == start - 1:
                start = child.left_edge.i
        yield token, (start, token.i + 1)


def _verb_phrase(verb) -> tuple[int, int] | None:
    """The verb and what follows it in its subtree (its objects and modifiers), without conjuncts."""
    right = [t for t in verb.subtree if t.i >= verb.i]
    end = verb.i + 1
    for t in right[1:]:
        if t.dep_ in ("cc", "conj") and t.head == verb or t.i != end:
            break
        end = t.i + 1
    return (verb.i, end) if end - verb.i >= 2 else None


def negclip_negatives(doc, rng: random.Random, n: int = 1) -> list[Candidate]:
    caption, us = doc.text.strip(), units(doc)
    texts = []
    for pos in ("NOUN", "ADJ", "ADV"):
        for a, b in _token_pairs(doc, lambda t, p=pos: _pos(t) == p):
            if pos != "NOUN" or a.tag_ == b.tag_:  # nouns of one number, so verbs still agree
                texts.append(_swap_token_units(doc, us, a, b))
    verb_phrases = [(v, _verb_phrase(v)) for v in doc if _pos(v) == "VERB" and not v.is_stop]
    noun_phrases = [(root, span) for root, span in _noun_phrases(doc) if span[1] - span[0] >= 3]
    for phrases in ([p for p in verb_phrases if p[1]], noun_phrases):  # a verb phrase only with a verb phrase
        for i, (head_a, span_a) in enumerate(phrases):
            for head_b, span_b in phrases[i + 1:]:
                if not _coordinated(head_a, head_b) and doc[span_a[0]:span_a[1]].text.lower() != \
                        doc[span_b[0]:span_b[1]].text.lower():
                    texts.append(_swap_spans(us, span_a, span_b))
    return _pick(NEGCLIP, caption, texts, rng, n)
