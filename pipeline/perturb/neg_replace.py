"""`replace` hard negatives (CREPE/SugarCrepe REPLACE): one object, attribute or relation of the caption
replaced by a WordNet antonym or co-hyponym (see lexicon.py), inflected like the word it replaces, or a
spatial preposition replaced from a fixed list of contrasting ones. Needs only spaCy's tagger.
"""
from __future__ import annotations

import random

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


def _preposition_atoms(doc) -> list[tuple[int, int, tuple[str, ...]]]:
    lower = [t.lower_ for t in doc]
    tags = [t.tag_ for t in doc]
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


def _word_atoms(doc, lexicon: Lexicon, inflector: Inflector, taken: set[int]):
    for token in doc:
        upos = coarse_pos(token.tag_)
        if token.i in taken or upos not in ATOM_POS or not token.is_alpha or token.is_stop:
            continue
        pos, atom = ATOM_POS[upos]
        if pos == NOUN and token.i + 1 < len(doc) and doc[token.i + 1].tag_ in ("NN", "NNS"):
            continue  # a compound's modifier ("dining room", "fire hydrant"): replacing it rarely reads
        if pos == ADJ and token.tag_ != "JJ":  # comparatives and superlatives do not inflect back
            continue
        lemma = lexicon.lemma(token.lower_, pos)
        if lemma is None:  # misspelt or unknown to WordNet
            continue
        options = lexicon.replacements(lemma, pos)[:TOP]
        if not options:
            continue
        if pos == NOUN and token.tag_ == "NNS":
            options = tuple(inflector.plural(o) for o in options)
        elif pos == VERB:
            options = tuple(inflector.verb(o, token.tag_) for o in options)
        yield token.i, token.i + 1, options, atom


def replaced_words_unrelated(lexicon: Lexicon, old_span: str, new_span: str) -> bool:
    """No word of the new span shares a WordNet synset with a word of the old one (articles aside)."""
    old = [w for w in words(old_span) if w not in STOP_ARTICLES]
    new = [w for w in words(new_span) if w not in STOP_ARTICLES]
    return bool(new) and not any(lexicon.shares_synset(a, b) for a in old for b in new)


def replace_negatives(doc, lexicon: Lexicon, inflector: Inflector, rng: random.Random,
                      n: int = 1) -> list[tuple[Candidate, str]]:
    """Up to n distinct (candidate, atom kind) pairs; atom kind is object, attribute or relation."""
    caption = doc.text.strip()
    atoms = [(s, e, opts, "relation") for s, e, opts in _preposition_atoms(doc)]
    taken = {i for s, e, _, _ in atoms for i in range(s, e)}
    atoms += list(_word_atoms(doc, lexicon, inflector, taken))
    rng.shuffle(atoms)
    found, seen = [], set()
    # Round-robin over atoms so that n > 1 varies what is replaced before how.
    for rank in range(TOP):
        for start, end, options, atom in atoms:
            if rank >= len(options) or len(found) >= n:
                continue
            choice = _weighted_choice(options, rng) if rank == 0 else options[rank]
            texts, spaces = replace_tokens(doc, start, end, choice)
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
