"""Who does what to what in the input captions: their agent and patient relations, for swap's object exchanges.

An exchange of two things keeps the sentence and trades the roles: "a long haired cat eating a dead bird" ->
"a dead bird eating a long haired cat", "a woman holding a baby" -> "a baby holding a woman". Whether the new
roles are a scene is a question about the world that the input captions answer: does any caption have a bird
eating, a cat eaten, a baby holding? A first pass parses every caption and keeps, as 64-bit digests, its
relations between lemmas: a verb's subject (nsubj, nsubjpass) and direct object (dobj), the verb describing a
noun (acl: "a man holding ..."), and a preposition's object with what the preposition hangs on (pobj). swap
exchanges two objects only where each relation the exchange makes new is one some input caption has.
Lemmas are WordNet's (the generators run spaCy without its lemmatizer). Pure Python and numpy, no Beam.
"""
from __future__ import annotations

import hashlib
from array import array

import numpy as np

_SEP = "\x1f"
SUBJECT_OBJECT = {"nsubj": "nsubj", "nsubjpass": "nsubj", "dobj": "dobj"}


def relation_key(*parts: str) -> int:
    digest = hashlib.blake2b(_SEP.join(parts).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def token_lemma(token, lexicon) -> str:
    """A noun's or a verb's WordNet lemma ("men" -> "man", "eating" -> "eat"), else the lower-case word."""
    word = token.lower_
    if token.tag_ in ("NN", "NNS"):
        return lexicon.noun_lemma(word, token.tag_ == "NNS") or word
    if token.tag_.startswith("VB"):
        return lexicon.lemma(word, "v") or word
    return word


def relations(doc, lemma) -> list[tuple[tuple[int, ...], tuple[str, ...]]]:
    """(the tokens a relation names, its parts) for every relation of the caption; `lemma(token)` -> str.
    Parts: ("nsubj"|"dobj", verb, noun), ("acl", noun, verb), ("pobj", governor, preposition, noun)."""
    found = []
    for t in doc:
        dep, head = t.dep_, t.head
        if dep in SUBJECT_OBJECT and head.tag_.startswith("VB") and t.tag_ in ("NN", "NNS"):
            found.append(((head.i, t.i), (SUBJECT_OBJECT[dep], lemma(head), lemma(t))))
        elif dep == "acl" and t.tag_.startswith("VB") and head.tag_ in ("NN", "NNS"):
            found.append(((head.i, t.i), ("acl", lemma(head), lemma(t))))
        elif dep == "pobj" and t.tag_ in ("NN", "NNS") and head.dep_ == "prep" and head.head.i != head.i:
            found.append(((head.head.i, head.i, t.i), ("pobj", lemma(head.head), head.lower_, lemma(t))))
    return found


def caption_keys(doc, lexicon) -> list[int]:
    return [relation_key(*parts) for _, parts in relations(doc, lambda t: token_lemma(t, lexicon))]


def exchanged_keys(doc, a, b, lexicon, before: set[int]) -> list[int]:
    """The keys of the relations that tokens a and b take part in once exchanged (each takes the other's
    lemma, the parse stays), leaving out those the caption already has (`before`: its caption_keys)."""
    swapped = {a.i: token_lemma(b, lexicon), b.i: token_lemma(a, lexicon)}

    def lemma(t):
        return swapped.get(t.i) or token_lemma(t, lexicon)

    keys = (relation_key(*parts) for tokens, parts in relations(doc, lemma) if a.i in tokens or b.i in tokens)
    return [k for k in keys if k not in before]


class RelationCounts:
    """Mergeable relation digests (a CombineFn's accumulator). Duplicates go whenever the keys have doubled since
    the last time, so an accumulator holds about twice the distinct relations, never one key per caption."""

    FLOOR = 65_536  # keys held before the first pass that drops duplicates

    def __init__(self):
        self.keys = array("Q")
        self.distinct = 0  # len(keys) after the last pass

    def add(self, keys) -> None:
        self.keys.extend(keys)
        self._bound()

    def merge(self, other: RelationCounts) -> RelationCounts:
        self.keys.extend(other.keys)
        self._bound()
        return self

    def _bound(self) -> None:
        if len(self.keys) > 2 * max(self.distinct, self.FLOOR):
            self.keys = array("Q", self.table().tobytes())
            self.distinct = len(self.keys)

    def table(self) -> np.ndarray:
        return np.unique(np.frombuffer(self.keys, dtype=np.uint64))


def attested(table: np.ndarray, keys: list[int]) -> bool:
    """Every key is in the sorted table."""
    if not keys:
        return True
    if not len(table):
        return False
    wanted = np.asarray(keys, dtype=np.uint64)
    at = np.minimum(np.searchsorted(table, wanted), len(table) - 1)
    return bool((table[at] == wanted).all())
