"""Word-order perturbations: ARO's four (Yuksekgonul et al. 2023, COCO/Flickr-Order) and FSC-CLIP's bi-gram
shuffle. Each permutes word units only (punctuation stays in place, words stay whole, the sentence capital
stays first) and retries with its record's RNG until the text actually changes.
"""
from __future__ import annotations

import random

from pipeline.perturb.candidates import Candidate, make_candidate
from pipeline.perturb.units import Unit, movable, render, units

NOUN_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS"})
ADJ_TAGS = frozenset({"JJ", "JJR", "JJS"})
ATTEMPTS = 10


def _shuffle_groups(n: int, groups: list[list[int]], rng: random.Random) -> list[int]:
    """Order with the units of each group shuffled among the group's own positions."""
    order = list(range(n))
    for group in groups:
        moved = group[:]
        rng.shuffle(moved)
        for position, unit in zip(group, moved, strict=True):
            order[position] = unit
    return order


def _chunks(positions: list[int], size: int) -> list[list[int]]:
    return [positions[i:i + size] for i in range(0, len(positions), size)]


def _shuffle_chunk_order(n: int, chunks: list[list[int]], rng: random.Random) -> list[int]:
    """Chunks of word positions put in a new order; the words refill the word positions left to right."""
    shuffled = chunks[:]
    rng.shuffle(shuffled)
    order = list(range(n))
    for position, unit in zip([p for c in chunks for p in c], [u for c in shuffled for u in c], strict=True):
        order[position] = unit
    return order


def _orders(name: str, us: list[Unit], rng: random.Random):
    words = movable(us)
    n = len(us)
    if name == "shuffle_nouns_and_adj":
        nouns = [k for k in words if us[k].tag in NOUN_TAGS]
        adjectives = [k for k in words if us[k].tag in ADJ_TAGS]
        return lambda: _shuffle_groups(n, [nouns, adjectives], rng)
    if name == "shuffle_allbut_nouns_and_adj":
        rest = [k for k in words if us[k].tag not in NOUN_TAGS | ADJ_TAGS]
        return lambda: _shuffle_groups(n, [rest], rng)
    if name == "shuffle_within_trigrams":
        return lambda: _shuffle_groups(n, _chunks(words, 3), rng)
    if name == "shuffle_trigrams":
        return lambda: _shuffle_chunk_order(n, _chunks(words, 3), rng)
    if name == "shuffle_bigrams":
        return lambda: _shuffle_chunk_order(n, _chunks(words, 2), rng)
    raise KeyError(name)


def order_perturbation(name: str, doc, rng: random.Random) -> Candidate | None:
    """One perturbation of the caption, or None where no order of its words differs from the caption."""
    us = units(doc)
    caption = doc.text.strip()
    draw = _orders(name, us, rng)
    for _ in range(ATTEMPTS):
        candidate = make_candidate(name, caption, render(us, draw()))
        if candidate is not None:
            return candidate
    return None


ARO_ORDER = ("shuffle_nouns_and_adj", "shuffle_allbut_nouns_and_adj", "shuffle_within_trigrams",
             "shuffle_trigrams")
BIGRAM = "shuffle_bigrams"
