"""How many captions could have a swap or negclip negative at all, under issue 12's own rules. Prints figures.

    python benchmarks/swap_yield_ceiling.py [--captions ../shared/data/coco/captions_val2017.json]

Issue 12 asks swap for >= 70% yield and negclip for >= 75%, and also that an exchange be like with like (person
with person, animal with animal, object with object by WordNet lexname, colour with colour, size with size),
never a word of a compound, never the head of a quantity or container phrase, never the conjuncts of one
coordination, never two identical spans, and that swap and negclip target different things. This counts, on
every caption, the pairs those rules alone leave, before any test of meaning (roles, symmetric relations,
plausibility), each rule read as loosely as it can be:

- any two nouns: two different nouns (by lemma), neither in a compound nor a quantity head, not conjuncts of one
  coordination; no class asked (the like-with-like rule dropped);
- like with like: those two nouns also of one broad class: a person (noun.person), an animal (noun.animal), or
  any object (noun.artifact, object, food, plant, substance, body or location);
- attributes: two attributes of one class on different nouns (swap's own test, `_attribute_pairs`);
- a colour move: a colour adjective and a second noun in the caption (no other condition);
- a modified phrase: a like-with-like pair where at least one noun has a modifier (adjective, compound, number,
  possessive), which is what negclip can target once swap has the plain nouns;
- outside the issue's list, for the widest reading: two different verbs (not auxiliaries, not conjuncts) or two
  different prepositions with objects, which could trade places ("a cat on a laptop next to a mouse" -> "a cat
  next to a laptop on a mouse"; read as nonsense in most captions when tried, see README).

A caption counts once per line. The stage's own yields are lower still: every test of meaning removes more.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.perturb import neg_swap  # noqa: E402
from pipeline.perturb.generators import Generators, load_spacy  # noqa: E402
from pipeline.perturb.rule_data import swap_rules  # noqa: E402
from pipeline.sources.coco import load_captions_file  # noqa: E402

BROAD_CLASSES = {"noun.person": "person", "noun.animal": "animal",
                 **{f"noun.{n}": "object" for n in "artifact object food plant substance body location".split()}}
MODIFIERS = ("amod", "compound", "nummod", "poss", "nmod")
COPULAS = frozenset("is are was were be been being has have had".split())


def noun_pairs(doc, lexicon) -> list[tuple]:
    """Pairs of different nouns that may trade places by the issue's rules other than like with like."""
    nouns = [t for t in doc if t.tag_ in neg_swap.NOUN_TAGS and t.is_alpha and not neg_swap._in_compound(t, lexicon)
             and not neg_swap._quantity_head(t)]
    pairs = []
    for i, a in enumerate(nouns):
        for b in nouns[i + 1:]:
            if neg_swap._lemma(lexicon, a.lower_, a.tag_ == "NNS") != \
                    neg_swap._lemma(lexicon, b.lower_, b.tag_ == "NNS") and not neg_swap._coordinated(a, b):
                pairs.append((a, b))
    return pairs


def two_different(tokens, coordinated=lambda a, b: False) -> bool:
    return any(a.lower_ != b.lower_ and not coordinated(a, b) for i, a in enumerate(tokens) for b in tokens[i + 1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--captions", default=str(REPO.parent / "shared/data/coco/captions_val2017.json"))
    args = parser.parse_args()
    captions = [a["caption"].strip() for a in load_captions_file(args.captions)[1]]
    lexicon = Generators.load(["swap", "negclip"]).lexicon
    nlp = load_spacy(["swap", "negclip"])
    colours = swap_rules().movable_colours

    def broad(token):
        return BROAD_CLASSES.get(lexicon.noun_class(token.lower_))

    counts = Counter()
    for doc in nlp.pipe(captions, batch_size=256):
        any_two = noun_pairs(doc, lexicon)
        alike = [(a, b) for a, b in any_two if broad(a) is not None and broad(a) == broad(b)]
        attributes = bool(neg_swap._attribute_pairs(doc))
        colour_move = len({t.i for t in doc if t.tag_ in neg_swap.NOUN_TAGS}) >= 2 and any(
            t.dep_ == "amod" and t.lower_ in colours for t in doc)
        modified = {t.i for t in doc if t.tag_ in neg_swap.NOUN_TAGS and any(c.dep_ in MODIFIERS for c in t.children)}
        verbs = two_different([t for t in doc if t.tag_.startswith("VB") and t.dep_ not in ("aux", "auxpass")
                               and t.lower_ not in COPULAS], neg_swap._coordinated)
        relations = two_different([t for t in doc if t.dep_ == "prep" and any(c.dep_ == "pobj" for c in t.children)])
        counts["any two nouns"] += bool(any_two)
        counts["any two nouns, or attributes, or a colour move"] += bool(any_two or attributes or colour_move)
        counts["like with like"] += bool(alike)
        counts["attributes"] += attributes
        counts["a colour move"] += colour_move
        counts["swap: like with like, or attributes, or a colour move"] += bool(alike or attributes or colour_move)
        counts["negclip: like with like, one noun modified"] += any(a.i in modified or b.i in modified
                                                                   for a, b in alike)
        counts["two verbs"] += verbs
        counts["two prepositions"] += relations
        counts["swap, widest: any of the above but 'any two nouns'"] += bool(alike or attributes or colour_move or
                                                                             verbs or relations)
    n = len(captions)
    print(f"Captions with at least one pair the rules leave, of {n:,} (before any test of meaning):")
    for name, k in counts.items():
        print(f"  {name:<56} {k:>6,}  {k / n:6.1%}")
    print("Targets: swap >= 70%, negclip >= 75%.")


if __name__ == "__main__":
    main()
