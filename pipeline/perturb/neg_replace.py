"""`replace` hard negatives (CREPE/SugarCrepe REPLACE): one object, attribute or relation of the caption
replaced, inflected like the word it replaces: an object by a WordNet co-hyponym of its dominant visual sense
(lexicon.py) of the same object class (data/swaps.json: vehicle for vehicle, food for food); an attribute by a
WordNet antonym or another colour; a verb by a contrasting verb of its group (data/verbs.json); a spatial
preposition by a contrasting one (data/prepositions.json).

replace_candidates() proposes every legal candidate, for a ranker (rank.py) to choose from:
- a replacement word must be one the input captions use (the corpus vocabulary of the first pass);
- it is never a near-synonym of the original (lexicon.near_synonyms: a shared synset, a hypernym, a very high
  WordNet similarity, or a curated group in data/near_synonyms.json);
- neither half of a compound is replaced ("fire hydrant", "tooth brush", "little league"): compounds come from
  the parse (compound dependencies inside a noun phrase) and from WordNet's multiword entries, not the tag;
- a noun is replaced only where it belongs to an object class ("night", "center" do not), and only by a word of
  the same class ("surfboard" never becomes "foil", "bowl" never "boat");
- a preposition changes only where the new relation is physically possible for that object and verb, and not
  inside an idiom ("in the air", "on the phone"), as data/prepositions.json says.
- what the caption says twice stays: a thing it names again as its group or with "the", a colour its noun
  already has; the object of an act verb ("performing a stunt") is no thing to replace;
- a new object or action that another caption of the same photo names is never used (`image_words`): it may
  well be true of the photo.
Needs spaCy's tagger and parser.
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.perturb.candidates import Candidate, coarse_pos
from pipeline.perturb.corpus import word_key
from pipeline.perturb.inflect import Inflector
from pipeline.perturb.lexicon import ADJ, COLOURS, NOUN, VERB, VISUAL_LEXNAMES, Lexicon
from pipeline.perturb.rule_data import (prepositions, replacements, swap_rules, verb_contrasts, verb_object_words,
                                        verb_objects)
from pipeline.perturb.text import indefinite_article, match_case, words

REPLACE = "replace"
MAX_CANDIDATES = 16  # per caption: every atom's commonest options, round-robin; bounds the ranker's work
# A replacement word must appear at least this often in the input captions.
MIN_WORD_COUNT = 2
ATOM_POS = {"NOUN": (NOUN, "object"), "ADJ": (ADJ, "attribute"), "VERB": (VERB, "relation")}
STOP_ARTICLES = frozenset({"a", "an", "the"})
# The sex a person word or a pronoun names: a replaced person must agree with the pronouns that follow.
SEX = {**dict.fromkeys("man men boy boys he him his himself gentleman guy father husband son brother king male".split(),
                       "m"),
       **dict.fromkeys("woman women girl girls she her hers herself lady mother wife daughter sister queen female"
                       .split(), "f")}
PRONOUN_WORDS = frozenset("he him his himself she her hers herself".split())
# Adjectives said of people and animals only ("old furniture" never becomes "young furniture").
ANIMATE_ONLY = frozenset("young adult dead alive happy sad hungry asleep awake male female sleepy angry".split())
NOUN_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS"})
# Verbs whose object is an act ("doing a flip", "performing a stunt"): that noun is no thing in the picture,
# whatever rare sense WordNet gives it ("flip" the drink, "stunt" the animal).
ACT_VERBS = frozenset("do perform attempt execute".split())


def _contrasts() -> dict[tuple[str, ...], tuple[str, ...]]:
    return prepositions().contrasts


PREPOSITIONS = _contrasts()  # relation (words) -> contrasting relations; llm/validate reads it too
_LONGEST = max(len(k) for k in PREPOSITIONS)
_FIRST_WORDS = frozenset(k[0] for k in PREPOSITIONS)


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
    deps: list[str]
    heads: list[int]
    starts: list[int]  # character offset of each token in the caption (doc.text.strip())
    caption: str
    dependents: list[list[int]]  # per token, the tokens whose head it is (not itself), in order

    @classmethod
    def of(cls, doc) -> Tokens:
        from spacy.attrs import DEP, HEAD, IDX, IS_ALPHA, IS_STOP, LOWER, ORTH, SPACY, TAG

        # One array for every attribute: each spaCy Token access builds a Python object.
        orth, spacy_, lower, tag, alpha, stop, dep, head, idx = \
            doc.to_array([ORTH, SPACY, LOWER, TAG, IS_ALPHA, IS_STOP, DEP, HEAD, IDX]).T.tolist()
        strings = doc.vocab.strings
        texts, spaces = [strings[h] for h in orth], [" " if s else "" for s in spacy_]
        text = "".join(w + s for w, s in zip(texts, spaces, strict=True))  # doc.text, without a second pass
        lead = len(text) - len(text.lstrip())
        # HEAD is a relative offset, stored in the unsigned array as two's complement
        heads = [j + (h - (1 << 64) if h >= 1 << 63 else h) for j, h in enumerate(head)]
        dependents = [[] for _ in texts]  # once per caption: children() is asked many times per token
        for j, h in enumerate(heads):
            if h != j:
                dependents[h].append(j)
        return cls(texts, spaces, [strings[h] for h in lower], [strings[h] for h in tag], [bool(a) for a in alpha],
                   [bool(s) for s in stop], [strings[h] for h in dep], heads, [i - lead for i in idx], text.strip(),
                   dependents)

    def children(self, i: int, deps: tuple[str, ...]) -> list[int]:
        return [j for j in self.dependents[i] if self.deps[j] in deps]


def compound_tokens(tokens: Tokens, lexicon: Lexicon) -> tuple[set[int], dict[int, tuple[int, bool]]]:
    """Compounds, from the parse (compound dependencies) and from WordNet's multiword entries that end at the
    head of a noun phrase ("fire hydrant", "little league", "hot dog", "young man"; not "red fire" in "red
    fire hydrant", WordNet's firework, nor "large white", a pig). Returns (tokens never replaced, {token of a
    two-word compound: (its partner, partner comes first)}). A word of a two-word compound is replaced only
    where the captions use the new compound ("passenger train" -> "passenger bus", "young man" -> "old man";
    never "fire hydrant" -> "fire toilet", "tooth brush" -> "tooth tool", "little league" -> "large
    league"); longer compounds are never touched."""
    fixed, pairs = set(), {}

    def pair(m: int, h: int) -> None:
        if m in pairs or h in pairs:  # part of a longer compound ("double decker bus")
            fixed.update((m, h, *(x for x in (pairs.get(m, (m,))[0], pairs.get(h, (h,))[0]))))
        else:
            pairs[h], pairs[m] = (m, True), (h, False)

    for i, dep in enumerate(tokens.deps):
        if dep == "compound":
            if tokens.heads[i] == i + 1:
                pair(i, i + 1)
            else:  # "base ball players": everything from the modifier to its head
                lo, hi = sorted((i, tokens.heads[i]))
                fixed.update(range(lo, hi + 1))
    alpha = tokens.alpha
    for size in (2, 3):
        for i in range(len(tokens.lower) - size + 1):
            span = range(i, i + size)
            last = i + size - 1
            if tokens.tags[last] in ("NN", "NNS") and tokens.deps[last] != "compound" and \
                    all(alpha[j] for j in span) and lexicon.is_multiword(tuple(tokens.lower[j] for j in span)):
                if size == 2 and pairs.get(last) in (None, (i, True)):
                    pairs[last], pairs[i] = (i, True), (last, False)
                else:
                    fixed.update(span)
    return fixed, {t: p for t, p in pairs.items() if t not in fixed and p[0] not in fixed}


def _object_of(tokens: Tokens, last: int) -> int | None:
    """The head of the preposition's object: its pobj, or for a parse without one, the first noun after it
    across determiners and modifiers."""
    objects = tokens.children(last, ("pobj",))
    if objects:
        return objects[0]
    for j in range(last + 1, min(last + 5, len(tokens.tags))):
        tag = tokens.tags[j]
        if tag in NOUN_TAGS or tag == "PRP":
            while j + 1 < len(tokens.tags) and tokens.tags[j + 1] in NOUN_TAGS:  # "train tracks": the head
                j += 1
            return j
        if tag not in ("DT", "PRP$", "JJ", "JJR", "JJS", "CD", "POS", "VBN", "VBG", "RB"):
            return None
    return None


def possible(new: str, obj: str, governor: str, lexicon: Lexicon) -> bool:
    """Whether `new` can relate the governor (the verb or noun the relation hangs on) to this object."""
    data = prepositions()
    lemma = lexicon.lemma(obj, NOUN) or obj
    if obj in data.never_with.get(new, ()) or lemma in data.never_with.get(new, ()):
        return False
    if governor in data.not_after.get(new, ()):
        return False
    needs = data.only_with.get(new)
    return not needs or bool(lexicon.hypernym_names(obj) & set(needs))


def _lacks_one(tokens: Tokens, obj: int) -> bool:
    """"without" reads for one thing or a bare plural ("without a hat", "without mustard"), not for a list or
    a quantity ("without various buttons", "without buildings, bikers and walkers", "without a variety of
    foods"; "a pair of scissors" is one thing)."""
    if tokens.children(obj, ("conj", "cc")):
        return False
    if tokens.lower[obj] in swap_rules().quantity_heads and tokens.lower[obj] != "pair" and \
            any(tokens.lower[j] == "of" for j in tokens.children(obj, ("prep",))):
        return False
    return not any(tokens.lower[j] in ("various", "many", "several", "some", "other", "lots", "few", "multiple",
                                        "numerous", "different", "assorted")
                   for j in tokens.children(obj, ("amod", "det", "nummod", "quantmod")))


def _preposition_atoms(tokens: Tokens, lexicon: Lexicon) -> list[tuple[int, int, tuple[str, ...]]]:
    data = prepositions()
    lower = tokens.lower
    atoms, i = [], 0
    while i < len(lower):
        if lower[i] in _FIRST_WORDS:
            for size in range(_LONGEST, 0, -1):
                key = tuple(lower[i:i + size])
                if len(key) != size or key not in PREPOSITIONS:
                    continue
                # A relation between two things: a preposition with an object ("on a table"), not a particle
                # ("turned on").
                obj = _object_of(tokens, i + size - 1)
                if obj is not None and tokens.tags[i + size - 1] in ("IN", "TO", "RB", "JJ", "RP"):
                    head = tokens.heads[i]
                    governor = lower[head] if head != i else ""
                    obj_word = lower[obj]
                    key_text = " ".join(key)
                    # The object is a thing in the picture ("in a street race", "at speed" are not); anything
                    # a thing can have or lack will do for "with".
                    thing = tokens.tags[obj] == "PRP" or object_class(lexicon, obj_word) is not None or \
                        lexicon.noun_class(obj_word) in VISUAL_LEXNAMES or \
                        (key in (("with",), ("without",)) and tokens.tags[obj] in ("NN", "NNS"))
                    obj_lemma = lexicon.lemma(obj_word, NOUN) or obj_word
                    if thing and obj_word not in data.fixed_phrases.get(key_text, ()) and \
                            obj_lemma not in data.fixed_phrases.get(key_text, ()) and \
                            not (key_text in data.fixed_hypernyms and  # "in a red shirt": worn
                                 lexicon.hypernym_names(obj_lemma) & data.fixed_hypernyms[key_text]):
                        options = tuple(n for n in PREPOSITIONS[key] if possible(n, obj_word, governor, lexicon)
                                        and (n != "without" or _lacks_one(tokens, obj)))
                        if options:
                            atoms.append((i, i + size, options))
                i += size - 1
                break
        i += 1
    return atoms


def object_class(lexicon: Lexicon, word: str) -> str | None:
    """The object class of a noun (data/swaps.json), kept per lexicon: asked for every noun of every caption."""
    cache = lexicon.__dict__.setdefault("object_classes", {})
    if word not in cache:
        lemma = lexicon.lemma(word, NOUN) or word
        cache[word] = swap_rules().object_class(lemma, lexicon.noun_class(word), lexicon.hypernym_names(word))
    return cache[word]


def _options(lexicon: Lexicon, lemma: str, pos: str, word: str) -> tuple[str, ...]:
    """Replacement lemmas, never a near-synonym nor a general word ("meal", "vegetable"):
    - a verb: the other verbs of its contrast groups (data/verbs.json);
    - a person: the contrasts of data/replacements.json (man -> woman, boy, girl; never a role);
    - another noun: the other words of its contrast sets (data/replacements.json: "car" -> "truck", "bus"),
      or, in no set, WordNet co-hyponyms of the same object class (data/swaps.json);
    - an adjective: WordNet antonyms, or another colour.
    Kept per lexicon: asked for every word of every caption, and it depends on nothing else."""
    cache = lexicon.__dict__.setdefault("replace_options", {})
    if (lemma, pos, word) not in cache:
        cache[lemma, pos, word] = _find_options(lexicon, lemma, pos, word)
    return cache[lemma, pos, word]


def _find_options(lexicon: Lexicon, lemma: str, pos: str, word: str) -> tuple[str, ...]:
    if pos == VERB:
        found = sorted(verb_contrasts().get(lemma, ()), key=lambda v: (-lexicon.count(v, VERB), v))
    elif pos == NOUN:
        own = object_class(lexicon, word)
        table = replacements()
        if own == "person":
            found = list(table.people.get(lemma, ()))
        elif lemma in table.object_sets:
            found = sorted(table.object_sets[lemma], key=lambda w: (-lexicon.count(w, NOUN), w))
        else:
            found = [o for o in lexicon.replacements(lemma, pos) if object_class(lexicon, o) == own]
        found = [o for o in found if o not in swap_rules().general_nouns]
    else:
        found = list(lexicon.replacements(lemma, pos))
    return tuple(o for o in found if not lexicon.near_synonyms(lemma, o, pos))


VERB_ROLES = frozenset({"ROOT", "acl", "relcl", "advcl", "xcomp", "ccomp", "conj", "pcomp", "csubj"})


def _subject(tokens: Tokens, i: int) -> int:
    """The token that does what verb i says: its subject; for a verb describing a noun ("a man sitting",
    "people that are surfing"), that noun; for a verb under another ("prepares to kick"), that one's subject."""
    j = i
    for _ in range(6):
        subjects = tokens.children(j, ("nsubj", "nsubjpass"))
        if subjects and tokens.tags[subjects[0]] not in ("WDT", "WP"):
            return subjects[0]
        head = tokens.heads[j]
        if head == j or coarse_pos(tokens.tags[j]) != "VERB":
            return _quantified(tokens, j)
        if tokens.deps[j] in ("acl", "relcl"):
            return _quantified(tokens, head)
        j = head
    return j


def _quantified(tokens: Tokens, j: int) -> int:
    """"a group of people" stands for the people."""
    if tokens.lower[j] in swap_rules().quantity_heads:
        for p in tokens.children(j, ("prep",)):
            if tokens.lower[p] == "of":
                objects = tokens.children(p, ("pobj",))
                if objects:
                    return objects[0]
    return j


def _animate_subject(tokens: Tokens, i: int, lexicon: Lexicon) -> bool:
    """The verb's subject is a person or an animal: the verb groups are actions of people and animals ("a
    plane flying" -> "walking" is no scene)."""
    j = _subject(tokens, i)
    if tokens.tags[j] == "PRP":
        return tokens.lower[j] in ("he", "she", "they", "i", "we", "you", "someone", "somebody")
    return tokens.tags[j] in NOUN_TAGS and object_class(lexicon, tokens.lower[j]) in ("person", "animal")


NUMBERS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _number_atoms(tokens: Tokens, taken: set[int]):
    """A count of things ("two dogs") becomes another count next to it ("three dogs")."""
    for i, word in enumerate(tokens.lower):
        if i in taken or tokens.tags[i] != "CD" or word not in NUMBERS or word == "one":
            continue
        following = tokens.tags[i + 1:i + 4]
        if "NNS" not in following or any(t not in ("NNS", "NN", "JJ") for t in following[:following.index("NNS")]):
            continue  # "two dogs", "two city buses", "two large brown bears"; not "two of them"
        k = NUMBERS.index(word)
        yield i, i + 1, tuple(n for n in (NUMBERS[k + 1:k + 2] + NUMBERS[max(1, k - 1):k]) if n), "attribute", None


def _word_atoms(tokens: Tokens, lexicon: Lexicon, taken: set[int]):
    """(start, end, replacement lemmas, atom kind, Penn tag to inflect to) per replaceable word."""
    tags = tokens.tags
    mentions = _mentions(tokens, lexicon)
    for i, tag in enumerate(tags):
        upos = coarse_pos(tag)
        if i in taken or upos not in ATOM_POS or not tokens.alpha[i] or tokens.stop[i]:
            continue
        pos, atom = ATOM_POS[upos]
        word = tokens.lower[i]
        if pos == NOUN and (tag not in ("NN", "NNS") or tokens.deps[i] == "amod" or
                            object_class(lexicon, word) is None or word in swap_rules().general_nouns):
            continue  # "at night", "in the center": not a thing in the picture; "a vintage drawing"
        if pos == NOUN and any(tokens.lower[j] in ("male", "female") for j in tokens.children(i, ("amod",))):
            continue  # "a female toddler" never becomes "a female woman"
        if pos == NOUN and object_class(lexicon, word) == "person" and \
                any(tokens.tags[j] == "PRP$" for j in tokens.children(i, ("poss",))):
            continue  # "a mother and her children": a relation to someone, not a person to replace
        if pos == NOUN and tokens.deps[i] == "dobj" and \
                lexicon.lemma(tokens.lower[tokens.heads[i]], VERB) in ACT_VERBS:
            continue  # "performing a stunt" never becomes "performing a male"
        if pos == NOUN and _named_elsewhere(tokens, i, mentions):
            continue  # "elephants, including a baby elephant" -> "sheep, including a baby elephant"
        if pos == ADJ and tag != "JJ":  # comparatives and superlatives do not inflect back
            continue
        if pos == VERB and (tokens.deps[i] not in VERB_ROLES or not _animate_subject(tokens, i, lexicon)):
            continue  # a verb form inside a noun phrase ("a stop sign"), or the action of a thing ("a plane flying")
        lemma = lexicon.noun_lemma(word, tag == "NNS") if pos == NOUN else lexicon.lemma(word, pos)
        if lemma is None:  # misspelt or unknown to WordNet
            continue
        if pos == VERB and not _object_allows(tokens, i, lemma, lexicon):
            continue  # "riding a wave": the riding verbs are about vehicles, animals and boards
        options = _options(lexicon, lemma, pos, word)
        if options:
            yield i, i + 1, options, atom, tag


def _mentions(tokens: Tokens, lexicon: Lexicon) -> dict[str, list[int]]:
    """noun lemma -> the tokens that name it (compound modifiers aside: "a tv on a tv stand")."""
    found: dict[str, list[int]] = {}
    for j, w in enumerate(tokens.lower):
        if tokens.tags[j] in ("NN", "NNS") and tokens.deps[j] != "compound":
            found.setdefault(lexicon.noun_lemma(w, tokens.tags[j] == "NNS") or w, []).append(j)
    return found


def _named_elsewhere(tokens: Tokens, i: int, mentions: dict[str, list[int]]) -> bool:
    """The noun at i and another mention name the same thing: one is the group the other belongs to
    ("elephants, including a baby elephant") or the later one says "the" ("three beds ... in the bed").
    Replacing one mention leaves the other, and the caption contradicts itself rather than the picture. Two
    things of one kind ("a man ... another man", "a sheep near other sheep", "an adult elephant ... a baby
    elephant") are not that."""
    same = next((m for m in mentions.values() if i in m), ())
    for j in same:
        if j == i:
            continue
        if any(tokens.lower[d] in ("other", "another") for k in (i, j) for d in tokens.children(k, ("det", "amod"))):
            continue  # "a sheep near other sheep": two things
        later = max(i, j)
        if tokens.tags[j] != tokens.tags[i] or \
                any(tokens.lower[d] == "the" for d in tokens.children(later, ("det",))):
            return True
    return False


def _modified_noun(tokens: Tokens, i: int) -> int:
    """The noun an adjective describes, through a list of adjectives ("red, white and black bus")."""
    j = i
    for _ in range(8):
        if tokens.tags[j] in NOUN_TAGS or tokens.deps[j] not in ("amod", "conj", "compound") or tokens.heads[j] == j:
            return j
        j = tokens.heads[j]
    return j


def _describes_living(tokens: Tokens, i: int, lexicon: Lexicon) -> bool:
    """The adjective at i says something of a person or an animal (its noun, or the subject it describes)."""
    j = tokens.heads[i]
    if tokens.deps[i] == "acomp":
        j = _subject(tokens, j)
    return object_class(lexicon, tokens.lower[j]) in ("person", "animal")


def _object_allows(tokens: Tokens, i: int, verb: str, lexicon: Lexicon) -> bool:
    """A verb that needs a certain object ("ride": a vehicle, an animal, a board; "hit": a ball) has one of
    those."""
    if verb not in verb_objects() and verb not in verb_object_words():
        return True
    objects = tokens.children(i, ("dobj", "pobj")) + [j for p in tokens.children(i, ("prep",))
                                                      for j in tokens.children(p, ("pobj",))]
    return any(_takes_object(verb, lexicon.noun_lemma(tokens.lower[j], tokens.tags[j] == "NNS") or "")
               for j in objects)


def _verb_lemmas(lexicon: Lexicon, word: str) -> list[str]:
    """Every lemma WordNet gives the verb form, not only its first: that is "swinge" for "swinging", and a verb's
    object rules (data/verbs.json) are asked of each."""
    return lexicon.wn._morphy(word.lower(), VERB) or [word.lower()]


def _takes_object(verb: str, noun: str) -> bool:
    """Whether the verb (lemma) can act on the noun (lemma), by data/verbs.json "objects" and "object_words"."""
    needs, words = verb_objects().get(verb), verb_object_words().get(verb)
    if needs is None and words is None:
        return True
    return noun in (words or ()) or bool(replacements().sets_of.get(noun, frozenset()) & (needs or frozenset()))


def _fits(corpus, tokens: Tokens, start: int, end: int, new: str, atom: str, lexicon: Lexicon,
          nouns: list[tuple[int, str]]) -> bool:
    """Whether the replacement reads as caption English where it stands, by the corpus of input captions:
    its words are ones the captions use; a verb is one the captions use before the next word ("kicking
    around" -> "flying around" never seen: "men flying around a ball" is not a scene), with an object it can
    take; an adjective said of living things only describes one; and a new object is not a near-synonym of
    another noun of the caption (`nouns`: (index, lemma)), "a man and a lady" -> "a woman and a lady"."""
    words_new = new.split()
    for w in words_new:  # a loop, not any(): asked of every candidate
        if corpus.count(w) < MIN_WORD_COUNT:
            return False
    if atom == "relation" and coarse_pos(tokens.tags[start]) == "VERB":
        following = tokens.lower[end] if end < len(tokens.lower) else None
        if following and tokens.alpha[end] and corpus.bigram(words_new[-1], following) == 0:
            return False
        if not all(_object_allows(tokens, start, v, lexicon) for v in _verb_lemmas(lexicon, new)):
            return False
    if atom == "attribute" and new in ANIMATE_ONLY and not _describes_living(tokens, start, lexicon):
        return False
    if atom == "attribute" and new in tokens.lower[max(0, start - 3):start] + tokens.lower[end:end + 3]:
        return False  # "Old and new models" never becomes "New and new models", whatever the parse says
    if atom == "attribute" and end - start == 1 and coarse_pos(tokens.tags[start]) == "ADJ":
        noun = _modified_noun(tokens, start)
        if any(w == new and j != start and _modified_noun(tokens, j) == noun for j, w in enumerate(tokens.lower)):
            return False  # "a red white and black bus" never becomes "a black white and black bus"
        if end < len(tokens.tags) and tokens.tags[end].startswith("JJ") and corpus.bigram(new, tokens.lower[end]) == 0:
            return False  # "a small cramped bathroom": "large cramped" is never said
        if tokens.lower[noun] in replacements().monochrome and tokens.lower[start] in COLOURS:
            return False  # "a black and white photo" has no colour: never "a red and white photo"
    if atom == "object":
        lemma = lexicon.lemma(new, NOUN) or new
        near_synonyms = lexicon.near_synonyms
        for j, other in nouns:  # a loop, not any(): asked about every object candidate of every caption
            if j != start and near_synonyms(other, lemma, NOUN):
                return False
        head = tokens.heads[start]
        if tokens.deps[start] == "dobj" and coarse_pos(tokens.tags[head]) == "VERB" and \
                not all(_takes_object(v, lemma) for v in _verb_lemmas(lexicon, tokens.lower[head])):
            return False  # "swinging a tennis racket" never becomes "swinging a tennis ball"
        ages = replacements().age_class
        if lemma in ages and any(tokens.lower[j] in replacements().age_modifiers
                                 for j in tokens.children(start, ("amod",))):
            old = lexicon.noun_lemma(tokens.lower[start], tokens.tags[start] == "NNS") or tokens.lower[start]
            if ages.get(old, ages[lemma]) != ages[lemma]:
                return False  # "a young boy" is not "a young man": with its age said, a person changes only its sex
        sex = SEX.get(lemma)
        if sex and any(SEX.get(w) not in (None, sex) for w in tokens.lower[start + 1:] if w in PRONOUN_WORDS):
            return False  # "a man ... in his dining room" never becomes "a woman ... in his dining room"
    return True


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


def _breaks_entry(tokens: Tokens, i: int, new: str, lexicon: Lexicon, corpus) -> bool:
    """The word at i forms a WordNet entry with a neighbour ("high up", "close up", "open air") and the captions
    never use the new pair ("low up", "closed air")."""
    for a, b in ((i - 1, i), (i, i + 1)):
        if 0 <= a and b < len(tokens.lower) and tokens.alpha[a] and tokens.alpha[b] and \
                lexicon.is_multiword((tokens.lower[a], tokens.lower[b])):
            pair = (tokens.lower[a], new) if b == i else (new, tokens.lower[b])
            if corpus is None or corpus.bigram(*pair) == 0:
                return True
    return False


def _replaced(caption: str, tokens: Tokens, start: int, end: int, new: str) -> Candidate | None:
    """The caption with tokens [start, end) replaced by `new`, cased like them, and an "a"/"an" right before
    fixed to agree with it: built from the token offsets, since the change is known (what
    candidates.replace_tokens and make_candidate would give, without diffing the two texts)."""
    new = match_case(tokens.texts[start], new)
    if new.lower() == " ".join(tokens.lower[start:end]):
        return None
    span_start = tokens.starts[start]
    span_end = tokens.starts[end - 1] + len(tokens.texts[end - 1])
    new_span = new
    k = start - 1
    while k >= 0 and tokens.texts[k].isspace():  # "a  busy street": spaCy gives the extra space a token
        k -= 1
    if k >= 0 and tokens.lower[k] in ("a", "an"):
        article = match_case(tokens.texts[k], indefinite_article(new))
        if article != tokens.texts[k]:
            span_start = tokens.starts[k]
            between = caption[span_start + len(tokens.texts[k]):tokens.starts[start]]
            new_span = article + between + new
    return Candidate(REPLACE, caption[:span_start] + new_span + caption[span_end:], caption[span_start:span_end],
                     new_span, span_start, span_end)


def _forms(inflector: Inflector, lexicon: Lexicon, new: str, pos: str) -> tuple[int, ...]:
    """The corpus word_keys of the forms another caption could use: "sink", "sinks"; "sit", "sits", "sitting",
    "sat". Kept per lexicon: the same few hundred replacements come up in every batch."""
    cache = lexicon.__dict__.setdefault("replacement_forms", {})
    if (new, pos) not in cache:
        lemma = lexicon.lemma(new, pos) or new
        if pos == NOUN:
            forms = {new, lemma, inflector.plural(lemma)}
        else:
            forms = {new, lemma, *(inflector.verb(lemma, tag) for tag in ("VBZ", "VBG", "VBD", "VBN"))}
        cache[new, pos] = tuple(word_key(f) for f in sorted(forms))
    return cache[new, pos]


def _named_for_image(named: frozenset[int] | None, inflector: Inflector, lexicon: Lexicon, tokens: Tokens,
                     start: int, new: str, atom: str) -> bool:
    """A new object or action that a caption of the same photo names (`named`: the photo's word_keys): the
    negative may be true of the photo."""
    if not named:
        return False
    if atom == "object":
        pos = NOUN
    elif atom == "relation" and coarse_pos(tokens.tags[start]) == "VERB":
        pos = VERB
    else:
        return False
    return any(k in named for k in _forms(inflector, lexicon, new, pos))


def replace_candidates(doc, lexicon: Lexicon, inflector: Inflector, corpus=None,
                       limit: int = MAX_CANDIDATES, image_words: frozenset[int] | None = None
                       ) -> list[tuple[Candidate, str]]:
    """Every legal (candidate, atom kind) pair, up to `limit`, atoms taken round-robin so each is represented.
    `corpus` (corpus.CorpusModel of the input captions) holds the vocabulary and bigrams a replacement must
    fit (None: no corpus check); `image_words` the word_keys of what the captions of this caption's photo name
    (corpus.image_words_of; None: unknown)."""
    tokens = Tokens.of(doc)
    caption = tokens.caption
    atoms = [(s, e, opts, "relation", None) for s, e, opts in _preposition_atoms(tokens, lexicon)]
    fixed, compounds = compound_tokens(tokens, lexicon)
    taken = {i for s, e, *_ in atoms for i in range(s, e)} | fixed
    if corpus is None:
        taken |= set(compounds)
    atoms += list(_word_atoms(tokens, lexicon, taken)) + list(_number_atoms(tokens, taken))
    nouns = [(j, lexicon.lemma(w, NOUN) or w) for j, w in enumerate(tokens.lower) if tokens.tags[j] in NOUN_TAGS]
    found, seen = [], set()
    for rank in range(max((len(a[2]) for a in atoms), default=0)):
        if len(found) >= limit:
            break
        for start, end, options, atom, tag in atoms:
            if rank >= len(options) or len(found) >= limit:
                continue
            new = _inflect(inflector, options[rank], tag)
            if corpus is not None and not _fits(corpus, tokens, start, end, new, atom, lexicon, nouns):
                continue
            if end - start == 1 and _breaks_entry(tokens, start, new, lexicon, corpus):
                continue
            if start in compounds:
                if corpus is None:
                    continue
                partner, first = compounds[start]
                used = corpus.bigram(tokens.lower[partner], new) if first else corpus.bigram(new, tokens.lower[partner])
                if used < MIN_WORD_COUNT:
                    continue
            if atom == "object" and new in tokens.lower:  # "a sink, a mirror and a sink": a repeated item
                continue
            candidate = _replaced(caption, tokens, start, end, new)
            if candidate is None or candidate.text in seen:
                continue
            if any(lexicon.shares_synset(a, b) for a in tokens.lower[start:end] if a not in STOP_ARTICLES
                   for b in new.lower().split() if b not in STOP_ARTICLES):
                continue
            if _named_for_image(image_words, inflector, lexicon, tokens, start, new, atom):
                continue  # "a tub and toilet" -> "a sink and toilet" where another caption says "sink"
            seen.add(candidate.text)
            found.append((candidate, atom))
    return found
