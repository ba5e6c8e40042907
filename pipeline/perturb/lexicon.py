"""Word-level WordNet lookups for the REPLACE hard negatives, cached per word.

A replacement for a word is an antonym or a co-hyponym (a sibling under a shared hypernym, or a cousin
two levels up when the siblings are all rare) that:
- is a common word: its WordNet tag count (SemCor frequency over all its senses) is at least MIN_COUNT,
  and candidates are ranked by that count ("mastodon" never replaces "elephant");
- means the same kind of thing: its most frequent sense is in the same lexicographer file as the sense
  of the original it was reached from (noun.animal for "dog", never "head" through a rare sense);
- is never a synonym: it shares no synset, in any part of speech, with the original, and is not a
  hypernym or hyponym of the original's senses ("dog" -> "animal" or "puppy" is not a negative).
Only the original's dominant senses are followed (WordNet lists senses by frequency).
"""
from __future__ import annotations

from functools import lru_cache

from pipeline.perturb.rule_data import listed_near_synonyms

NOUN, VERB, ADJ = "n", "v", "a"
POS_LIST = (NOUN, VERB, ADJ, "r")  # NLTK's order: what wn.synsets() looks through without a pos
MIN_COUNT = 2
MAX_CANDIDATES = 12
# Above this Wu-Palmer similarity two senses are one thing for a photo (rock/stone, plane/airplane). Valid
# contrasts reach 0.94 (sheep/goat), so the curated near-synonym groups in data/ do the rest.
NEAR_SYNONYM_WUP = 0.95
# Colours are adjectives in captions and nouns in WordNet's taxonomy: co-hyponyms of "chromatic color"
# and "achromatic color", listed here as their adjective forms.
COLOURS = ("black", "white", "red", "blue", "green", "yellow", "orange", "pink", "purple", "brown", "gray",
           "silver", "gold")
# Words that name a relation, a frame or a quantity rather than a thing in the picture.
NOT_REPLACED = frozenset("""
top front side back middle mid bottom lot lots couple group bunch pair piece kind type sort variety number
view picture image photo photograph shot closeup close background foreground area way edge corner end part
line row set one other thing things something it day time while many several few same different various
people person
be have do get go make let take look appear seem include contain show feature""".split())
# Verbs too general to be a meaningful replacement.
GENERIC_VERBS = frozenset("be have do get go make let take give put become seem".split())
# Never generated: slurs and sexual terms WordNet lists as co-hyponyms of everyday words ("girl").
BLOCKED = frozenset("whore prostitute slut bitch bastard mistress harlot hooker wench tart".split())
# WordNet's people are mostly roles a photo cannot show or that overlap ("liberal", "host", "skier" for a
# man): a person is replaced only between these, which a photo tells apart.
PERSON_WORDS = ("man", "woman", "boy", "girl", "baby")
# Plurals that name persons in captions whatever WordNet's first sense ("people" is a nation there).
PEOPLE_WORDS = frozenset({"people", "persons", "folks"})
# Noun senses a photo can show; a word's visual senses are preferred over more frequent abstract ones
# ("table" the furniture, not the data table).
VISUAL_LEXNAMES = frozenset(f"noun.{n}" for n in
                            "artifact animal person food plant object body substance location".split())
# Synset type digit of a WordNet sense key -> part of speech (5 = adjective satellite).
SENSE_KEY_POS = {"1": NOUN, "2": VERB, "3": ADJ, "4": "r", "5": ADJ}
SYNSET_POS = {"1": "n", "2": "v", "3": "a", "4": "r", "5": "s"}  # as NLTK names a synset's pos


