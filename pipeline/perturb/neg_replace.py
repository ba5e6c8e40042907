"""`replace` hard negatives (CREPE/SugarCrepe REPLACE): one object, attribute or relation of the caption
replaced by a WordNet antonym or co-hyponym (see lexicon.py), inflected like the word it replaces, or a
spatial preposition replaced from a fixed list of contrasting ones. Needs only spaCy's tagger.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from pipeline.perturb.candidates import Candidate, coarse_pos, join_tokens, make_candidate, replace_tokens
from pipeline.perturb.inflect import Inflector
from pipeline.perturb.lexicon import ADJ, NOUN, VERB, Lexicon
from pipeline.perturb.text import words

REPLACE = "replace"
TOP = 5  # replacements drawn from the most common few
# Spatial and accompaniment relations and their contrasts; multi-word keys match token sequences.
PREPOSITIONS = {
    ("on", "top", "of"): ("under", "beside"),
    ("in", "front", "of"): ("behind", "beside"),
    ("next", "to"): ("far from", "behind"),
    ("on",): ("under", "beside"),
    ("under",): ("on", "above"),
    ("underneath",): ("on", "above"),
    ("beneath",): ("above", "on"),
    ("below",): ("above",),
    ("above",): ("below", "under"),
    ("over",): ("under",),
    ("atop",): ("under", "beside"),
    ("in",): ("beside", "outside"),
    ("inside",): ("outside", "beside"),
    ("outside",): ("inside",),
    ("into",): ("out of",),
    ("near",): ("far from",),
    ("beside",): ("behind", "in front of"),
    ("behind",): ("in front of", "beside"),
    ("with",): ("without",),
    ("without",): ("with",),
    ("toward",): ("away from",),
    ("towards",): ("away from",),
    ("up",): ("down",),
    ("down",): ("up",),
}
_LONGEST = max(len(k) for k in PREPOSITIONS)
_FIRST_WORDS = frozenset(k[0] for k in PREPOSITIONS)
ATOM_POS = {"NOUN": (NOUN, "object"), "ADJ": (ADJ, "attribute"), "VERB": (VERB, "relation")}
STOP_ARTICLES = frozenset({"a", "an", "the"})


@dataclass(frozen=True)
class Tokens:
    """The token attributes the generator reads, taken from the Doc once (each spaCy Token access builds
    a Python object)."""

    texts: list[str]
    spaces: list[str]
    lower: list[str]
    tags: list[str]
    alpha: list[bool]
    stop: list[bool]

    @classmethod
    def of(cls, doc) -> Tokens:
        tokens = list(doc)
        return cls([t.text for t in tokens], [t.whitespace_ for t in tokens], [t.lower_ for t in tokens],
                   [t.tag_ for t in tokens], [t.is_alpha for t in tokens], [t.is_stop for t in tokens])


def _preposition_atoms(tokens: Tokens) -> list[tuple[int, int, tuple[str, ...]]]:
    lower, tags = tokens.lower, tokens.tags
    atoms, i = [], 0
    while i < len(lower):
        if lower[i] in _FIRST_WORDS:
            for size in range(_LONGEST, 0, -1):
                key = tuple(lower[i:i + size])
                # A relation between two things: a preposition followed by its object ("on a table"),
                # not a particle ("turned on"). The tagger tells them apart; no parse needed.
                if len(key) == size and key in PREPOSITIONS:
                    if tags[i + size - 1] in ("IN", "TO", "RB", "JJ") and _object_follows(tags, i + size):
                        atoms.append((i, i + size, PREPOSITIONS[key]))
                    i += size - 1
                    break
        i += 1
    return atoms


def _object_follows(tags: list[str], i: int) -> bool:
    for tag in tags[i:i + 4]:
        if tag in ("NN", "NNS", "NNP", "NNPS", "PRP", "CD"):
            return True
        if tag not in ("DT", "PRP$", "JJ", "JJR", "JJS", "RB", "VBN", "VBG", "POS"):
            return False
    return False


def _word_atoms(tokens: Tokens, lexicon: Lexicon, taken: set[int]):
    """(start, end, replacement lemmas, atom kind, Penn tag to inflect to) per replaceable word."""
    tags = tokens.tags
    for i, tag in enumerate(tags):
        upos = coarse_pos(tag)
        if i in taken or upos not in ATOM_POS or not tokens.alpha[i] or tokens.stop[i]:
            continue
        pos, atom = ATOM_POS[upos]
        if pos == NOUN and i + 1 < len(tags) and tags[i + 1] in ("NN", "NNS"):
            continue  # a compound's modifier ("dining room", "fire hydrant"): replacing it rarely reads
        if pos == ADJ and tag != "JJ":  # comparatives and superlatives do not inflect back
            continue
        lemma = lexicon.lemma(tokens.lower[i], pos)
        if lemma is None:  # misspelt or unknown to WordNet
            continue
        options = lexicon.replacements(lemma, pos)[:TOP]
        if options:
            yield i, i + 1, options, atom, tag


def _inflect(inflector: Inflector, lemma: str, tag: str | None) -> str:
    """The replacement lemma in the replaced word's form: plural stays plural, verb tense kept."""
    if tag == "NNS":
        return inflector.plural(lemma)
    if tag is not None and coarse_pos(tag) == "VERB":
        return inflector.verb(lemma, tag)
    return lemma


def replaced_words_unrelated(lexicon: Lexicon, old_span: str, new_span: str) -> bool:
    """No word of the new span shares a WordNet synset with a word of the old one (articles aside)."""
    old = [w for w in words(old_span) if w not in STOP_ARTICLES]
    new = [w for w in words(new_span) if w not in STOP_ARTICLES]
    return bool(new) and not any(lexicon.shares_synset(a, b) for a in old for b in new)


def replace_negatives(doc, lexicon: Lexicon, inflector: Inflector, rng: random.Random,
                      n: int = 1) -> list[tuple[Candidate, str]]:
    """Up to n distinct (candidate, atom kind) pairs; atom kind is object, attribute or relation."""
    caption = doc.text.strip()
    tokens = Tokens.of(doc)
    atoms = [(s, e, opts, "relation", None) for s, e, opts in _preposition_atoms(tokens)]
    taken = {i for s, e, *_ in atoms for i in range(s, e)}
    atoms += list(_word_atoms(tokens, lexicon, taken))
    rng.shuffle(atoms)
    found, seen = [], set()
    # Round-robin over atoms so that n > 1 varies what is replaced before how.
    for rank in range(TOP):
        for start, end, options, atom, tag in atoms:
            if rank >= len(options) or len(found) >= n:
                continue
            choice = _weighted_choice(options, rng) if rank == 0 else options[rank]
            texts, spaces = replace_tokens(tokens.texts, tokens.spaces, start, end, _inflect(inflector, choice, tag))
            candidate = make_candidate(REPLACE, caption, join_tokens(texts, spaces))
            if candidate is None or candidate.text in seen:
                continue
            if not replaced_words_unrelated(lexicon, candidate.changed_span, candidate.new_span):
                continue
            seen.add(candidate.text)
            found.append((candidate, atom))
    return found


def _weighted_choice(options: tuple[str, ...], rng: random.Random) -> str:
    """Most common first: weight 1/(rank+1) over the ranked options."""
    return rng.choices(options, weights=[1 / (k + 1) for k in range(len(options))])[0]
