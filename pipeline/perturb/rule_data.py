"""The hand-written linguistic data the negative rules read, from pipeline/perturb/data/*.json (kept as data so
a reader can review and extend it without reading code): preposition contrasts and where each is physically
possible, near-synonym groups, and what swaps may exchange."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def _load(name: str) -> tuple[dict, str]:
    data = (DATA / name).read_bytes()
    return json.loads(data), hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Prepositions:
    contrasts: dict[tuple[str, ...], tuple[str, ...]]
    never_with: dict[str, frozenset[str]]
    only_with: dict[str, tuple[str, ...]]      # new preposition -> WordNet synset names, one must be a hypernym
    not_after: dict[str, frozenset[str]]
    fixed_phrases: dict[str, frozenset[str]]
    fixed_hypernyms: dict[str, frozenset[str]]  # old preposition -> WordNet classes of objects it is kept with
    sha256: str


@cache
def prepositions() -> Prepositions:
    raw, digest = _load("prepositions.json")
    ground = frozenset(raw["ground"])

    def words(value) -> frozenset[str]:
        return ground if value == "ground" else frozenset(value)

    return Prepositions(
        contrasts={tuple(key): tuple(new) for key, new in raw["contrasts"]},
        never_with={p: words(v) for p, v in raw["never_with"].items()},
        only_with={p: tuple(v) for p, v in raw["only_with"].items()},
        not_after={p: frozenset(v) for p, v in raw["not_after"].items()},
        fixed_phrases={p: frozenset(v) for p, v in raw["fixed_phrases"].items()},
        fixed_hypernyms={p: frozenset(v) for p, v in raw.get("fixed_hypernyms", {}).items()},
        sha256=digest,
    )


@cache
def near_synonym_groups() -> dict[str, frozenset[int]]:
    """lemma -> the ids of the groups it belongs to."""
    raw, _ = _load("near_synonyms.json")
    groups: dict[str, set[int]] = {}
    for i, group in enumerate(raw["groups"]):
        for word in group:
            groups.setdefault(word, set()).add(i)
    return {w: frozenset(ids) for w, ids in groups.items()}


def listed_near_synonyms(a: str, b: str) -> bool:
    groups = near_synonym_groups()
    return bool(groups.get(a, frozenset()) & groups.get(b, frozenset()))


@dataclass(frozen=True)
class Replacements:
    object_sets: dict[str, tuple[str, ...]]   # noun lemma -> the other words of its contrast sets
    people: dict[str, tuple[str, ...]]        # person word -> whom it may become
    sets_of: dict[str, frozenset[str]]        # noun lemma -> the names of its contrast sets
    age_modifiers: frozenset[str]             # "young", "little": the person's age is said
    age_class: dict[str, str]                 # person word -> "adult" or "child"
    monochrome: frozenset[str]                # "photo": its "black and white" is no colour to replace


@cache
def replacements() -> Replacements:
    raw, _ = _load("replacements.json")
    sets: dict[str, list[str]] = {}
    for members in raw["objects"].values():
        for word in members:
            sets.setdefault(word, []).extend(m for m in members if m != word)
    names: dict[str, set[str]] = {}
    for name, members in raw["objects"].items():
        for word in members:
            names.setdefault(word, set()).add(name)
    age = raw.get("age", {})
    return Replacements({w: tuple(dict.fromkeys(m)) for w, m in sets.items()},
                        {w: tuple(m) for w, m in raw["people"].items()},
                        {w: frozenset(n) for w, n in names.items()},
                        frozenset(age.get("modifiers", ())),
                        {w: name for name in ("adult", "child") for w in age.get(name, ())},
                        frozenset(raw.get("monochrome", ())))


@cache
def verb_objects() -> dict[str, frozenset[str]]:
    """verb lemma -> the contrast sets its object must belong to (data/verbs.json "objects")."""
    raw, _ = _load("verbs.json")
    return {v: frozenset(sets) for v, sets in raw.get("objects", {}).items()}


@cache
def verb_object_words() -> dict[str, frozenset[str]]:
    """verb lemma -> the noun lemmas its object must be one of (data/verbs.json "object_words")."""
    raw, _ = _load("verbs.json")
    return {v: frozenset(words) for v, words in raw.get("object_words", {}).items()}


@cache
def verb_contrasts() -> dict[str, tuple[str, ...]]:
    """verb lemma -> the verbs of its groups (data/verbs.json), in the file's order, itself and the verbs it is
    "entailed" with excluded."""
    raw, _ = _load("verbs.json")
    entailed = {frozenset(pair) for pair in raw.get("entailed", ())}
    contrasts: dict[str, list[str]] = {}
    for group in raw["groups"].values():  # noqa: B007
        for verb in group:
            contrasts.setdefault(verb, []).extend(v for v in group
                                                  if v != verb and frozenset((verb, v)) not in entailed)
    return {v: tuple(dict.fromkeys(c)) for v, c in contrasts.items()}


@dataclass(frozen=True)
class SwapRules:
    quantity_heads: frozenset[str]
    symmetric_relations: frozenset[str]
    general_nouns: frozenset[str]
    exchangeable_classes: frozenset[str]
    attribute_class: dict[str, frozenset[str]]   # adjective -> its classes
    object_classes: tuple[tuple[str, frozenset[str], frozenset[str], frozenset[str]], ...]  # name, words,
    # lexnames, hypernym synsets
    movable_colours: frozenset[str]
    colour_target_classes: frozenset[str]
    animal_colours: frozenset[str]
    shades: frozenset[str]
    never_colour_targets: frozenset[str]
    fruit_colours: frozenset[str]

    def class_words(self, name: str) -> frozenset[str]:
        return next(words for n, words, _, _ in self.object_classes if n == name)

    def object_class(self, lemma: str, lexname: str | None, hypernyms: frozenset[str]) -> str | None:
        """The class a noun exchanges within: by its lemma, else its WordNet lexname, else a hypernym."""
        for name, words, _, _ in self.object_classes:
            if lemma in words:
                return name
        for name, _, lexnames, _ in self.object_classes:
            if lexname in lexnames:
                return name
        for name, _, _, synsets in self.object_classes:
            if synsets & hypernyms:
                return name
        return None


@cache
def swap_rules() -> SwapRules:
    raw, _ = _load("swaps.json")
    attribute_class: dict[str, set[str]] = {}
    for name, adjectives in raw["attribute_classes"].items():
        for adjective in adjectives:
            attribute_class.setdefault(adjective, set()).add(name)
    return SwapRules(
        quantity_heads=frozenset(raw["quantity_heads"]),
        symmetric_relations=frozenset(raw["symmetric_relations"]),
        general_nouns=frozenset(raw["general_nouns"]),
        exchangeable_classes=frozenset(raw["exchangeable_classes"]),
        attribute_class={a: frozenset(c) for a, c in attribute_class.items()},
        object_classes=tuple((name, frozenset(c.get("words", ())), frozenset(c.get("lexnames", ())),
                              frozenset(c.get("synsets", ()))) for name, c in raw["object_classes"].items()),
        movable_colours=frozenset(raw["colour_moves"]["colours"]),
        colour_target_classes=frozenset(raw["colour_moves"]["target_classes"]),
        animal_colours=frozenset(raw["colour_moves"]["animal_colours"]),
        shades=frozenset(raw["colour_moves"]["shades"]),
        never_colour_targets=frozenset(raw["colour_moves"]["never_targets"]),
        fruit_colours=frozenset(raw["colour_moves"]["fruit_colours"]),
    )


@dataclass(frozen=True)
class PositiveSwaps:
    fixed_pairs: frozenset[frozenset[str]]
    fixed_words: frozenset[str]                 # the multiword sides of fixed pairs ("hot dog")
    monochrome_only: frozenset[frozenset[str]]
    monochrome_nouns: frozenset[str]
    intensifiers: frozenset[str]
    ordinals: frozenset[str]
    shared_prepositions: frozenset[str]
    worn: frozenset[str]                        # WordNet synset names of what is worn
    sha256: str


@cache
def positive_swaps() -> PositiveSwaps:
    """data/positive_swaps.json: what rule_swap (perturb/pos_swap.py) may exchange."""
    raw, digest = _load("positive_swaps.json")
    return PositiveSwaps(
        fixed_pairs=frozenset(frozenset(pair) for pair in raw["fixed_pairs"]),
        fixed_words=frozenset(w for pair in raw["fixed_pairs"] for w in pair if " " in w),
        monochrome_only=frozenset(frozenset(pair) for pair in raw["monochrome_only"]),
        monochrome_nouns=frozenset(raw["monochrome_nouns"]) | replacements().monochrome,
        intensifiers=frozenset(raw["intensifiers"]),
        ordinals=frozenset(raw["ordinals"]),
        shared_prepositions=frozenset(raw["shared_prepositions"]),
        worn=frozenset(raw["worn"]),
        sha256=digest,
    )


@dataclass(frozen=True)
class PositiveSynonyms:
    entries: list[dict]
    version: int
    sha256: str


@cache
def positive_synonyms() -> PositiveSynonyms:
    """data/positive_synonyms.json: the table rule_replace (perturb/pos_replace.py) reads."""
    raw, digest = _load("positive_synonyms.json")
    return PositiveSynonyms(raw["entries"], raw["version"], digest)


@dataclass(frozen=True)
class StructureRules:
    voice_participles: dict[str, str]          # verb lemma -> its past participle
    participle_lemmas: dict[str, str]          # past participle -> its verb lemma
    voice_objects: dict[str, frozenset[str]]   # verb lemma -> the object classes it takes (absent: any)
    voice_synsets: dict[str, frozenset[str]]   # verb lemma -> WordNet synsets its object must descend from
    voice_not_objects: dict[str, frozenset[str]]  # verb lemma -> objects its passive does not take ("skis")
    in_progress: frozenset[str]                # verbs whose bare participle reads as a result: "being eaten"
    symmetric: tuple[tuple[str, ...], ...]
    converse: dict[tuple[str, ...], tuple[str, ...]]
    comparable: dict[str, int]                 # object class -> its group
    holder_prepositions: tuple[tuple[str, ...], ...]
    ground_prepositions: tuple[tuple[str, ...], ...]
    person_pronouns: dict[str, str]            # person noun -> "him" or "her"
    holder_classes: frozenset[str]
    not_holders: frozenset[str]
    not_grounds: frozenset[str]
    on_participles: frozenset[str]
    with_places: dict[str, str]                # a thing -> the preposition its "with" stands for ("bowl": "in")
    thing_agents: frozenset[str]               # verbs a thing may do too ("a plate holding a sandwich")
    exchange_verbs: frozenset[str]
    either_kind: frozenset[str]
    sha256: str



@cache
def structure_rules() -> StructureRules:
    """data/structure.json: what the structure rules (pos_voice.py, pos_relation.py, neg_exchange.py) may change."""
    raw, digest = _load("structure.json")
    verbs = raw["voice_verbs"]
    return StructureRules(
        voice_participles={v: e["participle"] for v, e in verbs.items()},
        participle_lemmas={e["participle"]: v for v, e in verbs.items()},
        voice_objects={v: frozenset(e["objects"]) for v, e in verbs.items() if "objects" in e},
        voice_synsets={v: frozenset(e["synsets"]) for v, e in verbs.items() if "synsets" in e},
        voice_not_objects={v: frozenset(e["not_objects"]) for v, e in verbs.items() if "not_objects" in e},
        in_progress=frozenset(v for v, e in verbs.items() if e.get("in_progress")),
        symmetric=tuple(tuple(r) for r in raw["symmetric"]),
        converse={tuple(a): tuple(b) for a, b in raw["converse"]},
        comparable={c: i for i, group in enumerate(raw["comparable"]) for c in group},
        holder_prepositions=tuple(tuple(p) for p in raw["holder_prepositions"]),
        ground_prepositions=tuple(tuple(p) for p in raw["ground_prepositions"]),
        person_pronouns={w: pronoun for pronoun, nouns in raw["person_pronouns"].items() for w in nouns},
        holder_classes=frozenset(raw["holder_classes"]),
        not_holders=frozenset(raw["not_holders"]),
        not_grounds=frozenset(raw["not_grounds"]),
        on_participles=frozenset(raw["on_participles"]),
        with_places={w: p for p, words in raw["with_places"].items() for w in words},
        thing_agents=frozenset(raw["thing_agents"]),
        exchange_verbs=frozenset(raw["exchange_verbs"]),
        either_kind=frozenset(raw["either_kind"]),
        sha256=digest,
    )