class Lexicon:
    """Cached WordNet lookups; one per worker (the reader takes a few seconds to load)."""

    def __init__(self, wordnet):
        self.wn = wordnet
        # SemCor tag counts by sense key, read once: NLTK's Lemma.count() binary-searches the file per call.
        with wordnet.open("cntlist.rev") as f:
            self.tag_counts = {key: int(n) for key, _, n in (line.split() for line in f.read().splitlines() if line)}
        # The same counts summed per (lemma, part of speech), straight from the sense keys
        # ("dog%1:05:00::" is lemma "dog", synset type 1 = noun): most co-hyponyms are rare and this
        # rejects them without loading their synsets.
        self.lemma_counts: dict[tuple[str, str], int] = {}
        for key, n in self.tag_counts.items():
            lemma, _, rest = key.partition("%")
            pos = SENSE_KEY_POS.get(rest[:1])
            if pos is not None:
                self.lemma_counts[lemma, pos] = self.lemma_counts.get((lemma, pos), 0) + n
        # Every synset with at least one common lemma, from index.sense (sense key -> synset offset).
        # Siblings and cousins are looked up only among these: loading a synset through NLTK costs a file
        # seek and parse, and most co-hyponyms are rare words that would be rejected anyway.
        self.common_synsets: set[tuple[str, int]] = set()
        with wordnet.open("index.sense") as f:
            for line in f.read().splitlines():
                key, offset = line.split(maxsplit=2)[:2]
                lemma, _, rest = key.partition("%")
                if self.lemma_counts.get((lemma, SENSE_KEY_POS.get(rest[:1])), 0) >= MIN_COUNT:
                    self.common_synsets.add((SYNSET_POS[rest[:1]], int(offset)))
        # The first words of WordNet's multiword entries and of its multiword exception forms ("fire" of
        # "fire_hydrant"): most caption word pairs start with none of them and need no morphy call.
        self.multiword_firsts = frozenset(
            key.partition("_")[0] for table in (wordnet._lemma_pos_offset_map, *wordnet._exception_map.values())
            for key in table if "_" in key)
        self.senses = lru_cache(maxsize=200_000)(self._senses)
        self.ancestors = lru_cache(maxsize=200_000)(self._ancestors)
        self.lineage = lru_cache(maxsize=200_000)(lambda synset: self.ancestors(synset) | {synset})
        # Bounded by the vocabulary, not by the input size.
        self.lemma = lru_cache(maxsize=200_000)(self._lemma)
        self.count = lru_cache(maxsize=200_000)(self._count)
        self.synsets = lru_cache(maxsize=200_000)(self._synsets)
        self.replacements = lru_cache(maxsize=100_000)(self._replacements)
        self._dominant = lru_cache(maxsize=100_000)(lambda lemma, pos: tuple(self._dominant_senses(lemma, pos)))
        self.noun_class = lru_cache(maxsize=100_000)(self._noun_class)
        self.noun_lemma = lru_cache(maxsize=200_000)(self._noun_lemma)
        self.hypernym_names = lru_cache(maxsize=100_000)(self._hypernym_names)
        self.is_multiword = lru_cache(maxsize=200_000)(self._is_multiword)
        self.near_synonyms = lru_cache(maxsize=200_000)(self._near_synonyms)
        self.depth = lru_cache(maxsize=200_000)(lambda synset: synset.max_depth() + 1)

    def _lemma(self, word: str, pos: str) -> str | None:
        return self.wn.morphy(word.lower(), pos)

    def _noun_lemma(self, word: str, plural: bool) -> str | None:
        """The noun's lemma; for a plural, the base form before the word itself ("men" -> "man": WordNet
        also lists "men", the work force)."""
        word = word.lower()
        if plural:
            forms = [f for f in self.wn._morphy(word, NOUN) if f != word]
            if forms:
                return forms[0]
        return self.lemma(word, NOUN)

    def _count(self, lemma: str, pos: str) -> int:
        """SemCor tag count of the lemma over all its senses in that part of speech (satellites are adjectives)."""
        return self.lemma_counts.get((lemma.lower(), pos), 0)

    @staticmethod
    def _ancestors(synset) -> frozenset:
        return frozenset(synset.closure(lambda x: x.hypernyms() + x.instance_hypernyms()))

    def _senses(self, word: str, pos: str) -> tuple:
        return tuple(self.wn.synsets(word, pos))

    def _synsets(self, word: str) -> frozenset[tuple[str, int]]:
        """Every synset of the word in any part of speech, found as NLTK's wn.synsets() finds them (through
        morphy), as (part of speech, offset): one per synset, read from the index without loading the synsets
        from the data files (asked of every word a replacement touches)."""
        index = self.wn._lemma_pos_offset_map
        return frozenset((pos, offset) for pos in POS_LIST for form in self.wn._morphy(word.lower(), pos)
                         for offset in index[form].get(pos, ()))

    def shares_synset(self, a: str, b: str) -> bool:
        return bool(self.synsets(a) & self.synsets(b))

    def noun_class_of(self, word: str, plural: bool) -> str | None:
        """The lexicographer file of a caption noun as written: a plural's base form first ("men" is "man", not
        the work force), and "people" persons, as captions mean them."""
        if word.lower() in PEOPLE_WORDS:
            return "noun.person"
        return self.noun_class(self.noun_lemma(word, plural) or word) if plural else self.noun_class(word)

    def _noun_class(self, word: str) -> str | None:
        """The lexicographer file of the word's dominant noun sense (noun.person, noun.animal, ...)."""
        lemma = self.lemma(word, NOUN)
        senses = self._dominant(lemma, NOUN) if lemma else ()
        return senses[0].lexname() if senses else None

    def _hypernym_names(self, word: str) -> frozenset[str]:
        """Names of the dominant noun senses of the word and of all their hypernyms ("bench" -> seat.n.03, ...)."""
        lemma = self.lemma(word, NOUN)
        names = set()
        for s in self._dominant(lemma, NOUN) if lemma else ():
            names.add(s.name())
            names.update(a.name() for a in self.ancestors(s))
        return frozenset(names)

    def _is_multiword(self, words: tuple[str, ...]) -> bool:
        """Whether the words form one WordNet entry ("fire hydrant", "little league", "hot dogs"): whether
        wn.synsets() of the joined words finds any, asked of the index through NLTK's own morphy, without
        reading the synsets from the data files (asked for every word pair of every caption)."""
        joined = "_".join(w.lower() for w in words)
        if joined.partition("_")[0] not in self.multiword_firsts:
            return False  # morphy changes only a word's ending: no entry can start with this word
        return any(self.wn._morphy(joined, pos) for pos in POS_LIST)

    def _near_synonyms(self, a: str, b: str, pos: str) -> bool:
        """a and b (lemmas) name the same thing for a photo: a shared synset, one a hypernym of the other, a
        Wu-Palmer similarity of their dominant senses over NEAR_SYNONYM_WUP, or one curated group."""
        if a == b or listed_near_synonyms(a, b) or self.shares_synset(a, b):
            return True
        senses_a, senses_b = self._dominant(a, pos), self._dominant(b, pos)
        for x in senses_a:
            for y in senses_b:
                if x in self.ancestors(y) or y in self.ancestors(x):
                    return True
                # wup <= 2 min(d) / (d(x) + d(y)): senses of unequal depth never reach the threshold
                dx, dy = self.depth(x), self.depth(y)
                if pos == NOUN and 2 * min(dx, dy) / (dx + dy) >= NEAR_SYNONYM_WUP and \
                        self.wup(x, y) >= NEAR_SYNONYM_WUP:
                    return True
        return False

    def wup(self, x, y) -> float:
        """Wu-Palmer similarity of two noun senses, 2 d(lcs) / (d(x) + d(y)) with d the depth from WordNet's
        root counting the sense itself, from cached depths (NLTK's wup_similarity re-reads the database
        version from disk on every call)."""
        common = self.lineage(x) & self.lineage(y)
        if not common:
            return 0.0
        return 2 * max(self.depth(s) for s in common) / (self.depth(x) + self.depth(y))

    def _dominant_senses(self, lemma: str, pos: str) -> list:
        senses = [s for s in self.wn.synsets(lemma, pos) if lemma in s.lemma_names()]
        if not senses:
            return []
        if pos == NOUN:  # a word's visual senses first ("table" the furniture, not the data table)
            visual = [s for s in senses[:3] if s.lexname() in VISUAL_LEXNAMES]
            senses = visual or senses
        counts = [sum(self.tag_counts.get(lem.key(), 0) for lem in s.lemmas() if lem.name() == lemma) for s in senses]
        top = max(counts[0], 1)
        # The first sense always; later ones only where about as frequent as the first.
        return [senses[0]] + [s for s, c in zip(senses[1:3], counts[1:3], strict=True) if c * 2 >= top and c > 0]

    def _replacements(self, lemma: str, pos: str) -> tuple[str, ...]:
        """Ranked replacement lemmas for `lemma` (same part of speech), most common first."""
        if lemma in NOT_REPLACED:
            return ()
        if pos == ADJ and lemma in COLOURS:
            return tuple(c for c in COLOURS if c != lemma and not self.shares_synset(c, lemma))
        senses = self._dominant(lemma, pos)
        if not senses:
            return ()
        related = set()  # hypernyms of the original (hyponyms are caught in _acceptable): never a negative
        for s in senses:
            related.update(self.ancestors(s))
        lexnames = {s.lexname() for s in senses}
        if "noun.person" in lexnames:
            return tuple(w for w in PERSON_WORDS if w != lemma) if lemma in PERSON_WORDS else ()
        ranked = []
        # Cousins only when antonyms and siblings give too few: pools are built lazily, in that order.
        pools = [self._antonyms(senses, pos)]
        if pos != ADJ:  # adjectives have no hypernyms in WordNet: antonyms only
            pools += [self._siblings(senses, related), self._cousins(senses, related)]
        for pool in pools:
            good = {w for w, reached in pool if self._acceptable(w, reached, lemma, pos, lexnames, related)}
            ranked.extend(sorted(good - set(ranked), key=lambda w: (-self.count(w, pos), w)))
            if len(ranked) >= 3:
                break
        return tuple(ranked[:MAX_CANDIDATES])

    @staticmethod
    def _antonyms(senses, pos: str):
        for s in senses:
            for lem in s.lemmas():
                yield from ((a.name(), None) for a in lem.antonyms())
            if pos == ADJ:  # indirect antonyms through the adjective cluster ("huge" ~ "large" <-> "small")
                for similar in s.similar_tos():
                    for lem in similar.lemmas():
                        yield from ((a.name(), None) for a in lem.antonyms())

    def _siblings(self, senses, related: set):
        for s in senses:
            for parent in s.hypernyms() + s.instance_hypernyms():
                for sibling in self._common_hyponyms(parent, instances=True):
                    if sibling not in senses and sibling not in related:
                        yield from ((w, sibling) for w in sibling.lemma_names())

    def _cousins(self, senses, related: set):
        for s in senses:
            for parent in s.hypernyms() + s.instance_hypernyms():
                for grandparent in parent.hypernyms():
                    for uncle in grandparent.hyponyms():
                        if uncle == parent or uncle in related:
                            continue
                        for cousin in self._common_hyponyms(uncle, instances=False):
                            if cousin not in related:
                                yield from ((w, cousin) for w in cousin.lemma_names())

    def _common_hyponyms(self, synset, instances: bool) -> list:
        """The synset's hyponyms that have a common lemma, without loading the others: NLTK's Synset keeps
        its pointers as (pos, offset) pairs; a reader without them goes through the public API."""
        symbols = ("~", "~i") if instances else ("~",)
        pointers = getattr(synset, "_pointers", None)
        if pointers is None:
            found = synset.hyponyms() + (synset.instance_hyponyms() if instances else [])
            return [h for h in found if (h.pos(), h.offset()) in self.common_synsets]
        return [self.wn.synset_from_pos_and_offset(pos, offset)
                for symbol in symbols for pos, offset in sorted(pointers.get(symbol, ()))
                if (pos, offset) in self.common_synsets]

    def _acceptable(self, word: str, reached, original: str, pos: str, lexnames: set, related: set) -> bool:
        # Cheap tests first: most co-hyponyms are rare words, rejected here without loading a synset.
        if not word.isalpha() or not word.islower() or word == original or word in BLOCKED:
            return False
        if word in NOT_REPLACED or (pos == VERB and word in GENERIC_VERBS) or self.count(word, pos) < MIN_COUNT:
            return False
        if self.lemma(word, pos) != word:  # an inflected form listed as a lemma ("marbles")
            return False
        own = self.senses(word, pos)
        if not own or own[0] in related or self.ancestors(own[0]) & set(self._dominant(original, pos)):
            return False  # a hypernym or a hyponym of the original ("animal", "puppy" for "dog")
        if pos != ADJ and own[0].lexname() not in lexnames:
            return False
        if reached is not None and reached not in own[:2]:  # reached through a rare sense of the word
            return False
        return not self.shares_synset(word, original)


def kind_of(token, lexicon: Lexicon) -> str | None:
    """The lexicographer file of a parsed caption noun (a spaCy token), as Lexicon.noun_class_of reads it."""
    return lexicon.noun_class_of(token.lower_, token.tag_ in ("NNS", "NNPS"))
