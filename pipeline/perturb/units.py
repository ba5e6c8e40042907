"""Captions as movable word units, for the generators that reorder words (swap, negclip, ARO order, bi-gram).

A unit is a run of spaCy tokens written without a space between them ("t-shirt", "man's", "don't"), so
reordering never splits a word; sentence punctuation (.,;:!?) is a fixed unit that never moves, so a full
stop stays at the end. Rendering keeps each position's original spacing and the sentence capital at the
start: a capitalised first word moved inside is lower-cased, and the new first word is capitalised.
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.perturb.text import indefinite_article, match_case

FIXED = frozenset(".,;:!?\"()[]")


@dataclass(frozen=True)
class Unit:
    start: int          # first token index
    end: int            # one past the last token index
    text: str
    space: str          # whitespace after the unit in the caption
    tag: str            # Penn tag of the unit's last word token (its head in "t-shirt", "man's" aside)

    @property
    def fixed(self) -> bool:
        return self.text in FIXED or not any(c.isalnum() for c in self.text)


def units(doc) -> list[Unit]:
    out, start = [], 0
    for i, token in enumerate(doc):
        last = i + 1 == len(doc)
        joins_next = not token.whitespace_ and not last and doc[i + 1].text not in FIXED and token.text not in FIXED
        if joins_next:
            continue
        tokens = doc[start:i + 1]
        words = [t for t in tokens if t.is_alpha] or list(tokens)
        head = words[0] if words[0].tag_ in ("NN", "NNS", "NNP", "NNPS") and len(words) > 1 and \
            words[-1].tag_ == "POS" else words[-1]
        out.append(Unit(start, i + 1, tokens.text, token.whitespace_, head.tag_))
        start = i + 1
    return out


def unit_index(unit_list: list[Unit], token_index: int) -> int:
    for k, u in enumerate(unit_list):
        if u.start <= token_index < u.end:
            return k
    raise IndexError(token_index)


def sentence_cased(first: str) -> bool:
    """True where the first word is capitalised only because it starts the caption ("A dog ...")."""
    if not first[:1].isupper() or first == "I":
        return False
    return len(first) == 1 or not first.isupper()  # "TV" and other acronyms keep their case


def render(unit_list: list[Unit], order: list[int], fix_articles: bool = False) -> str:
    """The caption with unit order[i] at position i, spacing by position, sentence capital kept; with
    fix_articles, an "a"/"an" before a moved word agrees with it (swaps of words inside phrases)."""
    texts = [unit_list[j].text for j in order]
    if sentence_cased(unit_list[0].text) and order[0] != 0:
        moved = order.index(0)
        texts[moved] = texts[moved][:1].lower() + texts[moved][1:]
        texts[0] = texts[0][:1].upper() + texts[0][1:]
    for i in range(len(texts) - 1 if fix_articles else 0):
        if texts[i].lower() in ("a", "an") and order[i] == i and order[i + 1] != i + 1:
            texts[i] = match_case(texts[i], indefinite_article(texts[i + 1]))
    return "".join(t + unit_list[i].space for i, t in enumerate(texts)).strip()


def swap_ranges(n: int, a: tuple[int, int], b: tuple[int, int]) -> list[int]:
    """Unit order exchanging the unit ranges a=[s1, e1) and b=[s2, e2) (a before b, not overlapping)."""
    (s1, e1), (s2, e2) = sorted([a, b])
    return list(range(s1)) + list(range(s2, e2)) + list(range(e1, s2)) + list(range(s1, e1)) + list(range(e2, n))


def movable(unit_list: list[Unit]) -> list[int]:
    return [k for k, u in enumerate(unit_list) if not u.fixed]
