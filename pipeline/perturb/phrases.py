"""Noun phrases of a parsed caption as token ranges, and the text surgery the structure rules share (rule_voice,
rule_converse and the exchange negatives): phrases move whole, each with the characters it was
written with, and the sentence capital goes with the caption's first word.

Plain Python over spaCy tokens (no Beam, no I/O).
"""
from __future__ import annotations

from pipeline.perturb.units import sentence_cased

NOUN_TAGS = frozenset({"NN", "NNS"})
PRONOUN_TAGS = frozenset({"PRP", "PRP$", "WP", "WP$", "EX"})
# Words that make a singular noun a phrase a caption can start with ("a man", "the dog", "one cat", "this bus").
DETERMINING = frozenset({"DT", "CD", "PDT"})
# A thing said against another of the caption: moved, it names what it stood against ("another dog", "the other").
RELATIVE = frozenset({"another", "other", "others", "each", "same", "itself", "themselves", "no"})
# -ing words captions use as nouns, not as a verb the parser misread.
ING_NOUNS = frozenset("""building buildings ceiling clothing painting paintings railing frosting icing topping toppings
stuffing wedding sibling siblings pudding dumpling dumplings earring earrings sling string ring wing king""".split())
# Nouns that frame a photo rather than name a thing in it ("a picture of a cat next to a dog").
FRAMES = frozenset("""picture pictures photo photos photograph photographs image images view views shot shots closeup
close snapshot scene display""".split())


def subtree_range(token) -> tuple[int, int] | None:
    """[start, end) of the token's subtree, where it is contiguous (it always is in a projective parse)."""
    start, end = token.left_edge.i, token.right_edge.i + 1
    return (start, end) if len(list(token.subtree)) == end - start else None


def determined(doc, head, start: int) -> bool:
    """A plural, or a singular with a determiner, a number or a possessive before it: a phrase that reads whole
    wherever it moves ("a man", "two dogs", "kids"; not "man" of a headline caption)."""
    if head.tag_ == "NNS":
        return True
    return any(t.tag_ in DETERMINING or t.tag_ == "POS" for t in doc[start:head.i])


def plain_phrase(doc, start: int, end: int) -> bool:
    """A phrase that may move: no pronoun ("his horse": it would come before what it points to), no word said
    against another thing, no photo frame inside ("close up of"), no punctuation inside but a hyphen or apostrophe,
    and no noun the parser may have misread: a plural compound ("two elephants graze": "graze" read as the noun) or
    a plural after "a"."""
    tokens = doc[start:end]
    if not len(tokens) or (tokens[0].lower_ in ("a", "an") and tokens.root.tag_ == "NNS" and
                           not any(t.lower_ == "of" for t in tokens)):
        return False
    return not any(
        t.tag_ in PRONOUN_TAGS or t.lower_ in RELATIVE or t.lower_ in FRAMES or
        (t.lower_ in ("one", "ones") and t.tag_ != "CD") or
        (t.is_punct and t.text not in ("-", "'", "’") and not _list_comma(t)) or
        (t.dep_ == "compound" and t.tag_ == "NNS") for t in tokens)


def phrase_text(doc, start: int, end: int) -> str:
    """The characters of tokens [start, end), inner spacing as written."""
    return doc[start:end].text


def tail_text(doc, end: int) -> str:
    """What follows token `end - 1` in the caption, with the space before it."""
    if end >= len(doc):
        return ""
    last = doc[end - 1]
    return doc.text[last.idx + len(last):]


def first_piece_cased(doc, pieces: list[tuple[str, int | None]]) -> list[str]:
    """The texts of pieces [(text, token index it starts at, or None for a new word)] with the sentence capital
    moved: where the caption starts with a capital only because it is the first word, the first piece gets the
    capital and the caption's old first word loses it (a name, "I" or an acronym keeps its own)."""
    texts = [text for text, _ in pieces]
    if not texts or not sentence_cased(doc[0].text):
        return texts
    for k, (text, start) in enumerate(pieces):
        if start == 0 and k != 0 and doc[0].tag_ not in ("NNP", "NNPS"):
            texts[k] = text[:1].lower() + text[1:]
    texts[0] = texts[0][:1].upper() + texts[0][1:]
    return texts


def of_object(token) -> bool:
    """The noun of an "of" phrase of another noun ("animals" in "a group of animals", "donuts" in "boxes of donuts"):
    what is said of it is said of the whole phrase."""
    return token.dep_ == "pobj" and token.head.lower_ == "of" and token.head.head.tag_ in NOUN_TAGS


def owner(token):
    """The noun whose phrase the token's "of" phrases belong to: "boxes" for "donuts" in "boxes of donuts"."""
    while of_object(token) and token.head.head.lower_ not in FRAMES:
        token = token.head.head
    return token


def misparsed(doc) -> bool:
    """A parse the structure rules cannot trust: a noun with a subject ("a young elephant walk in front of": the
    verb read as a noun)."""
    return any(c.dep_ in ("nsubj", "nsubjpass") for t in doc if t.tag_ in NOUN_TAGS for c in t.children)


def gerund(noun, lexicon) -> bool:
    """A verb's -ing form the parser read as a noun ("a helmet standing"); the nouns captions use are kept."""
    return noun.lower_.endswith("ing") and noun.lower_ not in ING_NOUNS and \
        lexicon.lemma(noun.lower_, "v") not in (None, noun.lower_)


def _list_comma(token) -> bool:
    """A comma between the items of a list of things ("a toilet, sink and shower")."""
    return token.text == "," and token.head.tag_ in NOUN_TAGS and any(c.dep_ == "conj" for c in token.head.children)

